//! Regression tests: each pins a bug that was found and fixed, and carries its issue number in
//! its name (`issue12_...` = issue 12, "One shape for every storage"). Regressions that count
//! threads live in the `threads` binary (`lifecycle::issue8_*`).

use guideloom_formats::TokenFormat;
use guideloom_loader::{DataSource, Loader, LoaderError, State, StreamWindows, TokenWindows, WindowLoader};
use guideloom_storage::{StorageError, StreamWriter};

use crate::acceptance::token_storage;
use crate::token_windows::u16_and_u32_storages;

/// Failing to open a storage is `LoaderError::Open` naming the directory, with the storage's
/// error as its source (not "record 0: ..."), for every storage source.
#[test]
fn issue12_open_failure_is_an_open_error_not_record_0() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let errors = [
        TokenWindows::<u16>::open(&missing, 8).unwrap_err(),
        TokenWindows::<u32>::open(&missing, 8).unwrap_err(),
        StreamWindows::open(&missing, TokenFormat::<u16>::new(), 8).unwrap_err(),
        guideloom_loader::MetaWindows::open(
            &missing,
            guideloom_formats::DocumentTokensFormat::<u16>::new(),
            8,
        )
        .unwrap_err(),
        guideloom_loader::Documents::open(&missing, guideloom_formats::RawBytesFormat).unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err.to_string(), format!("could not open the storage in {}", missing.display()));
        assert_eq!(err.record_index(), None);
        let source = std::error::Error::source(&err).expect("a source");
        assert_eq!(
            source.to_string(),
            format!("{} is not a guideloom storage (no manifest.json)", missing.display())
        );
        assert!(matches!(err, LoaderError::Open { source: StorageError::NotAStorage { .. }, .. }));
    }
    // A document storage is not a token stream.
    let docs = tmp.path().join("docs");
    let mut w = guideloom_storage::DocumentWriter::open(&docs, guideloom_formats::RawBytesFormat).unwrap();
    w.append(0, b"x").unwrap();
    w.commit().unwrap();
    assert!(matches!(
        TokenWindows::<u32>::open(&docs, 8),
        Err(LoaderError::Open { source: StorageError::KindMismatch { .. }, .. })
    ));
}

/// A window longer than a non-empty stream is an error at build naming `seq_len` and the token
/// count; an empty storage (or one of empty shards) is an empty source; `StreamWindows` stays
/// an empty source and says why on request.
#[test]
fn issue12_window_longer_than_the_stream_is_refused_at_build() {
    let (small, _large) = u16_and_u32_storages();
    for err in [
        TokenWindows::<u16>::open(small.path(), 1_001).unwrap_err(),
        TokenWindows::<i64>::open(small.path(), 5_000).unwrap_err(),
    ] {
        assert!(matches!(err, LoaderError::WindowTooLong { elements: 1_000, .. }), "{err}");
    }
    assert_eq!(
        TokenWindows::<u16>::open(small.path(), 1_001).unwrap_err().to_string(),
        "seq_len 1001 is longer than the stream's 1000 elements (tokens): not one window fits, so there is no batch"
    );
    assert_eq!(TokenWindows::<u16>::open(small.path(), 1_000).unwrap().len(), 1);
    let slow = StreamWindows::open(small.path(), TokenFormat::<u16>::new(), 1_001).unwrap();
    assert_eq!(slow.len(), 0);
    assert!(matches!(slow.check_fits(), Err(LoaderError::WindowTooLong { seq_len: 1_001, elements: 1_000 })));

    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    StreamWriter::open(&empty, TokenFormat::<u16>::new()).unwrap().finish().unwrap();
    let empty_shards = tmp.path().join("empty_shards");
    let mut w = StreamWriter::open(&empty_shards, TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[]).unwrap();
    w.append(3, &[]).unwrap();
    w.finish().unwrap();
    for dir in [&empty, &empty_shards] {
        let windows = TokenWindows::<u32>::open(dir, 4).unwrap();
        assert_eq!((windows.len(), windows.elements()), (0, 0));
        let collate = windows.collate();
        let loader = Loader::builder(windows).batch_size(2).collate(collate).build().unwrap();
        assert_eq!(loader.len(), 0);
        assert_eq!(loader.iter().count(), 0);
        let slow = StreamWindows::open(dir, TokenFormat::<u16>::new(), 4).unwrap();
        assert!(slow.check_fits().is_ok());
    }
}

/// A state taken over windows of 8 is refused by a loader over windows of 4 of the same
/// storage, naming the parameter that differs (`source.seq_len`, `source.stride`, expected vs
/// found); a state without window parameters (written before they were recorded) is still
/// refused by record count and fingerprint (the fingerprint includes seq_len and stride).
#[test]
fn issue12_resume_with_another_seq_len_or_stride_names_the_parameter() {
    let dir = token_storage();
    let strided = |seq, stride| {
        let reader =
            guideloom_storage::StreamReader::open(dir.path(), TokenFormat::<u16>::new()).expect("open");
        Loader::builder(StreamWindows::with_stride(reader, seq, stride).expect("valid"))
            .batch_size(1)
            .workers(0)
            .build()
            .expect("valid")
    };
    let loader = |seq| strided(seq, seq);
    let state = loader(8).iter().state();
    assert_eq!(
        state.source.window,
        Some(guideloom_loader::WindowParams { seq_len: 8, stride: 8, elements: 40 })
    );
    let mismatch = |loader: WindowLoader<TokenFormat<u16>>, state: &State| match loader.iter_from(state) {
        Err(LoaderError::StateMismatch { field, expected, found }) => (field, expected, found),
        other => panic!("unexpected {:?}", other.map(|it| it.state())),
    };
    assert_eq!(mismatch(loader(4), &state), ("source.seq_len", "4".into(), "8".into()));
    assert_eq!(mismatch(strided(8, 3), &state), ("source.stride", "3".into(), "8".into()));
    let err = loader(4).iter_from(&state).map(|_| ()).unwrap_err();
    assert_eq!(err.to_string(), "state mismatch: source.seq_len: the loader has 4, the state has 8");

    let mut s = state;
    s.source.window = None;
    assert!(matches!(
        loader(4).iter_from(&s),
        Err(LoaderError::StateMismatch { field: "source.records", .. })
    ));
    s.source.records = 10;
    assert!(matches!(
        loader(4).iter_from(&s),
        Err(LoaderError::StateMismatch { field: "source.fingerprint", .. })
    ));
    // An old state (no `window` key) of the same loader still resumes.
    let json = state.to_json();
    assert!(json.contains(r#""window":{"seq_len":8,"stride":8,"elements":40}},"#), "{json}");
    let old = State::from_json(&json.replace(r#","window":{"seq_len":8,"stride":8,"elements":40}"#, ""))
        .expect("old state");
    assert_eq!(old.source.window, None);
    assert_eq!(loader(8).iter_from(&old).expect("fits").count(), 5);
}

/// Issue 19, class 4 (arithmetic on user numbers): a state at batch `u64::MAX` on an unbounded
/// loader used to hang the iterator (its prefetch window saturated, so it never asked for the
/// batch it then waited for). Batch numbers past `MAX_BATCH_NUMBER` are refused; the largest
/// accepted one is served.
#[test]
fn issue19_arithmetic_on_user_numbers_state_at_u64_max_is_refused_not_a_hang() {
    use guideloom_loader::{RangeSource, MAX_BATCH_NUMBER};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let loader = Loader::builder(RangeSource::new(0, 10, 1).unwrap())
            .batch_size(4)
            .unbounded()
            .workers(2)
            .build()
            .unwrap();
        let mut results = Vec::new();
        for next_batch in [u64::MAX, MAX_BATCH_NUMBER + 1, MAX_BATCH_NUMBER] {
            let state = State { next_batch, ..loader.initial_state() };
            results.push(match loader.iter_from(&state) {
                Err(LoaderError::StatePastEnd { next_batch: n, total }) => Err((n, total)),
                Err(e) => panic!("unexpected {e}"),
                Ok(mut it) => Ok(it.next().unwrap().unwrap().number),
            });
        }
        let _ = tx.send(results);
    });
    let results = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("resuming hung");
    assert_eq!(
        results,
        [
            Err((u64::MAX, MAX_BATCH_NUMBER)),
            Err((MAX_BATCH_NUMBER + 1, MAX_BATCH_NUMBER)),
            Ok(MAX_BATCH_NUMBER)
        ]
    );
}

/// A state file of another kind (a stream-packed loader's, a hand-written fragment, a value
/// of the wrong type) is refused with an error naming the field it lacks or gets wrong, not
/// serde's "data did not match any variant of untagged enum StateRepr"; both layouts still
/// parse.
#[test]
fn issue19_state_of_another_kind_names_the_field_not_an_untagged_enum() {
    let message = |json: &str| match State::from_json(json) {
        Err(e @ LoaderError::StateJson(_)) => {
            let source = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default();
            assert!(!source.contains("untagged"), "{source}");
            source
        }
        other => panic!("expected StateJson, got {other:?}"),
    };
    // What `batches --pack stream-* --save-state` writes, fed to a window loader.
    let packed = r#"{"version":1,"next_batch":1,"upstream":{"version":2,"next_batch":2,"global_batch":2,"config":{"seed":0,"shuffle":true,"epochs":1,"drop_remainder":false},"source":{"records":3,"fingerprint":7}},"offset":0,"token":0,"rows":0,"fingerprint":1}"#;
    assert_eq!(message(packed), "missing field `global_batch`");
    assert_eq!(message(r#"{"version":2}"#), "missing field `next_batch`");
    let bad_seed = r#"{"version":2,"next_batch":3,"global_batch":2,"config":{"seed":-1,"shuffle":true,"epochs":1,"drop_remainder":false},"source":{"records":5,"fingerprint":7}}"#;
    assert_eq!(message(bad_seed), "invalid value: integer `-1`, expected u64");
    let v1_bad = r#"{"version":1,"next_batch":"x","config":{"seed":1,"shuffle":true,"epochs":3,"batch_size":8,"drop_remainder":false,"rank":0,"world_size":1},"source":{"records":10,"fingerprint":0}}"#;
    assert_eq!(message(v1_bad), "invalid type: string \"x\", expected u64");
    // Both layouts still read, each round-tripping to the same text.
    let v2 = r#"{"version":2,"next_batch":3,"global_batch":2,"config":{"seed":1,"shuffle":true,"epochs":1,"drop_remainder":false},"source":{"records":5,"fingerprint":7},"transforms_fingerprint":0}"#;
    assert_eq!(State::from_json(v2).expect("v2").to_json(), v2);
    let v1 = r#"{"version":1,"next_batch":4,"config":{"seed":1,"shuffle":true,"epochs":3,"batch_size":8,"drop_remainder":false,"rank":0,"world_size":1},"source":{"records":10,"fingerprint":0}}"#;
    let old = State::from_json(v1).expect("v1");
    assert_eq!((old.version, old.global_batch, old.to_json()), (1, 8, v1.to_string()));
}

/// A packing with rows longer than [`guideloom_loader::pack::MAX_ROW_TOKENS`] is refused when it is
/// built; it used to be accepted and then panic with "capacity overflow" (or try to allocate
/// five arrays of `seq_len` entries) on the first row: `guideloom batches --pack first-fit
/// --seq-len 18446744073709551615`.
#[test]
fn issue16_rows_too_long_to_allocate_are_refused_not_a_capacity_overflow_panic() {
    use guideloom_loader::pack::{PackConfig, PackPlan, PackStrategy, Packed, MAX_ROW_TOKENS};
    use guideloom_loader::stage::StagePacked;
    use guideloom_loader::transforms::Filter;
    use guideloom_loader::VecSource;
    assert_eq!(MAX_ROW_TOKENS, 1 << 32);
    #[allow(clippy::ptr_arg)]
    fn all(_: &Vec<u32>) -> bool {
        true
    }
    let strategies =
        [PackStrategy::ConcatSplit, PackStrategy::FirstFit { bins: 2 }, PackStrategy::BestFitDecreasing];
    for l in [MAX_ROW_TOKENS + 1, u64::MAX] {
        let want = format!(
            "invalid configuration: pack: rows of {l} tokens: more than the 4294967296 a row can hold"
        );
        for strategy in strategies {
            let e = PackPlan::new(&[3, 5], PackConfig::new(l, strategy)).unwrap_err();
            assert!(matches!(e, LoaderError::InvalidConfig { field: "pack", .. }), "{e}");
            assert_eq!(e.to_string(), want);
            let docs = VecSource::new(vec![vec![1u32, 2, 3]]);
            let e = Packed::scan(docs, PackConfig::new(l, strategy), 0u32, u32::MAX).unwrap_err();
            assert!(matches!(e, LoaderError::InvalidConfig { field: "pack", .. }), "{e}");
            assert_eq!(e.to_string(), want);
        }
        let loader = Loader::builder(Filter::new(
            VecSource::new(vec![vec![1u32, 2, 3]]),
            all as fn(&Vec<u32>) -> bool,
            1,
        ))
        .batch_size(1)
        .build()
        .unwrap();
        let e = StagePacked::new(
            loader,
            PackConfig::new(l, PackStrategy::FirstFit { bins: 1 }),
            1,
            0u32,
            u32::MAX,
        )
        .unwrap_err();
        assert!(matches!(e, LoaderError::InvalidConfig { field: "pack", .. }), "{e}");
        assert_eq!(e.to_string(), want);
    }
    // The largest allowed row still plans (no row is laid out here).
    let plan = PackPlan::new(&[3, 5], PackConfig::new(MAX_ROW_TOKENS, PackStrategy::ConcatSplit)).unwrap();
    assert_eq!(plan.rows(), 1);
}

/// With workers, the readahead lead is counted past the batches already in their hands (a hint
/// for a batch a worker is reading comes too late to help); it was counted from the consumer,
/// so 16 batches of readahead with 4 workers (8 batches in flight) hinted only 8 past them.
#[test]
fn issue18_readahead_lead_counts_past_the_batches_in_workers_hands() {
    let hints = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let source = crate::readahead::Hinted { len: 80, hints: std::sync::Arc::clone(&hints) };
    // 2 workers: 4 batches in flight (the default prefetch).
    let loader = Loader::builder(source).batch_size(4).workers(2).readahead(3).build().unwrap();
    let mut it = loader.iter();
    it.next().unwrap().unwrap();
    assert_eq!(hints.lock().unwrap().len(), 3, "batches 0, 1, 2 hinted before batch 0 (none dispatched)");
    it.next().unwrap().unwrap();
    // Batches 1 ..= 4 were dispatched after batch 0: batches 5, 6, 7 are the lead.
    assert_eq!(hints.lock().unwrap().len(), 8, "batches up to 7 hinted before batch 1");
    assert_eq!(hints.lock().unwrap()[7], vec![28, 29, 30, 31]);
}
