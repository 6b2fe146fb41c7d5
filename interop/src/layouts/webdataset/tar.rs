//! The members of a tar shard read in order (POSIX ustar / PAX / GNU as Python's
//! `tarfile` and GNU tar write them; headers decoded with the `tar` crate), nothing
//! extracted: every header's checksum checked, every size checked against the bytes left
//! before it is read, names checked (no absolute path, no `..`, no NUL), regular files only.

use std::io::Read;

use tar::{EntryType, Header, PaxExtensions};

use crate::error::ForeignError;
use crate::layouts::records::read_full;

/// Bytes of a tar block.
const BLOCK: u64 = 512;
/// The most bytes one member (or a PAX / long-name body) may hold: a sample's field, read
/// into memory.
const MAX_MEMBER: u64 = 1 << 30;

/// One regular member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// Its index among the archive's members (metadata headers not counted, as `tarfile`
    /// numbers them).
    pub(crate) index: u64,
    /// Its name (a PAX `path` or GNU long name applied).
    pub(crate) name: String,
    /// Its data.
    pub(crate) data: Vec<u8>,
    /// Where its first header (a PAX or long-name header, if any) begins.
    pub(crate) header_at: u64,
}

/// The members of one tar stream, from a header boundary.
pub(crate) struct Members {
    src: Box<dyn Read + Send>,
    /// The position of the next header.
    pub(crate) pos: u64,
    /// The index of the next member.
    pub(crate) member: u64,
    /// Bytes left from `pos` (unknown for a gzip stream).
    left: Option<u64>,
    ended: bool,
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Members").field("pos", &self.pos).field("member", &self.member).finish()
    }
}

/// What a member's type is called in errors.
fn type_name(t: EntryType) -> String {
    match t {
        EntryType::Symlink => "symlink".into(),
        EntryType::Link => "hard link".into(),
        EntryType::Char => "character device".into(),
        EntryType::Block => "block device".into(),
        EntryType::Fifo => "fifo".into(),
        EntryType::GNUSparse => "sparse file".into(),
        other => format!("type {:?}", char::from(other.as_byte())),
    }
}

/// Whether `name` stays inside the dataset: relative, no `..` component, no NUL.
fn safe(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('/') && !name.contains('\0') && !name.split('/').any(|c| c == "..")
}

impl Members {
    /// The members of `src`, whose first byte is at `pos` of the stream; `left` its bytes
    /// when known.
    pub(crate) fn new(src: Box<dyn Read + Send>, pos: u64, member: u64, left: Option<u64>) -> Self {
        Members { src, pos, member, left, ended: false }
    }

    /// `n` bytes of data (a size checked against what is left and [`MAX_MEMBER`]) and the
    /// padding after them; `Err(present)` when the stream ends first.
    fn data(&mut self, n: u64) -> Result<Vec<u8>, (u64, Option<ForeignError>)> {
        if let Some(left) = self.left {
            if n > left {
                return Err((left, None));
            }
        }
        let mut data = Vec::new();
        (&mut self.src).take(n).read_to_end(&mut data).map_err(|e| {
            (data.len() as u64, Some(ForeignError::DecompressionFailed { reason: e.to_string() }))
        })?;
        if (data.len() as u64) < n {
            return Err((data.len() as u64, None));
        }
        let pad = (BLOCK - n % BLOCK) % BLOCK;
        let mut skip = [0u8; BLOCK as usize];
        let got = read_full(&mut self.src, &mut skip[..pad as usize]).map_err(|e| (n, Some(e)))?;
        self.pos += n + got as u64;
        if let Some(left) = self.left.as_mut() {
            *left -= n + got as u64;
        }
        Ok(data)
    }

    /// The next regular member (`None` at the end-of-archive blocks or the stream's end).
    ///
    /// # Errors
    /// [`ForeignError::TarHeaderChecksum`], [`ForeignError::TarHeaderDecode`],
    /// [`ForeignError::TruncatedMember`], [`ForeignError::UnsafeMemberName`],
    /// [`ForeignError::UnsupportedMemberType`]; [`ForeignError::DecompressionFailed`] for a
    /// damaged gzip stream.
    pub(crate) fn next(&mut self) -> Result<Option<Member>, ForeignError> {
        if self.ended {
            return Ok(None);
        }
        let mut header_at = self.pos;
        let (mut long_name, mut pax_path, mut pax_size) = (None::<String>, None::<String>, None::<u64>);
        loop {
            let at = self.pos;
            let member = self.member;
            let decode = |reason: String| ForeignError::TarHeaderDecode { member, offset: at, reason };
            let mut block = [0u8; BLOCK as usize];
            let n = read_full(&mut self.src, &mut block)?;
            if n == 0 || (n == block.len() && block.iter().all(|&b| b == 0)) {
                self.ended = true;
                return Ok(None);
            }
            if n < block.len() {
                return Err(decode(format!("a header of {n} bytes")));
            }
            self.pos += BLOCK;
            if let Some(left) = self.left.as_mut() {
                *left -= BLOCK;
            }
            let header = Header::from_byte_slice(&block);
            let stored = header.cksum().map_err(|e| decode(e.to_string()))?;
            let computed: u32 = block
                .iter()
                .enumerate()
                .map(|(i, &b)| if (148..156).contains(&i) { u32::from(b' ') } else { u32::from(b) })
                .sum();
            if stored != computed {
                return Err(ForeignError::TarHeaderChecksum { member, offset: at });
            }
            let kind = header.entry_type();
            let size = match pax_size.take() {
                Some(s) if kind.is_file() => s,
                _ => header.entry_size().map_err(|e| decode(e.to_string()))?,
            };
            let raw_name = || {
                String::from_utf8(header.path_bytes().into_owned())
                    .map_err(|_| decode("a name that is not UTF-8".into()))
            };
            let name = match (&pax_path, &long_name) {
                (Some(p), _) => p.clone(),
                (None, Some(l)) => l.clone(),
                (None, None) => raw_name()?,
            };
            if size > MAX_MEMBER {
                return Err(decode(format!(
                    "member {name}: size {size} is above the {MAX_MEMBER}-byte limit"
                )));
            }
            let data = match self.data(size) {
                Ok(d) => d,
                Err((_, Some(e))) => return Err(e),
                Err((present, None)) => {
                    return Err(ForeignError::TruncatedMember { member, name, size, present })
                }
            };
            match kind {
                EntryType::XHeader => {
                    for ext in PaxExtensions::new(&data) {
                        let ext = ext.map_err(|e| decode(format!("a PAX record: {e}")))?;
                        match ext.key() {
                            Ok("path") => {
                                pax_path = Some(
                                    ext.value()
                                        .map_err(|_| decode("a PAX path that is not UTF-8".into()))?
                                        .to_string(),
                                )
                            }
                            Ok("size") => {
                                pax_size = Some(
                                    ext.value()
                                        .ok()
                                        .and_then(|v| v.parse().ok())
                                        .ok_or_else(|| decode("a PAX size that is not a number".into()))?,
                                )
                            }
                            _ => {}
                        }
                    }
                    continue;
                }
                EntryType::XGlobalHeader | EntryType::GNULongLink => continue,
                EntryType::GNULongName => {
                    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                    long_name = Some(
                        String::from_utf8(data[..end].to_vec())
                            .map_err(|_| decode("a long name that is not UTF-8".into()))?,
                    );
                    continue;
                }
                _ => {}
            }
            self.member += 1;
            if !safe(&name) {
                return Err(ForeignError::UnsafeMemberName { member, name });
            }
            match kind {
                EntryType::Regular | EntryType::Continuous => {
                    return Ok(Some(Member { index: member, name, data, header_at }))
                }
                EntryType::Directory => {
                    (long_name, pax_path, header_at) = (None, None, self.pos);
                    continue;
                }
                other => {
                    return Err(ForeignError::UnsupportedMemberType { member, name, kind: type_name(other) })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_names_are_told() {
        for bad in ["/etc/passwd", "../x.npy", "a/../../b", "a/..", "", "a\0b"] {
            assert!(!safe(bad), "{bad:?}");
        }
        for good in ["doc000000.npy", "dir.v1/sub.dir/k.input_ids.npy", "a/..b/c"] {
            assert!(safe(good), "{good:?}");
        }
    }

    /// Issue 33 (mutants of `type_name`): a member of a type other than a regular file or a
    /// directory is refused with its type's name: a symlink, a hard link and a fifo member;
    /// every name of the table.
    #[test]
    fn issue33_foreign_wds_an_unsupported_member_names_its_type() {
        for (kind, name) in [
            (EntryType::Symlink, "symlink"),
            (EntryType::Link, "hard link"),
            (EntryType::Char, "character device"),
            (EntryType::Block, "block device"),
            (EntryType::Fifo, "fifo"),
            (EntryType::GNUSparse, "sparse file"),
            (EntryType::new(b'V'), "type 'V'"),
        ] {
            assert_eq!(type_name(kind), name);
        }
        for (kind, want) in
            [(EntryType::Symlink, "symlink"), (EntryType::Link, "hard link"), (EntryType::Fifo, "fifo")]
        {
            assert_eq!(
                all([header(kind, "k.npy", 0), vec![0; 1024]].concat(), true),
                Err(ForeignError::UnsupportedMemberType {
                    member: 0,
                    name: "k.npy".into(),
                    kind: want.into()
                })
            );
        }
    }

    /// A ustar header block: `kind`, `name`, the size field `size`.
    fn header(kind: EntryType, name: &str, size: u64) -> Vec<u8> {
        let mut h = Header::new_ustar();
        h.set_entry_type(kind);
        h.set_path(name).unwrap();
        h.set_size(size);
        h.set_mode(0o644);
        h.set_cksum();
        h.as_bytes().to_vec()
    }

    /// `data` padded with zeros to whole blocks.
    fn padded(data: &[u8]) -> Vec<u8> {
        let mut d = data.to_vec();
        d.resize(data.len().div_ceil(BLOCK as usize) * BLOCK as usize, 0);
        d
    }

    /// PAX records (`"<len> <key>=<value>\n"`, the length counting itself).
    fn pax(records: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in records {
            let body = format!(" {k}={v}\n");
            let mut len = body.len() + 1;
            while len != body.len() + len.to_string().len() {
                len = body.len() + len.to_string().len();
            }
            out.extend(format!("{len}{body}").into_bytes());
        }
        out
    }

    /// Every regular member of `bytes` (its length known when `known`), or the first error.
    fn all(bytes: Vec<u8>, known: bool) -> Result<Vec<(String, Vec<u8>)>, ForeignError> {
        let len = bytes.len() as u64;
        let mut m = Members::new(Box::new(std::io::Cursor::new(bytes)), 0, 0, known.then_some(len));
        let mut out = Vec::new();
        while let Some(member) = m.next()? {
            out.push((member.name, member.data));
        }
        Ok(out)
    }

    /// Issue 33 (mutants of `data`'s checks and padding): a member whose data ends exactly at
    /// the end of the stream (no padding, no end blocks) is read; one claiming a block more
    /// than is there is truncated, with the bytes present, whether the stream's length is
    /// known or not (a gzip stream); a member of more than two blocks is padded to whole
    /// blocks, so the next member follows it.
    #[test]
    fn issue33_foreign_wds_member_data_at_the_stream_s_end_and_padding() {
        let data = vec![7u8; 512];
        let exact = [header(EntryType::Regular, "k.npy", 512), data.clone()].concat();
        for known in [true, false] {
            assert_eq!(all(exact.clone(), known), Ok(vec![("k.npy".into(), data.clone())]), "{known}");
            let short = [header(EntryType::Regular, "k.npy", 1024), data.clone()].concat();
            assert_eq!(
                all(short, known),
                Err(ForeignError::TruncatedMember {
                    member: 0,
                    name: "k.npy".into(),
                    size: 1024,
                    present: 512
                })
            );
        }
        let big: Vec<u8> = (0..2000u32).map(|i| i as u8).collect();
        let two = [
            header(EntryType::Regular, "a.npy", 2000),
            padded(&big),
            header(EntryType::Regular, "a.txt", 3),
            padded(b"abc"),
            vec![0; 1024],
        ]
        .concat();
        assert_eq!(all(two, true), Ok(vec![("a.npy".into(), big), ("a.txt".into(), b"abc".to_vec())]));
        // The bytes left are counted down past each member's data and padding: a second
        // member claiming more than is there is refused with exactly what is there.
        let then_short = [
            header(EntryType::Regular, "a.txt", 3),
            padded(b"abc"),
            header(EntryType::Regular, "b.npy", 4096),
            vec![1; 512],
        ]
        .concat();
        assert_eq!(
            all(then_short, true),
            Err(ForeignError::TruncatedMember { member: 1, name: "b.npy".into(), size: 4096, present: 512 })
        );
    }

    /// Issue 33 (mutants of the PAX `size` record and its `kind.is_file()` guard): a PAX size
    /// replaces the next header's size field when that header is a file's (here 600 bytes
    /// behind a field of 0); a directory after it keeps its own size (0), and the record is
    /// used up.
    #[test]
    fn issue33_foreign_wds_a_pax_size_applies_to_the_next_file_only() {
        let body = vec![5u8; 600];
        let records = pax(&[("size", "600")]);
        let file = [
            header(EntryType::XHeader, "./PaxHeaders/k.npy", records.len() as u64),
            padded(&records),
            header(EntryType::Regular, "k.npy", 0),
            padded(&body),
            vec![0; 1024],
        ]
        .concat();
        assert_eq!(all(file, true), Ok(vec![("k.npy".into(), body)]));
        let dir = [
            header(EntryType::XHeader, "./PaxHeaders/d", records.len() as u64),
            padded(&records),
            header(EntryType::Directory, "d/", 0),
            header(EntryType::Regular, "d/k.txt", 3),
            padded(b"abc"),
            vec![0; 1024],
        ]
        .concat();
        assert_eq!(all(dir, true), Ok(vec![("d/k.txt".into(), b"abc".to_vec())]));
    }

    /// Issue 33 (mutants of the member size limit `size > MAX_MEMBER`): a member of exactly
    /// 1 GiB passes the limit (and is then truncated here: the bytes are not there); one byte
    /// more is refused by the limit before anything is read.
    #[test]
    fn issue33_foreign_wds_the_member_size_limit_on_both_sides() {
        let at = |size: u64| all([header(EntryType::Regular, "k.npy", size), vec![0; 512]].concat(), true);
        assert_eq!(
            at(MAX_MEMBER),
            Err(ForeignError::TruncatedMember {
                member: 0,
                name: "k.npy".into(),
                size: MAX_MEMBER,
                present: 512
            })
        );
        assert_eq!(
            at(MAX_MEMBER + 1),
            Err(ForeignError::TarHeaderDecode {
                member: 0,
                offset: 0,
                reason: format!("member k.npy: size {} is above the {MAX_MEMBER}-byte limit", MAX_MEMBER + 1),
            })
        );
    }

    /// Issue 33 (mutant deleting the `XGlobalHeader | GNULongLink` arm): a PAX global header
    /// (Python's `tarfile` writes one for `pax_headers`) is not a member: the member after it
    /// is member 0.
    #[test]
    fn issue33_foreign_wds_a_global_header_is_not_a_member() {
        let records = pax(&[("comment", "guideloom")]);
        let bytes = [
            header(EntryType::XGlobalHeader, "pax_global_header", records.len() as u64),
            padded(&records),
            header(EntryType::Regular, "k.txt", 3),
            padded(b"abc"),
            vec![0; 1024],
        ]
        .concat();
        let len = bytes.len() as u64;
        let mut m = Members::new(Box::new(std::io::Cursor::new(bytes)), 0, 0, Some(len));
        let member = m.next().unwrap().unwrap();
        assert_eq!((member.index, member.name.as_str(), &member.data[..]), (0, "k.txt", &b"abc"[..]));
        assert_eq!(m.next(), Ok(None));
    }
}
