//! Issue 26, item 3: one conformance suite for the file-access seam
//! (`guideloom_storage::conformance`), run over every directory of this crate and the
//! power-loss test file system; the remote directory runs it against the S3 test server in
//! the facade's tests (tests/remote.rs). Also: two commits to one local storage at once, one
//! wins and the other is refused, nothing committed lost.

use std::sync::{Arc, Barrier};

use guideloom_formats::TokenFormat;
use guideloom_storage::conformance;
use guideloom_storage::{
    LocalDir, MemDir, StorageDir, StorageError, StreamReader, StreamWriter, Window, WriteDir,
};

use crate::power_loss::PowerCutDir;

#[test]
fn issue26_local_dir_keeps_the_storage_dir_contract() {
    let tmp = tempfile::tempdir().unwrap();
    // Not created yet: `create_dir` makes it.
    conformance::check_all(&LocalDir::new(tmp.path().join("dir")));
}

#[test]
fn issue26_mem_dir_keeps_the_storage_dir_contract() {
    conformance::check_all(&MemDir::new());
}

#[test]
fn issue26_the_power_loss_file_system_keeps_the_storage_dir_contract() {
    conformance::check_all(&PowerCutDir::new(None));
}

/// The read half over a directory written by other means (a `MemDir` copy of a local one).
#[test]
fn issue26_a_mem_dir_copied_from_a_local_one_reads_as_the_contract_says() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, bytes) in conformance::fixture() {
        std::fs::write(tmp.path().join(name), bytes).unwrap();
    }
    conformance::check_read(&MemDir::copy_of(tmp.path()).unwrap());
    conformance::check_read(&LocalDir::new(tmp.path()));
}

/// Two writers commit to one local storage at the same moment (the second got around the
/// writer lock, its file removed under the first): exactly one commit wins, the other gets
/// `ConcurrentCommit`, and the storage holds exactly the winner's data on top of what was
/// committed before.
#[test]
fn issue26_two_local_commits_at_once_one_wins_the_other_is_refused_and_nothing_is_lost() {
    for round in 0..20u16 {
        let tmp = tempfile::tempdir().unwrap();
        let dir: Arc<dyn WriteDir> = Arc::new(LocalDir::new(tmp.path()));
        let mut first = StreamWriter::open_in(Arc::clone(&dir), TokenFormat::<u16>::new()).unwrap();
        first.append(0, &[1, 2, 3]).unwrap();
        first.commit().unwrap();
        // A second writer waits for the lock; one that gets around it reads the same manifest.
        let e = StreamWriter::open_in(Arc::clone(&dir), TokenFormat::<u16>::new()).unwrap_err();
        assert!(matches!(e, StorageError::Locked { .. }), "{e}");
        std::fs::remove_file(tmp.path().join(".writer.lock")).unwrap();
        let mut second = StreamWriter::open_in(Arc::clone(&dir), TokenFormat::<u16>::new()).unwrap();
        first.append(1, &[u32::from(10 + round), 11]).unwrap();
        second.append(2, &[u32::from(20 + round)]).unwrap();
        let barrier = Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                barrier.wait();
                first.commit()
            });
            let b = s.spawn(|| {
                barrier.wait();
                second.commit()
            });
            (a.join().unwrap(), b.join().unwrap())
        });
        let expected: Vec<u16> = match (&a, &b) {
            (Ok(()), Err(StorageError::ConcurrentCommit { path }))
            | (Err(StorageError::ConcurrentCommit { path }), Ok(())) => {
                assert_eq!(path, &tmp.path().join("manifest.json"));
                if a.is_ok() {
                    vec![1, 2, 3, 10 + round, 11]
                } else {
                    vec![1, 2, 3, 20 + round]
                }
            }
            other => panic!("round {round}: expected one commit and one ConcurrentCommit, got {other:?}"),
        };
        let r = StreamReader::open(tmp.path(), TokenFormat::<u16>::new()).unwrap();
        assert_eq!(r.read(Window::new(0, r.len())).unwrap(), expected, "round {round}");
        guideloom_storage::verify(tmp.path()).unwrap();
        let sd: &dyn StorageDir = &*dir;
        assert_eq!(sd.file_len("manifest.json.tmp").unwrap(), None, "no temporary manifest is left");
    }
}
