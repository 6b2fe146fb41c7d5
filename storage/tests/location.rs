//! Storage locations by URL and the retry policy's arithmetic (issue 18); the remote reads
//! themselves are tested against an S3 server in the facade's `tests/remote.rs`.

use std::path::PathBuf;
use std::time::Duration;

use guideloom_storage::{RetryPolicy, StorageLocation};

#[test]
fn urls_of_object_stores_are_remote_and_everything_else_is_a_local_path() {
    let remote = |s: &str| StorageLocation::Remote(s.to_string());
    assert_eq!(StorageLocation::parse("s3://bucket/data/train/"), remote("s3://bucket/data/train"));
    assert_eq!(StorageLocation::parse("S3://bucket/x"), remote("s3://bucket/x"));
    assert_eq!(StorageLocation::parse("gs://b/p"), remote("gs://b/p"));
    assert_eq!(StorageLocation::parse("az://container/p"), remote("az://container/p"));
    assert_eq!(StorageLocation::parse("https://host/a/b"), remote("https://host/a/b"));
    assert_eq!(
        StorageLocation::parse("file:///srv/data"),
        StorageLocation::Local(PathBuf::from("/srv/data"))
    );
    assert_eq!(StorageLocation::parse("data/train"), StorageLocation::Local(PathBuf::from("data/train")));
    // An unknown scheme is a (strange) local path, never a request.
    assert_eq!(StorageLocation::parse("ftp://x/y"), StorageLocation::Local(PathBuf::from("ftp://x/y")));
    assert_eq!(StorageLocation::parse("s3://bucket/p").to_string(), "s3://bucket/p");
}

#[test]
fn a_local_location_opens_a_local_dir_without_any_feature() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = StorageLocation::Local(tmp.path().to_path_buf()).open().unwrap();
    assert_eq!(dir.local_dir(), Some(tmp.path()));
}

#[cfg(not(feature = "remote"))]
#[test]
fn a_remote_location_without_the_remote_feature_is_a_typed_error_naming_the_url() {
    match StorageLocation::parse("s3://bucket/p").open().unwrap_err() {
        guideloom_storage::StorageError::Remote { op: "open", url, .. } => assert_eq!(url, "s3://bucket/p"),
        e => panic!("expected a remote open error, got {e}"),
    }
}

#[test]
fn backoff_doubles_up_to_its_bound_and_the_budget_adds_every_attempt() {
    let p = RetryPolicy::default()
        .max_retries(4)
        .initial_backoff(Duration::from_millis(50))
        .max_backoff(Duration::from_millis(300))
        .timeout(Duration::from_secs(1));
    let bounds: Vec<u128> = (0..5).map(|a| p.backoff_bound(a).as_millis()).collect();
    assert_eq!(bounds, [50, 100, 200, 300, 300]);
    // 5 attempts of 1 s, waits of 50 + 100 + 200 + 300 ms between them.
    assert_eq!(p.budget(), Duration::from_millis(5650));
    assert_eq!(p.clone().max_retries(0).budget(), Duration::from_secs(1));
    // A huge attempt number saturates instead of overflowing.
    assert_eq!(p.backoff_bound(u32::MAX), Duration::from_millis(300));
}
