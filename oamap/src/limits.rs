//! Bounds on what hostile inputs can make this crate do: stack depth, JSON nesting, and the
//! size of the arrays the writer makes.
//!
//! - Every recursive walk (schema parsing and naming, the writer, JSON output) runs through
//!   [`deep`], which moves to a fresh stack segment when the current one runs low (the
//!   `stacker` crate), so a deep but finite structure is walked instead of overflowing the
//!   thread's stack; what bounds the depth is the input itself (the data, or the schema's
//!   size), and cycles are refused or emitted as references before they recurse.
//! - JSON text this crate parses (an `.npz`'s stored schema, a dataset description) may nest
//!   at most [`MAX_JSON_DEPTH`] levels, and the writer refuses to store a schema whose JSON
//!   is deeper, so whatever it writes it reads back.

use serde_json::Value;

use crate::OamapError;

/// The deepest JSON nesting (objects and arrays) this crate parses or stores (1,024).
pub const MAX_JSON_DEPTH: usize = 1024;

/// The largest array the writer ([`from_data`](crate::from_data)) builds, in bytes (1 GiB):
/// a `S<n>` dtype pads every value to `n` bytes, so a wide dtype could otherwise turn a few
/// bytes of input into an allocation of any size.
pub const MAX_WRITE_ARRAY_BYTES: u64 = 1 << 30;

/// Runs `f` with at least 64 KiB of stack left, switching to a new 4 MiB segment when less
/// remains.
#[inline]
pub(crate) fn deep<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(64 * 1024, 4 * 1024 * 1024, f)
}

/// The nesting depth of JSON text (objects and arrays, strings skipped), stopping as soon as
/// it exceeds `max`: `Err(depth)` then.
pub(crate) fn json_depth(text: &[u8], max: usize) -> Result<usize, usize> {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
                if depth > max {
                    return Err(depth);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(deepest)
}

/// The depth of a JSON value (a scalar is 0, `[]` is 1).
pub(crate) fn value_depth(v: &Value) -> usize {
    deep(|| match v {
        Value::Array(a) => 1 + a.iter().map(value_depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(value_depth).max().unwrap_or(0),
        _ => 0,
    })
}

/// Parses JSON text nested at most [`MAX_JSON_DEPTH`] levels (serde_json's own limit, 128,
/// is lifted: the text is measured first, then parsed on a stack grown to fit).
///
/// # Errors
/// [`OamapError::Json`] naming `name` for text that is not JSON; [`OamapError::TooDeep`]
/// naming it for text nested deeper than the limit.
pub fn parse_json(name: &str, text: &[u8]) -> Result<Value, OamapError> {
    let depth = json_depth(text, MAX_JSON_DEPTH).map_err(|found| OamapError::TooDeep {
        name: name.to_string(),
        limit: MAX_JSON_DEPTH,
        found,
    })?;
    // About 1 KiB of stack per level in a debug build, plus a margin.
    let stack = (depth + 64) * 2048;
    stacker::grow(stack, || {
        let mut de = serde_json::Deserializer::from_slice(text);
        de.disable_recursion_limit();
        let v = serde::Deserialize::deserialize(&mut de)
            .and_then(|v: Value| de.end().map(|()| v))
            .map_err(|source| OamapError::Json { name: name.to_string(), source });
        v
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_depth_skips_strings_and_stops_at_the_limit() {
        assert_eq!(json_depth(br#"{"a": "[[[{{", "b": [[1], {"c": []}]}"#, 10), Ok(4));
        assert_eq!(json_depth(br#""\"[" "#, 10), Ok(0));
        assert_eq!(json_depth(&[b'['; 20], 10), Err(11));
        let deep_text = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        let v = parse_json("x", deep_text.as_bytes()).unwrap();
        assert_eq!(value_depth(&v), 1000);
        let too_deep = format!("{}{}", "[".repeat(1025), "]".repeat(1025));
        match parse_json("x", too_deep.as_bytes()).unwrap_err() {
            OamapError::TooDeep { name, limit: 1024, found: 1025 } => assert_eq!(name, "x"),
            other => panic!("{other}"),
        }
        assert!(matches!(parse_json("x", b"[1] 2"), Err(OamapError::Json { .. })));
    }
}
