//! Megatron-Core indexed datasets (`src/layouts/megatron.rs`): every sample's sequences,
//! documents and pointers under every backend, the legacy and repaired indexes, and a 4 GiB+
//! `.bin` read back with u64 offsets.

use guideloom_formats::{IntTokenFormat, Primitive, TokenFormat};
use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions};
use guideloom_storage::{ReadOptions, StorageError, Window};

use crate::common::{assert_foreign, backends, check, open, opts, sample, EOT};

#[test]
fn megatron_gpt2_sequences_documents_and_pointers() {
    let d = open("megatron/gpt2_text_document", &opts(ForeignFormat::Megatron));
    assert_eq!((d.dtype(), d.elements()), (Primitive::U16, 14));
    let m = d.megatron().unwrap();
    assert_eq!(m.sequence_lengths(), [4, 3, 5, 2]);
    assert_eq!(m.sequence_pointers(), [0, 8, 14, 24]);
    assert_eq!(m.document_indices(), [0, 1, 2, 3, 4]);
    assert_eq!(m.dtype_code(), 8);
    let seqs: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT], &[301, 302, 303, 304, EOT], &[401, EOT]];
    check(&d, &seqs.concat(), Some(seqs));
    let r = d.reader(TokenFormat::<u16>::new(), ReadOptions::default()).unwrap();
    assert_eq!(r.read_many(&m.sequence_windows()).unwrap()[2], [301, 302, 303, 304, 50256]);
    // AC-MEG-05: get(seq=2, offset=1, length=3), and a range past the sequence.
    assert_eq!(r.read(m.sequence_range(2, 1, Some(3)).unwrap()).unwrap(), [302, 303, 304]);
    assert!(matches!(m.sequence_range(2, 3, Some(3)), Err(StorageError::OutOfRange { total: 5, .. })));
    assert!(matches!(m.sequence_range(4, 0, None), Err(StorageError::OutOfRange { total: 4, .. })));
    // The prefix may also be named by either file.
    assert_eq!(open("megatron/gpt2_text_document.idx", &ForeignOptions::new()).elements(), 14);
}

#[test]
fn megatron_llama3_int32() {
    let d = open("megatron/llama3_text_document", &ForeignOptions::new());
    assert_eq!((d.format(), d.dtype()), (ForeignFormat::Megatron, Primitive::I32));
    assert_eq!(d.megatron().unwrap().sequence_pointers(), [0, 20]);
    let seqs: &[&[i64]] = &[&[128000, 101, 102, 103, 128001], &[128000, 201, 202, 128001]];
    check(&d, &seqs.concat(), Some(seqs));
}

#[test]
fn megatron_other_and_sentences_with_an_empty_document() {
    let d = open("megatron/other_text_document", &ForeignOptions::new());
    let seqs: &[&[i64]] = &[&[501, 502, 503, 504, 505, EOT], &[601, 602, EOT]];
    check(&d, &seqs.concat(), Some(seqs));

    let d = open("megatron/sentences_text_sentence", &ForeignOptions::new());
    let m = d.megatron().unwrap();
    assert_eq!(m.document_indices(), [0, 2, 2, 3]);
    let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), ReadOptions::default()).unwrap();
    assert_eq!(r.read_many(&m.sequence_windows()).unwrap(), [vec![11, 12], vec![13, 14, 15], vec![21]]);
    check(&d, &[11, 12, 13, 14, 15, 21], Some(&[&[11, 12, 13, 14, 15], &[], &[21]]));
    assert_eq!(d.documents(), Some(&[0, 5, 5, 6][..]));
}

#[test]
fn megatron_multimodal_modes_or_trailing_bytes() {
    let d = open("megatron/multimodal_text_document", &ForeignOptions::new().multimodal(true));
    assert_eq!(d.megatron().unwrap().modes(), Some(&[0, 1, 2][..]));
    let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), ReadOptions::default()).unwrap();
    let seqs = r.read_many(&d.megatron().unwrap().sequence_windows()).unwrap();
    assert_eq!(seqs, [vec![7, 8], vec![9], vec![10, 11, 12]]);
    let e = ForeignDataset::open(sample("megatron/multimodal_text_document"), &ForeignOptions::new())
        .unwrap_err();
    assert_foreign(&e, "multimodal_text_document.idx", &ForeignError::TrailingBytes { count: 3 });
}

#[test]
fn megatron_repair_pointers_rebuilds_the_negative_one() {
    let options = opts(ForeignFormat::Megatron).repair_pointers(true);
    let d = open("malformed/megatron/negative_pointer", &options);
    assert_eq!(d.megatron().unwrap().repaired_pointers(), 1);
    assert_eq!(d.megatron().unwrap().sequence_pointers(), [0, 8, 14, 24]);
    let seqs: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT], &[301, 302, 303, 304, EOT], &[401, EOT]];
    check(&d, &seqs.concat(), Some(seqs));
    assert_eq!(open("megatron/gpt2_text_document", &options).megatron().unwrap().repaired_pointers(), 0);
}

#[test]
fn megatron_legacy_tntidx_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut idx = b"TNTIDX\0\0".to_vec();
    idx.extend_from_slice(&[0u8; 64]);
    std::fs::write(dir.path().join("old.idx"), idx).unwrap();
    std::fs::write(dir.path().join("old.bin"), b"").unwrap();
    let e = ForeignDataset::open(dir.path().join("old"), &opts(ForeignFormat::Megatron)).unwrap_err();
    assert_foreign(&e, "old.idx", &ForeignError::UnsupportedLegacyFormat { magic: "TNTIDX".into() });
}

#[test]
fn megatron_windows_span_sequences_exactly() {
    // AC 4: windows that start in one sequence and end in the next (and the next).
    let d = open("megatron/gpt2_text_document", &ForeignOptions::new());
    for (name, options) in backends() {
        let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), options).unwrap();
        let got = r.read_many(&[Window::new(2, 4), Window::new(6, 6), Window::new(11, 3)]).unwrap();
        assert_eq!(
            got,
            [vec![103, EOT, 201, 202], vec![EOT, 301, 302, 303, 304, EOT], vec![EOT, 401, EOT]],
            "{name}"
        );
    }
}

// ---- u64 offsets end to end (AC 6) ----

/// A Megatron dataset whose `.bin` is 2^32 + 10 bytes (sparse): sequence 0 holds 2^31 - 1
/// u16 tokens (2^32 - 2 bytes, zeros but its first and last token), sequence 1 one token at
/// byte 2^32 - 2, sequence 2 five tokens at byte 2^32 (pointer past 4 GiB).
#[test]
fn megatron_sparse_bin_past_4_gib_reads_with_u64_offsets() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().unwrap();
    let len0: u64 = (1 << 31) - 1;
    let lengths = [len0 as i32, 1, 5];
    let pointers: [i64; 3] = [0, (2 * len0) as i64, 1 << 32];
    let mut idx = b"MMIDIDX\0\0".to_vec();
    idx.extend_from_slice(&1u64.to_le_bytes());
    idx.push(8);
    idx.extend_from_slice(&3u64.to_le_bytes());
    idx.extend_from_slice(&4u64.to_le_bytes());
    lengths.iter().for_each(|l| idx.extend_from_slice(&l.to_le_bytes()));
    pointers.iter().for_each(|p| idx.extend_from_slice(&p.to_le_bytes()));
    [0i64, 1, 2, 3].iter().for_each(|d| idx.extend_from_slice(&d.to_le_bytes()));
    std::fs::write(dir.path().join("big.idx"), idx).unwrap();
    let mut bin = std::fs::File::create(dir.path().join("big.bin")).unwrap();
    bin.set_len((1 << 32) + 10).unwrap();
    bin.write_all(&7u16.to_le_bytes()).unwrap();
    bin.seek(SeekFrom::Start(2 * len0 - 2)).unwrap();
    let tail: [u16; 7] = [8, 9, 10, 11, 12, 13, 14];
    bin.write_all(&tail.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<_>>()).unwrap();
    drop(bin);
    let d = ForeignDataset::open(dir.path().join("big"), &ForeignOptions::new()).unwrap();
    let m = d.megatron().unwrap();
    assert_eq!(m.sequence_pointers(), [0, (1 << 32) - 2, 1 << 32]);
    assert_eq!(d.elements(), len0 + 6);
    assert_eq!(d.documents(), Some(&[0, len0, len0 + 1, len0 + 6][..]));
    for (name, options) in backends() {
        let r = d.reader(TokenFormat::<u16>::new(), options).unwrap();
        let got = r
            .read_many(&[
                Window::new(0, 2),
                Window::new(len0 - 2, 5),
                m.sequence(2).unwrap(),
                Window::new(len0 + 3, 3),
            ])
            .unwrap();
        assert_eq!(
            got,
            [vec![7, 0], vec![0, 8, 9, 10, 11], vec![10, 11, 12, 13, 14], vec![12, 13, 14]],
            "{name}"
        );
        assert_eq!(r.read(m.sequence_range(2, 2, Some(3)).unwrap()).unwrap(), [12, 13, 14], "{name}");
    }
}
