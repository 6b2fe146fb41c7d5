//! Property tests: random records and shard assignments round-trip.

use std::collections::BTreeMap;

use guideloom_formats::{SerdeFormat, TokenFormat};
use guideloom_storage::{DocumentReader, DocumentWriter, StreamReader, StreamWriter, Window};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn token_records_round_trip(records in prop::collection::vec((0u64..5, prop::collection::vec(0u32..70_000, 0..50)), 0..30)) {
        let dir = tempfile::tempdir().unwrap();
        let mut w = StreamWriter::open(dir.path(), TokenFormat::<u32>::new()).unwrap();
        let mut expected: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for (shard, rec) in &records {
            w.append(*shard, rec).unwrap();
            expected.entry(*shard).or_default().extend(rec);
        }
        w.commit().unwrap();
        let all: Vec<u32> = expected.values().flatten().copied().collect();
        let r = StreamReader::open(dir.path(), TokenFormat::<u32>::new()).unwrap();
        prop_assert_eq!(r.len(), all.len() as u64);
        prop_assert_eq!(r.read(Window::new(0, r.len())).unwrap(), all.clone());
        // Every window of length 7, the one ending at the stream's end included.
        for start in 0..(all.len() + 1).saturating_sub(7) {
            prop_assert_eq!(r.read(Window::new(start as u64, 7)).unwrap(), all[start..start + 7].to_vec());
        }
    }

    #[test]
    fn serde_documents_round_trip(docs in prop::collection::vec((0u64..4, any::<(String, Vec<i64>, Option<bool>)>()), 0..40)) {
        let dir = tempfile::tempdir().unwrap();
        let f = SerdeFormat::<(String, Vec<i64>, Option<bool>)>::new();
        let mut w = DocumentWriter::open(dir.path(), f).unwrap();
        let mut expected: BTreeMap<u64, Vec<_>> = BTreeMap::new();
        for (shard, d) in &docs {
            w.append(*shard, d).unwrap();
            expected.entry(*shard).or_default().push(d.clone());
        }
        w.commit().unwrap();
        let all: Vec<_> = expected.into_values().flatten().collect();
        let r = DocumentReader::open(dir.path(), f).unwrap();
        prop_assert_eq!(r.len(), all.len() as u64);
        let idx: Vec<u64> = (0..all.len() as u64).rev().collect();
        let mut got = r.get_many(&idx).unwrap();
        got.reverse();
        prop_assert_eq!(got, all);
    }
}
