//! `ingest jsonl`: JSON Lines files (a field of token ids, or of text to tokenize) into a
//! storage; the field rule the sequential JSON Lines source shares.

use std::fs;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::{json, Value};

use crate::input::read_line_bounded;
use crate::spill::Spill;
use crate::write::{check_output, write_spill};
use crate::{Document, IngestError, IngestReport, Tokenizer, Vocabulary, WriteOptions, CHUNK_BYTES};

/// Options of [`ingest_jsonl`].
#[derive(Debug, Clone)]
pub enum JsonlField {
    /// The field holds a list of token ids.
    Tokens(String),
    /// The field holds text to tokenize with the given vocabulary.
    Text(String, Tokenizer),
}

/// One JSON Lines line waiting to be parsed: file index, 1-based line number, text.
type PendingLine = (usize, u64, String);

/// Ingests JSON Lines files: each non-empty line an object whose field is a list of token ids
/// (or a text to tokenize) = one document. Both targets work: [`Target::Stream`](crate::Target::Stream) writes the
/// tokens alone, [`Target::DocMeta`](crate::Target::DocMeta) keeps each line's document boundary (ordinal and file).
///
/// Lines are parsed (and tokenized) in parallel, [`CHUNK_BYTES`] at a time, and spilled in
/// input order as [`ingest_text`](crate::ingest_text) does, so memory stays bounded; errors are reported for the
/// first bad line in input order.
///
/// # Errors
/// [`IngestError::BadJsonl`] naming file and line for malformed lines, missing fields or ids
/// that are not non-negative integers below 2^32; [`IngestError::TokenTooLarge`];
/// [`IngestError::Spill`]; storage errors.
pub fn ingest_jsonl(
    out: &Path,
    files: &[PathBuf],
    field: &JsonlField,
    write: &WriteOptions,
) -> Result<IngestReport, IngestError> {
    ingest_jsonl_in_chunks(out, files, field, write, CHUNK_BYTES)
}

/// [`ingest_jsonl`], parsing `chunk_bytes` of lines per parallel round.
fn ingest_jsonl_in_chunks(
    out: &Path,
    files: &[PathBuf],
    field: &JsonlField,
    write: &WriteOptions,
    chunk_bytes_max: usize,
) -> Result<IngestReport, IngestError> {
    let meta = match field {
        JsonlField::Tokens(f) => json!({"source": "jsonl", "tokens_field": f}),
        JsonlField::Text(f, t) => json!({"source": "jsonl", "text_field": f, "tokenizer": t.name()}),
    };
    check_output(out, &meta, write)?;
    let vocab = match field {
        JsonlField::Text(_, t) => Some(t.load()?),
        JsonlField::Tokens(_) => None,
    };
    let mut spill = Spill::new(out)?;
    let mut total_bytes = 0u64;
    let mut chunk: Vec<PendingLine> = Vec::new();
    let mut chunk_bytes = 0;
    let parse_chunk = |chunk: &mut Vec<PendingLine>, spill: &mut Spill| {
        let docs: Vec<Result<Document, IngestError>> = chunk
            .par_iter()
            .map(|(f, line, text)| jsonl_document(&files[*f], *line, text, field, &vocab))
            .collect();
        chunk.clear();
        docs.into_iter().try_for_each(|d| spill.push(&d?))
    };
    for (f, path) in files.iter().enumerate() {
        let file = fs::File::open(path).map_err(|source| IngestError::Read { path: path.clone(), source })?;
        let mut reader = std::io::BufReader::new(file);
        let mut raw = Vec::new();
        for i in 0u64.. {
            match read_line_bounded(&mut reader, &mut raw, path, i + 1, write.max_document_bytes) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    // Lines before this one come first, errors included.
                    parse_chunk(&mut chunk, &mut spill)?;
                    return Err(e);
                }
            }
            let text = raw.strip_suffix(b"\n").unwrap_or(&raw);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            let line = match std::str::from_utf8(text) {
                Ok(line) => line.to_string(),
                Err(_) => {
                    parse_chunk(&mut chunk, &mut spill)?;
                    return Err(IngestError::BadJsonl {
                        path: path.clone(),
                        line: i + 1,
                        reason: "not valid UTF-8".into(),
                    });
                }
            };
            total_bytes += line.len() as u64 + 1;
            if line.trim().is_empty() {
                continue;
            }
            chunk_bytes += line.len();
            chunk.push((f, i + 1, line));
            if chunk_bytes >= chunk_bytes_max {
                parse_chunk(&mut chunk, &mut spill)?;
                chunk_bytes = 0;
            }
        }
    }
    parse_chunk(&mut chunk, &mut spill)?;
    write_spill(out, spill, total_bytes, meta, write)
}

/// The document of one non-empty JSON Lines line.
fn jsonl_document(
    path: &Path,
    line: u64,
    text: &str,
    field: &JsonlField,
    vocab: &Option<Vocabulary>,
) -> Result<Document, IngestError> {
    let tokens = jsonl_tokens(text, field, vocab.as_ref()).map_err(|reason| IngestError::BadJsonl {
        path: path.to_path_buf(),
        line,
        reason,
    })?;
    Ok(Document { source: format!("{}:{line}", path.display()), tokens })
}

/// The token ids of one non-empty JSON Lines line: its `field` as a list of ids, or its text
/// tokenized with `vocab`; `Err` says why the line is bad.
pub(crate) fn jsonl_tokens(
    text: &str,
    field: &JsonlField,
    vocab: Option<&Vocabulary>,
) -> Result<Vec<u32>, String> {
    match field {
        JsonlField::Tokens(name) => {
            let mut de = serde_json::Deserializer::from_str(text);
            let found =
                serde::Deserializer::deserialize_map(&mut de, TokenField(name)).map_err(|e| e.to_string())?;
            de.end().map_err(|e| e.to_string())?;
            found.unwrap_or_else(|| Err(not_a_list(name)))
        }
        JsonlField::Text(name, _) => {
            let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
            let text = v
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("field {name:?} is missing or not a string"))?;
            Ok(vocab.map(|b| b.encode_ordinary(text)).unwrap_or_default())
        }
    }
}

/// Field `name` of one JSON Lines object as token ids, parsed straight into a `Vec<u32>`
/// (no `serde_json::Value` for the line or per id, so a line takes about its size in memory).
/// `None` when the field is missing; `Some(Err)` says why it is not a list of ids. As a
/// `Value` would, the last of repeated keys counts.
struct TokenField<'a>(&'a str);

/// The ids of one list ([`TokenField`]).
struct TokenIds<'a>(&'a str);

/// One id: `Err` holds the value as JSON text when it is not an integer in `[0, 2^32)`.
struct TokenId;

impl<'de> serde::de::Visitor<'de> for TokenField<'_> {
    type Value = Option<Result<Vec<u32>, String>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.0 {
                found = Some(m.next_value_seed(TokenIds(self.0))?);
            } else {
                m.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for TokenIds<'_> {
    type Value = Result<Vec<u32>, String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TokenIds<'_> {
    type Value = Result<Vec<u32>, String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of token ids")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        let mut ids = Vec::new();
        let mut bad = None;
        while let Some(id) = s.next_element_seed(TokenId)? {
            match id {
                Ok(id) if bad.is_none() => ids.push(id),
                Ok(_) => {}
                Err(v) => {
                    bad.get_or_insert_with(|| {
                        format!(
                            "token {} of field {:?} is {v}, not an integer in [0, 2^32)",
                            ids.len(),
                            self.0
                        )
                    });
                }
            }
        }
        Ok(bad.map_or(Ok(ids), Err))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        while m.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }
}

/// Why field `name` is not a token list.
fn not_a_list(name: &str) -> String {
    format!("field {name:?} is missing or not a list of token ids")
}

impl<'de> serde::de::DeserializeSeed<'de> for TokenId {
    type Value = Result<u32, String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TokenId {
    type Value = Result<u32, String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a token id")
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(u32::try_from(v).map_err(|_| v.to_string()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(u32::try_from(v).map_err(|_| v.to_string()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Err(serde_json::Number::from_f64(v).map_or_else(|| v.to_string(), |n| n.to_string())))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Err(v.to_string()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Err(serde_json::Value::from(v).to_string()))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err("null".into()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Err("a list".into()))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        while m.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        Ok(Err("an object".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DtypeChoice, Target, MAX_DOCUMENT_BYTES};

    #[test]
    fn jsonl_ingest_in_chunks_reports_the_first_bad_line_in_input_order() {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in.jsonl");
        let mut bytes = b"{\"ids\": [1, 2]}\n{\"ids\": [3]}\n{\"ids\": \"x\"}\n{\"ids\": [4]}\n".to_vec();
        bytes.extend_from_slice(b"{\"ids\": [\xff]}\n");
        fs::write(&input, &bytes).unwrap();
        let write = WriteOptions {
            shards: 1,
            dtype: DtypeChoice::Auto,
            target: Target::Stream,
            append: false,
            progress: false,
            max_document_bytes: MAX_DOCUMENT_BYTES,
        };
        for chunk in [1, 20, usize::MAX] {
            let out = tmp.path().join(format!("out{chunk}"));
            let e = ingest_jsonl_in_chunks(
                &out,
                std::slice::from_ref(&input),
                &JsonlField::Tokens("ids".into()),
                &write,
                chunk,
            )
            .unwrap_err();
            assert!(matches!(e, IngestError::BadJsonl { line: 3, .. }), "chunk {chunk}: {e:?}");
            assert!(!out.join("manifest.json").exists(), "a failed ingest writes nothing");
        }
        fs::write(&input, b"{\"ids\": [1, 2]}\n\n{\"ids\": [70000]}\n{\"ids\": [3]}\n").unwrap();
        for chunk in [1, usize::MAX] {
            let out = tmp.path().join(format!("ok{chunk}"));
            let r = ingest_jsonl_in_chunks(
                &out,
                std::slice::from_ref(&input),
                &JsonlField::Tokens("ids".into()),
                &write,
                chunk,
            )
            .unwrap();
            assert_eq!((r.documents, r.tokens, r.dtype, r.input_bytes), (3, 4, "u32", 47));
            let u16_write = WriteOptions { dtype: DtypeChoice::U16, ..write };
            let e = ingest_jsonl_in_chunks(
                &tmp.path().join(format!("u16{chunk}")),
                std::slice::from_ref(&input),
                &JsonlField::Tokens("ids".into()),
                &u16_write,
                chunk,
            )
            .unwrap_err();
            assert!(
                matches!(&e, IngestError::TokenTooLarge { id: 70000, document: 1, source_name, .. } if source_name.ends_with("in.jsonl:3")),
                "{e:?}"
            );
        }
    }

    /// Issue 19, class 3: token lists are parsed straight into ids (no `Value` per element),
    /// with the same results and messages as before for good and bad lines.
    #[test]
    fn issue19_unbounded_memory_from_inputs_token_lists_parse_without_values() {
        let field = JsonlField::Tokens("ids".into());
        let parse = |t: &str| jsonl_tokens(t, &field, None);
        assert_eq!(parse(r#"{"x":{"a":[1,[2]]},"ids":[0,1,4294967295],"y":"z"}"#), Ok(vec![0, 1, u32::MAX]));
        assert_eq!(parse(r#"{"ids":[9],"ids":[5,6]}"#), Ok(vec![5, 6]));
        assert_eq!(parse(r#"{"ids":[]}"#), Ok(vec![]));
        let not_int = |j: usize, v: &str| {
            Err(format!("token {j} of field \"ids\" is {v}, not an integer in [0, 2^32)"))
        };
        assert_eq!(parse(r#"{"ids":[1,4294967296,-1]}"#), not_int(1, "4294967296"));
        assert_eq!(parse(r#"{"ids":[-1]}"#), not_int(0, "-1"));
        assert_eq!(parse(r#"{"ids":[1,2.5]}"#), not_int(1, "2.5"));
        assert_eq!(parse(r#"{"ids":[1,2,"7"]}"#), not_int(2, "\"7\""));
        assert_eq!(parse(r#"{"ids":[null]}"#), not_int(0, "null"));
        let not_list = Err("field \"ids\" is missing or not a list of token ids".to_string());
        for line in
            [r#"{"other":[1]}"#, r#"{"ids":5}"#, r#"{"ids":{"a":1}}"#, r#"{"ids":"abc"}"#, r#"{"ids":null}"#]
        {
            assert_eq!(parse(line), not_list, "{line}");
        }
        for line in [r#"{"ids":[1,2]"#, r#"{"ids":[1]} x"#, "[1,2]", ""] {
            assert!(parse(line).is_err(), "{line}");
        }
    }
}
