//! `.npy` and `.npz` codecs over in-memory bytes (no file I/O).
//!
//! A small parser of its own rather than `npyz`: OAMap arrays are one-dimensional arrays of
//! a handful of primitive dtypes in either byte order, and the reader needs them decoded
//! into [`Array`]s with every header field checked against the byte count (`npyz` reads
//! into typed Rust values chosen at compile time, which does not fit a dtype known only at
//! run time). `.npz` archives are handled with the `zip` crate.

#[cfg(feature = "npz")]
use std::io::{Cursor, Read, Write};
#[cfg(feature = "npz")]
use std::sync::{Arc, Mutex};

#[cfg(feature = "npz")]
use serde_json::{json, Value};

use crate::{Array, Dtype, OamapError};
#[cfg(feature = "npz")]
use crate::{ArrayMap, ArraySource, Column, Reader, Schema};

const MAGIC: &[u8] = b"\x93NUMPY";

fn npy_err(name: &str, reason: impl Into<String>) -> OamapError {
    OamapError::Npy { name: name.to_string(), reason: reason.into() }
}

/// Decodes one `.npy` byte string (format versions 1, 2 and 3) into an array.
///
/// Accepted: primitive dtypes (`|b1`, `<i4`, `>f8`, `|S4` ...), C or Fortran order, shape
/// `()` or `(n,)`; bytes after the data are ignored.
///
/// # Errors
/// [`OamapError::Npy`] naming `name` for a bad magic, header, dtype, a multi-dimensional
/// shape, or fewer data bytes than the shape needs.
pub fn parse_npy(name: &str, bytes: &[u8]) -> Result<Array, OamapError> {
    let (dtype, need, data_at) = npy_layout(name, bytes)?;
    let body = &bytes[data_at..];
    if body.len() < need {
        return Err(npy_err(name, format!("data has {} bytes, the shape needs {need}", body.len())));
    }
    Array::from_bytes(name, dtype, &body[..need])
}

/// The longest `.npy` header read (1 MiB; numpy writes 64-byte aligned headers of a few
/// dozen bytes).
const MAX_HEADER: usize = 1 << 20;

/// The length of the header prefix (magic, version, header length) and the header's length,
/// from the first 12 bytes (or fewer) of a `.npy` byte string.
fn header_span(name: &str, bytes: &[u8]) -> Result<(usize, usize), OamapError> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(npy_err(name, "not a .npy byte string (bad magic)"));
    }
    let (hlen, hstart): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            let b = bytes.get(8..12).ok_or_else(|| npy_err(name, "truncated header"))?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        }
        v => return Err(npy_err(name, format!("unsupported .npy version {v}"))),
    };
    if hlen > MAX_HEADER {
        return Err(npy_err(name, format!("header of {hlen} bytes (more than {MAX_HEADER})")));
    }
    Ok((hstart, hlen))
}

/// The dtype, the data's byte count and where the data starts, from a `.npy` byte string
/// holding at least its whole header.
fn npy_layout(name: &str, bytes: &[u8]) -> Result<(Dtype, usize, usize), OamapError> {
    let (hstart, hlen) = header_span(name, bytes)?;
    let header = hstart
        .checked_add(hlen)
        .and_then(|end| bytes.get(hstart..end))
        .ok_or_else(|| npy_err(name, "truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| npy_err(name, "header is not text"))?;
    let descr = dict_str(header, "descr")
        .ok_or_else(|| npy_err(name, "header has no string 'descr' (structured dtypes are not supported)"))?;
    let dtype = Dtype::parse(&descr).map_err(|e| npy_err(name, e.to_string()))?;
    let shape = dict_shape(header).ok_or_else(|| npy_err(name, "header has no readable 'shape'"))?;
    let count = match shape.as_slice() {
        [] => 1usize,
        [n] => *n,
        _ => {
            return Err(npy_err(name, format!("shape {shape:?}: only one-dimensional arrays are supported")))
        }
    };
    let need = count.checked_mul(dtype.width()).ok_or_else(|| npy_err(name, "shape overflows"))?;
    Ok((dtype, need, hstart + hlen))
}

/// Reads one `.npy` member from a decompressing reader: the header, then exactly the bytes
/// its shape and dtype need, and nothing after them (a member inflating to more than it
/// declares, a zip bomb, is never inflated past its declared data). A declared size above
/// `limit` bytes is refused before any data is read.
#[cfg(feature = "npz")]
fn read_npy_member(
    name: &str,
    mut r: impl Read,
    limit: u64,
    budget: impl FnOnce(u64) -> Result<(), OamapError>,
) -> Result<Vec<u8>, OamapError> {
    let mut out = Vec::new();
    (&mut r).take(12).read_to_end(&mut out).map_err(|e| archive_err(name, e))?;
    let (hstart, hlen) = header_span(name, &out)?;
    let header_end = (hstart + hlen) as u64;
    let have = out.len() as u64;
    if header_end > have {
        (&mut r).take(header_end - have).read_to_end(&mut out).map_err(|e| archive_err(name, e))?;
    }
    let (_, need, data_at) = npy_layout(name, &out)?;
    let total = (data_at as u64).saturating_add(need as u64);
    if total > limit {
        return Err(OamapError::TooLarge {
            what: format!("npz member {name:?} (bytes declared by its header)"),
            limit,
            found: total,
        });
    }
    budget(total)?;
    let have = out.len() as u64;
    if total > have {
        // Grown as bytes arrive: a header may declare more than the member holds.
        (&mut r).take(total - have).read_to_end(&mut out).map_err(|e| archive_err(name, e))?;
    }
    out.truncate(total as usize);
    Ok(out)
}

fn dict_str(header: &str, key: &str) -> Option<String> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let rest = &rest[1..];
    let end = rest.find(quote)?;
    Some(rest[..end].to_string())
}

fn dict_shape(header: &str) -> Option<Vec<usize>> {
    let at = header.find("'shape'")? + 7;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start().strip_prefix('(')?;
    let end = rest.find(')')?;
    rest[..end]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse().ok())
        .collect()
}

/// Encodes an array as a version 1.0 `.npy` byte string (shape `(n,)`, C order, header
/// padded to 64 bytes as numpy does).
pub fn write_npy(array: &Array) -> Vec<u8> {
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({},), }}",
        array.dtype().descr(),
        array.len()
    );
    let total = 10 + header.len() + 1;
    let pad = (64 - total % 64) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let body = array.to_bytes();
    let mut out = Vec::with_capacity(10 + header.len() + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&body);
    out
}

/// The default bound on one `.npz` member's declared size, header included (4 GiB; see
/// [`NpzSource::max_member_bytes`]).
#[cfg(feature = "npz")]
pub const DEFAULT_MAX_NPZ_MEMBER: u64 = 1 << 32;

/// The default bound on the declared sizes of all the members one [`NpzSource`] decodes,
/// each counted once (4 GiB; see [`NpzSource::max_total_bytes`]): several members that
/// each stay under the member limit cannot together exhaust memory.
#[cfg(feature = "npz")]
pub const DEFAULT_MAX_NPZ_TOTAL: u64 = 1 << 32;

#[cfg(feature = "npz")]
fn archive_err(name: &str, source: impl Into<crate::BoxError>) -> OamapError {
    OamapError::Archive { name: name.to_string(), source: source.into() }
}

/// A lazy array source over the bytes of an `.npz` archive: each member is decompressed
/// and decoded when first asked for (readers cache it).
#[cfg(feature = "npz")]
pub struct NpzSource {
    archive: Mutex<zip::ZipArchive<Cursor<Arc<[u8]>>>>,
    names: Vec<String>,
    max_member: u64,
    max_total: u64,
    /// Declared sizes of the members decoded so far, by name (each counted once).
    decoded: Mutex<std::collections::HashMap<String, u64>>,
}

#[cfg(feature = "npz")]
impl std::fmt::Debug for NpzSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpzSource").field("arrays", &self.names.len()).finish()
    }
}

#[cfg(feature = "npz")]
impl NpzSource {
    /// Opens an archive held in memory (reads only its directory).
    ///
    /// # Errors
    /// [`OamapError::Archive`] when the bytes are not a zip archive.
    pub fn new(bytes: impl Into<Arc<[u8]>>) -> Result<Self, OamapError> {
        let archive = zip::ZipArchive::new(Cursor::new(bytes.into())).map_err(|e| archive_err("<npz>", e))?;
        let names = archive.file_names().map(|n| n.strip_suffix(".npy").unwrap_or(n).to_string()).collect();
        Ok(NpzSource {
            archive: Mutex::new(archive),
            names,
            max_member: DEFAULT_MAX_NPZ_MEMBER,
            max_total: DEFAULT_MAX_NPZ_TOTAL,
            decoded: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Sets the largest member this source decodes, in bytes as its `.npy` header declares
    /// them (header included; default [`DEFAULT_MAX_NPZ_MEMBER`], 4 GiB). Whatever the limit,
    /// a member is inflated only up to the size its header declares.
    pub fn max_member_bytes(mut self, limit: u64) -> Self {
        self.max_member = limit;
        self
    }

    /// Sets the most bytes (as the members' `.npy` headers declare them, each member counted
    /// once) this source decodes in all (default [`DEFAULT_MAX_NPZ_TOTAL`], 4 GiB).
    pub fn max_total_bytes(mut self, limit: u64) -> Self {
        self.max_total = limit;
        self
    }

    /// The array names in the archive (member names without `.npy`), in archive order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The raw `.npy` bytes of member `name`: its header and the data the header declares
    /// (bytes after that are not inflated).
    ///
    /// # Errors
    /// [`OamapError::MissingArray`] when absent; [`OamapError::Npy`] for a bad header;
    /// [`OamapError::TooLarge`] when the header declares more than the member limit
    /// ([`NpzSource::max_member_bytes`], and for a compressed member
    /// [`guideloom_formats::inflate_bound`] of its compressed size) or takes the members decoded past the total
    /// limit ([`NpzSource::max_total_bytes`]); [`OamapError::Archive`] when it cannot be
    /// decompressed.
    pub fn member_bytes(&self, name: &str) -> Result<Vec<u8>, OamapError> {
        let mut archive = self.archive.lock().map_err(|_| npy_err(name, "archive lock poisoned"))?;
        let member = if archive.index_for_name(&format!("{name}.npy")).is_some() {
            format!("{name}.npy")
        } else if archive.index_for_name(name).is_some() {
            name.to_string()
        } else {
            return Err(OamapError::MissingArray { name: name.to_string() });
        };
        let file = archive.by_name(&member).map_err(|e| archive_err(name, e))?;
        let budget = |declared: u64| {
            let mut decoded = self.decoded.lock().map_err(|_| npy_err(name, "archive lock poisoned"))?;
            if decoded.contains_key(name) {
                return Ok(());
            }
            let sum = decoded.values().fold(declared, |a, &b| a.saturating_add(b));
            if sum > self.max_total {
                return Err(OamapError::TooLarge {
                    what: format!("npz members decoded, with {name:?} (bytes declared by their headers)"),
                    limit: self.max_total,
                    found: sum,
                });
            }
            decoded.insert(name.to_string(), declared);
            Ok(())
        };
        // Bounded by the member's compressed size too (a ratio cap), not by its header's claim.
        let limit = match file.compression() {
            zip::CompressionMethod::Stored => self.max_member,
            _ => self.max_member.min(guideloom_formats::inflate_bound(file.compressed_size())),
        };
        read_npy_member(name, file, limit, budget)
    }

    /// Decodes every member into an in-memory map.
    ///
    /// # Errors
    /// As [`NpzSource::member_bytes`] and [`parse_npy`].
    pub fn read_all(&self) -> Result<ArrayMap, OamapError> {
        let mut map = ArrayMap::new();
        for n in &self.names {
            map.insert(n.clone(), self.get(n).map(|a| (*a).clone())?);
        }
        Ok(map)
    }
}

#[cfg(feature = "npz")]
impl ArraySource for NpzSource {
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError> {
        let bytes = self.member_bytes(name)?;
        parse_npy(name, &bytes).map(Arc::new)
    }
}

/// Writes arrays as an `.npz` archive (deflate-compressed, like `numpy.savez_compressed`),
/// one member `<name>.npy` per array, plus optional extra members (raw `.npy` bytes).
///
/// # Errors
/// [`OamapError::Archive`] if the zip writer fails.
#[cfg(feature = "npz")]
pub fn write_npz(arrays: &ArrayMap, extra: &[(String, Array)]) -> Result<Vec<u8>, OamapError> {
    let mut zw = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let all = arrays
        .iter()
        .map(|(n, a)| (n.as_str(), a.as_ref()))
        .chain(extra.iter().map(|(n, a)| (n.as_str(), a)));
    for (name, array) in all {
        zw.start_file(format!("{name}.npy"), opts).map_err(|e| archive_err(name, e))?;
        zw.write_all(&write_npy(array)).map_err(|e| archive_err(name, e))?;
    }
    let cursor = zw.finish().map_err(|e| archive_err("<npz>", e))?;
    Ok(cursor.into_inner())
}

/// An `.npz` holding `arrays` plus a member named after the schema's prefix (`object` by
/// default): uint8 UTF-8 JSON `{"schema", "prefix", "delimiter"}`, OAMap's way of storing
/// the schema with the arrays. [`open_npz`] reads it back.
///
/// # Errors
/// As [`write_npz`]; [`OamapError::TooDeep`] for a schema whose JSON nests deeper than
/// [`MAX_JSON_DEPTH`](crate::MAX_JSON_DEPTH) (which [`open_npz`] could not read back).
#[cfg(feature = "npz")]
pub fn write_npz_with_schema(schema: &Schema, arrays: &ArrayMap) -> Result<Vec<u8>, OamapError> {
    let doc = json!({"schema": schema.to_oamap_json(false), "prefix": schema.prefix(), "delimiter": schema.delimiter()});
    // What open_npz can read back: refuse to store a schema nested deeper than it parses.
    let depth = crate::limits::value_depth(&doc);
    if depth > crate::MAX_JSON_DEPTH {
        return Err(OamapError::TooDeep {
            name: "the schema to store (member 'object')".into(),
            limit: crate::MAX_JSON_DEPTH,
            found: depth,
        });
    }
    let bytes = Array::new(Dtype::UINT8, Column::U8(doc.to_string().into_bytes()))?;
    write_npz(arrays, &[(schema.prefix().to_string(), bytes)])
}

/// Opens an OAMap `.npz` (bytes in memory) whose schema is stored in it: the member named
/// `object` holding UTF-8 JSON `{"schema", "prefix"?, "delimiter"?}` (OAMap 0.10/0.11's and
/// the exoplanets sample's layout). Arrays are decoded lazily, on first use.
///
/// # Errors
/// [`OamapError::Archive`] for a bad archive; [`OamapError::MissingArray`] (`object`) when
/// no schema is stored; [`OamapError::Json`] when it is not JSON; schema errors.
#[cfg(feature = "npz")]
pub fn open_npz(bytes: impl Into<Arc<[u8]>>) -> Result<Reader, OamapError> {
    let source = NpzSource::new(bytes)?;
    let meta = source.get("object")?;
    let text: Vec<u8> = match meta.data() {
        Column::U8(v) => v.clone(),
        Column::Bytes { data, .. } => data.iter().copied().filter(|&b| b != 0).collect(),
        _ => return Err(OamapError::schema("member 'object' is not uint8 bytes")),
    };
    let doc: Value = crate::parse_json("npz member 'object'", &text)?;
    let schema_json =
        doc.get("schema").ok_or_else(|| OamapError::schema("member 'object' has no \"schema\""))?;
    let prefix = doc.get("prefix").and_then(Value::as_str).unwrap_or("object");
    let delimiter = doc.get("delimiter").and_then(Value::as_str).unwrap_or("-");
    let schema = Schema::from_json_named(schema_json, prefix, delimiter)?;
    Ok(Reader::new(Arc::new(schema), Arc::new(source)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Column;

    #[test]
    fn npy_round_trips_every_kind_and_byte_order() {
        for (dtype, data) in [
            ("int32", Column::I32(vec![1, -2, 3])),
            (">float64", Column::F64(vec![1.5, -2.0])),
            ("bool", Column::Bool(vec![true, false])),
            ("uint16", Column::U16(vec![65535, 0])),
            ("S3", Column::Bytes { width: 3, data: b"abcde\0".to_vec() }),
            ("complex64", Column::C64(vec![[1.0, 2.0]])),
            ("int8", Column::I8(vec![])),
        ] {
            let a = Array::new(Dtype::parse(dtype).unwrap(), data).unwrap();
            let bytes = write_npy(&a);
            assert_eq!((10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize) % 64, 0);
            assert_eq!(parse_npy("x", &bytes).unwrap(), a);
        }
    }

    #[test]
    fn npy_reads_numpy_written_header_and_refuses_damage() {
        let mut b = MAGIC.to_vec();
        let h = "{'descr': '>i2', 'fortran_order': False, 'shape': (2,), }          \n";
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(&[0, 1, 255, 254]);
        let a = parse_npy("x", &b).unwrap();
        assert_eq!(a.data(), &Column::I16(vec![1, -2]));
        assert_eq!(a.dtype().name(), ">int16");
        // Truncated data, bad magic, 2-d shape, structured dtype: typed errors naming the array.
        let e = parse_npy("arr", &b[..b.len() - 1]).unwrap_err();
        assert!(matches!(&e, OamapError::Npy { name, .. } if name == "arr"), "{e}");
        let two_d = String::from_utf8_lossy(&b).replace("(2,)", "(1,2)").into_bytes();
        let structured = String::from_utf8_lossy(&b).replace("'>i2'", "[('a','<i2')]").into_bytes();
        for bytes in [&b"hello world"[..], &two_d, &structured, &b[..12]] {
            let e = parse_npy("arr", bytes).unwrap_err();
            assert!(matches!(&e, OamapError::Npy { name, .. } if name == "arr"), "{e:?}");
        }
    }

    #[cfg(feature = "npz")]
    #[test]
    fn npz_round_trip_and_missing_member() {
        let mut m = ArrayMap::new();
        m.insert("object-B", Array::from_i32(vec![0]));
        m.insert(
            "object-L-Df8",
            Array::new(Dtype::parse("float64").unwrap(), Column::F64(vec![1.1])).unwrap(),
        );
        let bytes = write_npz(&m, &[]).unwrap();
        let src = NpzSource::new(bytes).unwrap();
        assert_eq!(src.names(), ["object-B", "object-L-Df8"]);
        assert_eq!(src.read_all().unwrap(), m);
        assert!(matches!(src.get("nope"), Err(OamapError::MissingArray { name }) if name == "nope"));
        let e = NpzSource::new(vec![1u8, 2, 3]).unwrap_err();
        assert!(matches!(&e, OamapError::Archive { name, .. } if name == "<npz>"), "{e}");
        assert!(std::error::Error::source(&e).is_some(), "the zip error is the source");
    }
}
