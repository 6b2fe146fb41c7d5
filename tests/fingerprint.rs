//! Issue 18: the library's legacy fingerprint of a foreign dataset (hashing its path as given)
//! is the one the versions before issue 18 wrote. It hashes a path relative to the repository
//! root, the working directory of these tests; the binary's side of the regression is in
//! cli/tests/regression.rs (`issue18_foreign_dataset_state_resumes_from_another_path_or_url`).

use guideloom::interop::{ForeignDataset, ForeignOptions};
use guideloom::loader::{DataSource, StreamWindows};

/// Moved from `issue18_foreign_dataset_state_resumes_from_another_path_or_url` (the binary's
/// tests run in cli/, where the relative path the pinned fingerprint hashes does not resolve).
#[test]
fn issue18_the_library_legacy_fingerprint_is_the_one_that_version_wrote() {
    let rel = "storage/tests/data/interop/npy/dir_tokens";
    let data = ForeignDataset::open(rel, &ForeignOptions::new()).unwrap();
    let ids = guideloom::formats::TokenFormat::<u16>::new();
    let source = |d: &ForeignDataset| {
        let r = d.reader(ids, guideloom::storage::ReadOptions::default()).unwrap();
        StreamWindows::with_stride(r, 3, 2).unwrap().fingerprint()
    };
    assert_eq!(source(&data.with_legacy_fingerprint()), 7_368_000_690_184_982_136);
    assert_eq!(source(&data), 8_679_015_198_797_087_260);
}
