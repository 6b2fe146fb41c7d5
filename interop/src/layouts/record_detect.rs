//! Detection of the record formats (ArrayRecord, TFRecord, WebDataset) by a file's first
//! bytes: a leaf over the layouts, so that none of them depends on another.

use guideloom_storage::StorageDir;

use crate::format::ForeignFormat;

/// The record format of file `name` of `dir`, where its first bytes say it unambiguously:
/// the riegeli/records signature (ArrayRecord), the ustar magic at byte 257 (a WebDataset
/// tar), a first TFRecord length whose masked crc32c matches; and a gzip file named
/// `*.tar.gz`/`*.tgz` (WebDataset) or `*.tfrecord.gz` (TFRecord). `None` otherwise (and for
/// formats this build does not read).
pub(crate) fn detect(dir: &dyn StorageDir, name: &str) -> Option<ForeignFormat> {
    let len = dir.file_len(name).ok()??;
    let mut head = vec![0u8; len.min(512) as usize];
    dir.read_at(name, 0, &mut head).ok()?;
    #[cfg(feature = "arrayrecord")]
    if crate::layouts::arrayrecord::is_riegeli(&head) {
        return Some(ForeignFormat::ArrayRecord);
    }
    if head.get(257..262) == Some(b"ustar") {
        return Some(ForeignFormat::WebDataset);
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
            return Some(ForeignFormat::WebDataset);
        }
        if name.ends_with(".tfrecord.gz") {
            return Some(ForeignFormat::TfRecord);
        }
        return None;
    }
    #[cfg(feature = "tfrecord")]
    if head.len() >= 16 && crate::layouts::tfrecord::length_crc_matches(&head) {
        return Some(ForeignFormat::TfRecord);
    }
    None
}
