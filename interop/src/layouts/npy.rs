//! NumPy `.npy` files (format versions 1, 2, 3; numpy `numpy/lib/format.py`): one file, a
//! glob, or a directory of them as one stream.
//!
//! Layout: magic `\x93NUMPY`, major and minor version bytes, `HEADER_LEN` (u16 LE in v1, u32
//! LE in v2/v3), then the header text, a Python dict literal `{'descr': ..., 'fortran_order':
//! ..., 'shape': (...), }` padded with spaces and a newline, then the data. The header is read
//! with a literal parser (never evaluated).

use guideloom_formats::Primitive;
use guideloom_storage::Segment;

use crate::error::{ForeignError, Result};
use crate::files::{escaped, expand, u32_at, Fs, Place};
use crate::format::ForeignFormat;
use crate::options::ForeignOptions;
use crate::parts::{ForeignDetails, ForeignFile, Parts};

/// The NumPy magic.
pub(crate) const MAGIC: &[u8] = b"\x93NUMPY";
/// numpy's own limit on the header length.
const MAX_HEADER: u64 = 10_000;

/// The token primitive of an integer type string (`|u1`, `<i4`, `>u2` ...) and whether it is
/// big-endian; `Err` with the [`ForeignError`] for anything else.
fn integer_descr(descr: &str) -> std::result::Result<(Primitive, bool), ForeignError> {
    let (big, body) = match descr.as_bytes().first() {
        Some(b'>' | b'!') => (true, &descr[1..]),
        Some(b'<' | b'|' | b'=') => (false, &descr[1..]),
        _ => (false, descr),
    };
    let p = match body {
        "u1" | "B" => Primitive::U8,
        "i1" | "b" => Primitive::I8,
        "u2" => Primitive::U16,
        "i2" => Primitive::I16,
        "u4" => Primitive::U32,
        "i4" => Primitive::I32,
        "u8" => Primitive::U64,
        "i8" => Primitive::I64,
        "O" | "O8" | "O4" => return Err(ForeignError::UnsafeDType { descr: descr.to_string() }),
        _ => return Err(ForeignError::UnsupportedTokenDType { dtype: descr.to_string() }),
    };
    Ok((p, big && p.size() > 1))
}

/// A parsed header.
#[derive(Debug)]
struct Header {
    descr: String,
    structured: bool,
    fortran: bool,
    shape: Vec<u64>,
    data_offset: u64,
}

/// Reads and parses the header of `name` (`bytes` long).
fn read_header(fs: &Fs, name: &str, bytes: u64) -> Result<Header> {
    let err = |e: ForeignError| fs.err(name, e);
    let head = fs.read(name, 0, bytes.min(12))?;
    let (major, start, len) = header_span(&head, bytes).map_err(err)?;
    let raw = fs.read(name, start, len)?;
    let mut h = header_text(major, raw).map_err(err)?;
    h.data_offset = start + len;
    Ok(h)
}

/// The version, the header text's offset and its length, from the first 12 bytes (`head`)
/// of a `.npy` of `bytes` bytes; checked against `bytes` and numpy's limit.
fn header_span(head: &[u8], bytes: u64) -> std::result::Result<(u8, u64, u64), ForeignError> {
    if head.len() < MAGIC.len() || &head[..MAGIC.len()] != MAGIC {
        return Err(ForeignError::BadMagic { found: escaped(&head[..head.len().min(MAGIC.len())]) });
    }
    if head.len() < 10 {
        return Err(ForeignError::TruncatedHeader { need: 10, have: bytes });
    }
    let major = head[6];
    let (len, start) = match major {
        1 => (u64::from(u16::from_le_bytes([head[8], head[9]])), 10u64),
        2 | 3 if head.len() >= 12 => (u64::from(u32_at(head, 8)), 12),
        2 | 3 => return Err(ForeignError::TruncatedHeader { need: 12, have: bytes }),
        v => return Err(ForeignError::UnsupportedVersion { field: "major version", found: v.into() }),
    };
    if len > MAX_HEADER {
        return Err(ForeignError::HeaderTooLarge { len });
    }
    if bytes < start + len {
        return Err(ForeignError::TruncatedHeader { need: start + len, have: bytes });
    }
    Ok((major, start, len))
}

/// The header text (latin-1 in v1/v2, UTF-8 in v3) parsed.
fn header_text(major: u8, raw: Vec<u8>) -> std::result::Result<Header, ForeignError> {
    // v1/v2 headers are latin-1, v3 UTF-8; the grammar itself is ASCII.
    let text: String = if major == 3 {
        String::from_utf8(raw)
            .map_err(|_| ForeignError::HeaderParse { reason: "a v3 header that is not UTF-8".into() })?
    } else {
        raw.iter().map(|&b| char::from(b)).collect()
    };
    parse_header(&text)
}

/// A whole `.npy` held in memory (a record of a record format): its integer dtype, whether
/// it is big-endian, and its data (every element of a 1-D array, or of a C-order 2-D one).
///
/// # Errors
/// The [`ForeignError`] of the first check that fails, as for a `.npy` file: magic,
/// version, header, dtype (object arrays refused), layout, and the data size against the
/// shape (short: [`ForeignError::DataSize`], long: [`ForeignError::TrailingBytes`]).
#[cfg_attr(not(any(feature = "arrayrecord", feature = "tfrecord", feature = "webdataset")), allow(dead_code))]
pub(crate) fn in_memory(bytes: &[u8]) -> std::result::Result<(Primitive, bool, &[u8]), ForeignError> {
    let total = bytes.len() as u64;
    let (major, start, len) = header_span(&bytes[..bytes.len().min(12)], total)?;
    // `header_span` checked `start + len <= total`.
    let (start, len) = (start as usize, len as usize);
    let h = header_text(major, bytes[start..start + len].to_vec())?;
    if h.structured {
        return Err(ForeignError::UnsupportedTokenDType { dtype: h.descr });
    }
    let (p, big) = integer_descr(&h.descr)?;
    let elements = match h.shape.as_slice() {
        [] => 1,
        [n] => *n,
        [_, _] if h.fortran => {
            return Err(ForeignError::UnsupportedLayout { layout: "fortran_order".into() })
        }
        [r, c] => {
            r.checked_mul(*c).ok_or_else(|| ForeignError::UnsupportedShape { shape: tuple_text(&h.shape) })?
        }
        _ => return Err(ForeignError::UnsupportedShape { shape: tuple_text(&h.shape) }),
    };
    let data = &bytes[start + len..];
    let have = data.len() as u64;
    let need = elements.saturating_mul(p.size());
    if have < need {
        return Err(ForeignError::DataSize { have, need });
    }
    if have > need {
        return Err(ForeignError::TrailingBytes { count: have - need });
    }
    Ok((p, big, data))
}

/// The literal parser: a dict of exactly `descr`, `fortran_order`, `shape`.
fn parse_header(text: &str) -> std::result::Result<Header, ForeignError> {
    let mut p = Parser { s: text.as_bytes(), i: 0 };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    let mut extra = None;
    p.ws();
    p.expect(b'{')?;
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match key.as_str() {
            "descr" if descr.is_none() => descr = Some(p.descr()?),
            "fortran_order" if fortran.is_none() => fortran = Some(p.boolean()?),
            "shape" if shape.is_none() => shape = Some(p.tuple()?),
            "descr" | "fortran_order" | "shape" => {
                return Err(ForeignError::HeaderParse { reason: format!("key {key:?} appears twice") })
            }
            _ => {
                // Skip the value; a missing key is reported before an extra one.
                p.skip_value()?;
                extra.get_or_insert(key);
            }
        }
        p.ws();
        if p.eat(b',') {
            continue;
        }
        p.ws();
        p.expect(b'}')?;
        break;
    }
    if p.s[p.i..].iter().any(|c| !c.is_ascii_whitespace()) {
        return Err(ForeignError::HeaderParse { reason: "text after the dict".into() });
    }
    let missing = |k: &str| ForeignError::HeaderMissingKey { key: k.into() };
    let (descr, structured) = descr.ok_or_else(|| missing("descr"))?;
    let fortran = fortran.ok_or_else(|| missing("fortran_order"))?;
    let shape = shape.ok_or_else(|| missing("shape"))?;
    if let Some(key) = extra {
        return Err(ForeignError::HeaderExtraKey { key });
    }
    Ok(Header { descr, structured, fortran, shape, data_offset: 0 })
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn bad(&self, what: &str) -> ForeignError {
        ForeignError::HeaderParse { reason: format!("{what} at byte {}", self.i) }
    }
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        let hit = self.s.get(self.i) == Some(&c);
        if hit {
            self.i += 1;
        }
        hit
    }
    fn expect(&mut self, c: u8) -> std::result::Result<(), ForeignError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.bad(&format!("expected {:?}", char::from(c))))
        }
    }
    fn string(&mut self) -> std::result::Result<String, ForeignError> {
        let q = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(self.bad("expected a quoted string")),
        };
        self.i += 1;
        let start = self.i;
        while self.s.get(self.i).is_some_and(|&c| c != q && c != b'\\') {
            self.i += 1;
        }
        if self.s.get(self.i) != Some(&q) {
            return Err(self.bad("unterminated string"));
        }
        let out = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(out)
    }
    /// A type string, or a structured descr (a bracketed list, kept as text).
    fn descr(&mut self) -> std::result::Result<(String, bool), ForeignError> {
        if self.s.get(self.i) != Some(&b'[') {
            return Ok((self.string()?, false));
        }
        let start = self.i;
        let mut depth = 0usize;
        while let Some(&c) = self.s.get(self.i) {
            self.i += 1;
            match c {
                b'[' | b'(' => depth += 1,
                b']' | b')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok((String::from_utf8_lossy(&self.s[start..self.i]).into_owned(), true));
                    }
                }
                _ => {}
            }
        }
        Err(self.bad("unterminated structured descr"))
    }
    /// Skips a value of a key that is not expected: a string, a boolean or a tuple.
    fn skip_value(&mut self) -> std::result::Result<(), ForeignError> {
        match self.s.get(self.i) {
            Some(b'\'' | b'"') => self.string().map(drop),
            Some(b'(') => self.tuple().map(drop),
            Some(b'[') => self.descr().map(drop),
            _ => self.boolean().map(drop),
        }
    }

    fn boolean(&mut self) -> std::result::Result<bool, ForeignError> {
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.i..].starts_with(word) {
                self.i += word.len();
                return Ok(v);
            }
        }
        Err(self.bad("expected True or False"))
    }
    fn tuple(&mut self) -> std::result::Result<Vec<u64>, ForeignError> {
        self.expect(b'(')?;
        let mut out = Vec::new();
        loop {
            self.ws();
            if self.eat(b')') {
                return Ok(out);
            }
            let start = self.i;
            while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
            }
            if start == self.i {
                return Err(self.bad("expected a dimension"));
            }
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            out.push(digits.parse().map_err(|_| self.bad("dimension out of range"))?);
            // Python 2 long suffix.
            let _ = self.eat(b'L');
            self.ws();
            if self.eat(b',') {
                continue;
            }
            self.ws();
            self.expect(b')')?;
            return Ok(out);
        }
    }
}

/// Opens one `.npy`, a glob, or a directory of them (byte-wise name order). All files must
/// share one dtype; 1-D arrays are token streams, a 2-D C-order array `(samples, L)` is its
/// rows (as documents when it is the only file).
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let format = ForeignFormat::Npy;
    let (dir, names) = expand(format, place, &["npy"])?;
    let fs = Fs::new(format, dir);
    let mut dtype: Option<(Primitive, bool)> = None;
    let mut parts = Parts::new(&fs, Primitive::U8);
    let mut shapes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let err = |e: ForeignError| fs.err(name, e);
        let bytes = fs.len(name)?;
        let h = read_header(&fs, name, bytes)?;
        if h.structured {
            return Err(err(ForeignError::UnsupportedTokenDType { dtype: h.descr }));
        }
        let (p, big) = integer_descr(&h.descr).map_err(err)?;
        if let Some(want) = options.dtype.filter(|&d| d != p) {
            return Err(err(ForeignError::MixedDTypes {
                expected: p.descr().into(),
                found: want.descr().into(),
            }));
        }
        match dtype {
            Some(d) if d != (p, big) => {
                return Err(err(ForeignError::MixedDTypes { expected: d.0.descr().into(), found: h.descr }))
            }
            _ => dtype = Some((p, big)),
        }
        let shape_text = tuple_text(&h.shape);
        let elements = match h.shape.as_slice() {
            [n] => *n,
            [_, _] if h.fortran => {
                return Err(err(ForeignError::UnsupportedLayout { layout: "fortran_order".into() }))
            }
            [r, c] => r
                .checked_mul(*c)
                .ok_or_else(|| err(ForeignError::UnsupportedShape { shape: shape_text.clone() }))?,
            _ => return Err(err(ForeignError::UnsupportedShape { shape: shape_text })),
        };
        let need = elements
            .checked_mul(p.size())
            .ok_or_else(|| err(ForeignError::DataSize { have: bytes, need: u64::MAX }))?;
        let have = bytes - h.data_offset;
        if have < need {
            return Err(err(ForeignError::DataSize { have, need }));
        }
        if have > need {
            return Err(err(ForeignError::TrailingBytes { count: have - need }));
        }
        parts.files.push(ForeignFile { path: name.into(), bytes, elements });
        parts.segments.push(Segment { file: i, offset: h.data_offset, elements });
        shapes.push(h.shape);
    }
    let (p, big) = dtype.unwrap_or((Primitive::U8, false));
    parts.dtype = p;
    parts.big_endian = big;
    // One 2-D array: its rows are the samples (documents).
    if let [shape] = shapes.as_slice() {
        if let [rows, cols] = shape.as_slice() {
            parts.documents = Some((0..=*rows).map(|r| r * cols).collect());
        }
    }
    parts.details = ForeignDetails::Npy { shapes };
    Ok(parts)
}

/// A shape as Python writes the tuple: `()`, `(5,)`, `(2, 3)`.
fn tuple_text(shape: &[u64]) -> String {
    match shape {
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_literals_parse_with_every_spelling_numpy_writes() {
        let h = parse_header("{'descr': '<u2', 'fortran_order': False, 'shape': (5,), }   \n").unwrap();
        assert_eq!((h.descr.as_str(), h.fortran, h.shape), ("<u2", false, vec![5]));
        let h = parse_header("{\"shape\": (2L, 3L), \"descr\": \">i4\", \"fortran_order\": True}").unwrap();
        assert_eq!((h.descr.as_str(), h.fortran, h.shape), (">i4", true, vec![2, 3]));
        let h = parse_header("{'descr': '|u1', 'fortran_order': False, 'shape': (), }").unwrap();
        assert!(h.shape.is_empty());
        assert!(matches!(parse_header("['descr']"), Err(ForeignError::HeaderParse { .. })));
        assert!(matches!(
            parse_header("{'descr': '<u2', 'fortran_order': False, 'shape': (1,), 'x': True}"),
            Err(ForeignError::HeaderExtraKey { .. })
        ));
        assert!(matches!(
            parse_header("{'descr': '<u2', 'shape': (1,)}"),
            Err(ForeignError::HeaderMissingKey { key }) if key == "fortran_order"
        ));
        assert!(matches!(parse_header("{'descr': __import__('os')}"), Err(ForeignError::HeaderParse { .. })));
    }
}
