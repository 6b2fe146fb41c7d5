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

    /// Issue 33 (mutants deleting `integer_descr`'s arms, and of its byte-order rule
    /// `p.size() > 1` -> `>=`): every integer type string numpy writes (`dtype.str`, and the
    /// one-character codes `B` and `b` of `dtype.char`) in each byte-order prefix, as its
    /// primitive; a big-endian prefix matters only past one byte (`>u1` is `u1`). Object
    /// arrays are refused as unsafe (pickles), floats as unsupported.
    #[test]
    fn issue33_foreign_npy_integer_type_strings_are_numpy_s() {
        use Primitive::*;
        let table = [
            ("u1", U8),
            ("B", U8),
            ("i1", I8),
            ("b", I8),
            ("u2", U16),
            ("i2", I16),
            ("u4", U32),
            ("i4", I32),
            ("u8", U64),
            ("i8", I64),
        ];
        for (body, p) in table {
            for prefix in ["", "<", "|", "="] {
                assert_eq!(integer_descr(&format!("{prefix}{body}")), Ok((p, false)), "{prefix}{body}");
            }
            for prefix in [">", "!"] {
                assert_eq!(
                    integer_descr(&format!("{prefix}{body}")),
                    Ok((p, p.size() > 1)),
                    "{prefix}{body}"
                );
            }
        }
        assert_eq!(integer_descr(">u1"), Ok((U8, false)));
        assert_eq!(integer_descr(">i2"), Ok((I16, true)));
        for descr in ["O", "|O", "O8", "<O4"] {
            assert_eq!(integer_descr(descr), Err(ForeignError::UnsafeDType { descr: descr.into() }));
        }
        for descr in ["<f4", "<u16", "", "?"] {
            assert_eq!(
                integer_descr(descr),
                Err(ForeignError::UnsupportedTokenDType { dtype: descr.into() })
            );
        }
    }

    /// The first 12 bytes of a `.npy` of version `major` whose header text is `len` bytes.
    fn head(major: u8, len: u32) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend([major, 0]);
        match major {
            1 => b.extend((len as u16).to_le_bytes()),
            _ => b.extend(len.to_le_bytes()),
        }
        b
    }

    /// Issue 33 (mutants of `header_span`'s length checks: the magic `head.len() < 6` and the
    /// version fields `head.len() < 10` (`==`, `<=`), the v2/v3 guard `head.len() >= 12` ->
    /// `true`, numpy's limit `len > 10_000` -> `>=`, the text's end `start + len` (`-`, `*`)):
    /// each boundary on both sides, from a file's first bytes.
    #[test]
    fn issue33_foreign_npy_header_spans_at_their_boundaries() {
        assert_eq!(header_span(&MAGIC[..5], 5), Err(ForeignError::BadMagic { found: "\\x93NUMP".into() }));
        assert_eq!(header_span(MAGIC, 6), Err(ForeignError::TruncatedHeader { need: 10, have: 6 }));
        assert_eq!(
            header_span(&head(1, 0)[..9], 9),
            Err(ForeignError::TruncatedHeader { need: 10, have: 9 })
        );
        // Exactly 10 bytes: a v1 header of no text (then refused by the parser, not here).
        assert_eq!(header_span(&head(1, 0), 10), Ok((1, 10, 0)));
        for major in [2, 3] {
            assert_eq!(
                header_span(&head(major, 0)[..11], 11),
                Err(ForeignError::TruncatedHeader { need: 12, have: 11 })
            );
            assert_eq!(header_span(&head(major, 0), 12), Ok((major, 12, 0)));
        }
        assert_eq!(header_span(&head(2, 10_000), 10_012), Ok((2, 12, 10_000)));
        assert_eq!(header_span(&head(2, 10_001), 20_000), Err(ForeignError::HeaderTooLarge { len: 10_001 }));
        assert_eq!(header_span(&head(1, 20), 30), Ok((1, 10, 20)));
        assert_eq!(header_span(&head(1, 20), 29), Err(ForeignError::TruncatedHeader { need: 30, have: 29 }));
        assert_eq!(header_span(&head(3, 20), 31), Err(ForeignError::TruncatedHeader { need: 32, have: 31 }));
        assert_eq!(
            header_span(&head(4, 0), 12),
            Err(ForeignError::UnsupportedVersion { field: "major version", found: 4 })
        );
    }

    /// Issue 33 (mutant of the text's decoding `major == 3` -> `!=`): a v1 or v2 header is
    /// latin-1 (byte 0xff is `ÿ`, parsed up to the extra key that holds it), a v3 header UTF-8
    /// (the same byte refused as not UTF-8; the UTF-8 `é` read as one character).
    #[test]
    fn issue33_foreign_npy_header_text_is_latin_1_before_version_3() {
        let text = |value: &[u8]| {
            let mut t = b"{'descr': '<u2', 'fortran_order': False, 'shape': (2,), 'x': '".to_vec();
            t.extend(value);
            t.extend(b"', }");
            t
        };
        for major in [1, 2] {
            let got = header_text(major, text(&[0xff])).map(|_| ());
            assert_eq!(got, Err(ForeignError::HeaderExtraKey { key: "x".into() }), "v{major}");
        }
        assert_eq!(
            header_text(3, text(&[0xff])).map(|_| ()),
            Err(ForeignError::HeaderParse { reason: "a v3 header that is not UTF-8".into() })
        );
        assert_eq!(
            header_text(3, text("é".as_bytes())).map(|_| ()),
            Err(ForeignError::HeaderExtraKey { key: "x".into() })
        );
        let plain = b"{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }".to_vec();
        for major in [1, 2, 3] {
            assert_eq!(header_text(major, plain.clone()).unwrap().shape, [2], "v{major}");
        }
    }

    /// A whole v1 `.npy` in memory: the magic, version 1.0, the header `text` padded with
    /// spaces and a newline (as `numpy.lib.format` pads it, to 64 bytes here), then `data`.
    fn npy(text: &str, data: &[u8]) -> Vec<u8> {
        let mut h = text.as_bytes().to_vec();
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(b' ');
        }
        h.push(b'\n');
        let mut b = head(1, h.len() as u32)[..10].to_vec();
        b.extend(h);
        b.extend(data);
        b
    }

    fn header(fortran: bool, shape: &str) -> String {
        let order = if fortran { "True" } else { "False" };
        format!("{{'descr': '<u2', 'fortran_order': {order}, 'shape': {shape}, }}")
    }

    /// Issue 33 (mutants of `in_memory`'s shapes: the 0-d arm, the 2-D arm, the guard
    /// `h.fortran` -> `true`, `false`; the data size `have < need` -> `>`, `have > need` ->
    /// `<`, the trailing count `have - need` -> `+`, `/`): a 0-d array is one element, a
    /// C-order 2-D array its rows back to back, a Fortran-order 1-D array its elements;
    /// a Fortran-order 2-D array and a 3-D one are refused; data one element short or long is
    /// refused with the sizes.
    #[test]
    fn issue33_foreign_npy_a_record_s_shape_and_data_size() {
        let six = [1u8, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0];
        let ok = |fortran, shape: &str, data: &[u8]| {
            let bytes = npy(&header(fortran, shape), data);
            in_memory(&bytes).map(|(p, big, d)| (p, big, d.to_vec()))
        };
        assert_eq!(ok(false, "()", &six[..2]), Ok((Primitive::U16, false, six[..2].to_vec())));
        assert_eq!(ok(false, "(2, 3)", &six), Ok((Primitive::U16, false, six.to_vec())));
        assert_eq!(ok(true, "(6,)", &six), Ok((Primitive::U16, false, six.to_vec())));
        assert_eq!(
            ok(true, "(2, 3)", &six),
            Err(ForeignError::UnsupportedLayout { layout: "fortran_order".into() })
        );
        assert_eq!(
            ok(false, "(2, 3, 1)", &six),
            Err(ForeignError::UnsupportedShape { shape: "(2, 3, 1)".into() })
        );
        assert_eq!(ok(false, "(2, 3)", &six[..10]), Err(ForeignError::DataSize { have: 10, need: 12 }));
        let mut long = six.to_vec();
        long.extend([7, 0]);
        assert_eq!(ok(false, "(2, 3)", &long), Err(ForeignError::TrailingBytes { count: 2 }));
        assert_eq!(ok(false, "(5,)", &six), Err(ForeignError::TrailingBytes { count: 2 }));
    }

    /// Issue 33 (mutants of the parser's duplicate-key rule: each key's guard `is_none()` ->
    /// `true`, the refusing arm deleted): each of the three keys given twice is refused
    /// naming it, even with the same value both times.
    #[test]
    fn issue33_foreign_npy_a_header_key_given_twice_is_refused() {
        for (key, value) in [("descr", "'<u2'"), ("fortran_order", "False"), ("shape", "(5,)")] {
            let text =
                format!("{{'descr': '<u2', 'fortran_order': False, 'shape': (5,), '{key}': {value}, }}");
            assert_eq!(
                parse_header(&text).map(|_| ()),
                Err(ForeignError::HeaderParse { reason: format!("key {key:?} appears twice") }),
                "{key}"
            );
        }
    }

    /// Issue 33 (mutants of the structured descr's scan: the index step, the bracket arms,
    /// the depth's steps and its `== 0`; and of `skip_value`'s `[` arm): a structured descr
    /// (a list of fields, nested tuples and shapes inside) is kept whole as text and marked
    /// structured, whatever follows it; an unterminated one is refused at the text's end; an
    /// extra key whose value is a list is skipped to report the extra key.
    #[test]
    fn issue33_foreign_npy_a_structured_descr_is_kept_whole() {
        let descr = "[('a', '<u2'), ('b', '<i4', (2, 3)), ('c', [('d', '|u1')])]";
        let text = format!("{{'descr': {descr}, 'fortran_order': False, 'shape': (3,), }}");
        let h = parse_header(&text).unwrap();
        assert_eq!((h.descr.as_str(), h.structured, h.shape), (descr, true, vec![3]));
        let bytes = npy(&text, &[]);
        assert_eq!(
            in_memory(&bytes).map(|_| ()),
            Err(ForeignError::UnsupportedTokenDType { dtype: descr.into() })
        );
        let cut = "{'descr': [('a', '<u2'), ('b', '<i4'";
        assert_eq!(
            parse_header(cut).map(|_| ()),
            Err(ForeignError::HeaderParse {
                reason: format!("unterminated structured descr at byte {}", cut.len())
            })
        );
        let extra = "{'descr': '<u2', 'fortran_order': False, 'shape': (5,), 'x': [1, (2, 3)], }";
        assert_eq!(parse_header(extra).map(|_| ()), Err(ForeignError::HeaderExtraKey { key: "x".into() }));
    }

    /// Issue 33 (mutants of `open`'s dtype rules: the options' dtype `d != p` -> `==`, the
    /// files' agreement guard -> `false`): two `.npy` files of `<u2` open as one stream (and
    /// with `u16` named); a `<i4` file after them is refused naming its descr, and so is the
    /// pair when the options name `i32`.
    #[test]
    fn issue33_foreign_npy_files_share_one_dtype() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, descr: &str, data: &[u8]| {
            let text = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (2,), }}");
            std::fs::write(dir.path().join(name), npy(&text, data)).unwrap();
        };
        write("a.npy", "<u2", &[1, 0, 2, 0]);
        write("b.npy", "<u2", &[3, 0, 4, 0]);
        let place = Place::Local(dir.path().to_path_buf());
        for options in [ForeignOptions::new(), ForeignOptions::new().dtype(Primitive::U16)] {
            let parts = open(&place, &options).unwrap();
            assert_eq!((parts.dtype, parts.segments.len()), (Primitive::U16, 2));
        }
        let e = open(&place, &ForeignOptions::new().dtype(Primitive::I32)).unwrap_err();
        assert!(
            matches!(&e, crate::error::InteropError::Dataset { error, .. }
                if **error == ForeignError::MixedDTypes { expected: "<u2".into(), found: "<i4".into() }),
            "{e}"
        );
        write("c.npy", "<i4", &[5, 0, 0, 0, 6, 0, 0, 0]);
        let e = open(&place, &ForeignOptions::new()).unwrap_err();
        assert!(
            matches!(&e, crate::error::InteropError::Dataset { error, path, .. }
                if **error == ForeignError::MixedDTypes { expected: "<u2".into(), found: "<i4".into() }
                    && path.ends_with("c.npy")),
            "{e}"
        );
    }

    /// Issue 33 (mutants of `open`'s shapes and sizes: the 2-D arm, the guard `h.fortran` ->
    /// `true`, `false`, `have > need` -> `<`): one C-order `(2, 3)` file is 6 tokens in 2
    /// documents of 3; Fortran order is refused for it and accepted for a 1-D file; data one
    /// element long is refused with the count of trailing bytes, one short with both sizes.
    #[test]
    fn issue33_foreign_npy_a_file_s_shape_and_data_size() {
        let six = [1u8, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0];
        let one = |fortran, shape: &str, data: &[u8]| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("a.npy"), npy(&header(fortran, shape), data)).unwrap();
            open(&Place::Local(dir.path().to_path_buf()), &ForeignOptions::new())
                .map(|p| (p.documents, p.segments.iter().map(|s| s.elements).sum::<u64>()))
                .map_err(|e| match e {
                    crate::error::InteropError::Dataset { error, .. } => *error,
                    other => panic!("{other}"),
                })
        };
        assert_eq!(one(false, "(2, 3)", &six), Ok((Some(vec![0, 3, 6]), 6)));
        assert_eq!(one(true, "(6,)", &six), Ok((None, 6)));
        assert_eq!(
            one(true, "(2, 3)", &six),
            Err(ForeignError::UnsupportedLayout { layout: "fortran_order".into() })
        );
        let mut long = six.to_vec();
        long.extend([7, 0]);
        assert_eq!(one(false, "(2, 3)", &long), Err(ForeignError::TrailingBytes { count: 2 }));
        assert_eq!(one(false, "(2, 3)", &six[..10]), Err(ForeignError::DataSize { have: 10, need: 12 }));
    }

    /// Issue 33 (mutants of `tuple_text`: its body, the one-element arm): shapes in errors
    /// are written as Python writes the tuple.
    #[test]
    fn issue33_foreign_npy_shapes_are_written_as_python_tuples() {
        assert_eq!(tuple_text(&[]), "()");
        assert_eq!(tuple_text(&[5]), "(5,)");
        assert_eq!(tuple_text(&[2, 3]), "(2, 3)");
        assert_eq!(tuple_text(&[2, 3, 1]), "(2, 3, 1)");
    }
}
