//! What MDS applies to whole shard files: the hashes of `index.json` (hashlib's and xxhash's
//! algorithm names, mosaicml/streaming `streaming/base/hashing.py`) and the compressions
//! (`streaming/base/compression.py`: `zstd`, `gz`).

use std::io::Read;

use crate::error::ForeignError;

/// Hex digest of `bytes` with MDS's algorithm names (hashlib and xxhash).
fn digest(algorithm: &str, bytes: &[u8]) -> Option<String> {
    use sha1::Digest as _;
    let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    Some(match algorithm {
        "sha1" => hex(&sha1::Sha1::digest(bytes)),
        "sha256" => hex(&sha2::Sha256::digest(bytes)),
        "sha512" => hex(&sha2::Sha512::digest(bytes)),
        "md5" => hex(&md5::Md5::digest(bytes)),
        "xxh64" => format!("{:016x}", xxhash_rust::xxh64::xxh64(bytes, 0)),
        "xxh3_64" => format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes)),
        "xxh128" | "xxh3_128" => format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes)),
        _ => return None,
    })
}

/// Checks `bytes` against every `(algorithm, hex digest)` of `hashes`, in order (hex case
/// ignored).
///
/// # Errors
/// [`ForeignError::UnsupportedHash`] for an algorithm this crate cannot compute;
/// [`ForeignError::HashMismatch`] for the first digest that differs.
pub(crate) fn check_hashes(hashes: &[(String, String)], bytes: &[u8]) -> Result<(), ForeignError> {
    for (algorithm, expected) in hashes {
        let found = digest(algorithm, bytes)
            .ok_or_else(|| ForeignError::UnsupportedHash { algorithm: algorithm.clone() })?;
        if !found.eq_ignore_ascii_case(expected) {
            return Err(ForeignError::HashMismatch {
                algorithm: algorithm.clone(),
                expected: expected.clone(),
                found,
            });
        }
    }
    Ok(())
}

/// Inflates `packed` (compressed with `algo`, `zstd` or `gz`) to the `size` bytes the index
/// claims, never past what `packed` may inflate to ([`guideloom_formats::inflate_bound`]): a
/// claim beyond that is refused before anything is inflated, and at most `size + 1` bytes of
/// output are read (so a shard that inflates past its size is seen without inflating it all).
///
/// # Errors
/// [`ForeignError::DecompressionFailed`] (also for a claim past the bound);
/// [`ForeignError::UnsupportedCompression`] for another algorithm.
pub(crate) fn decompress(algo: &str, packed: &[u8], size: u64) -> Result<Vec<u8>, ForeignError> {
    let failed = |e: std::io::Error| ForeignError::DecompressionFailed { reason: e.to_string() };
    let bound = guideloom_formats::inflate_bound(packed.len() as u64);
    if size > bound {
        return Err(ForeignError::DecompressionFailed {
            reason: format!(
                "the index claims {size} bytes for {} compressed bytes; at most {bound} are inflated ({} times the compressed bytes plus {}, at most {})",
                packed.len(),
                guideloom_formats::MAX_INFLATE_RATIO,
                guideloom_formats::INFLATE_ALLOWANCE_BYTES,
                guideloom_formats::MAX_INFLATED_BYTES
            ),
        });
    }
    let mut out = Vec::new();
    let limit = size.saturating_add(1);
    match algo {
        "zstd" => zstd::stream::read::Decoder::new(packed)
            .map_err(failed)?
            .take(limit)
            .read_to_end(&mut out)
            .map_err(failed)?,
        "gz" => flate2::read::GzDecoder::new(packed).take(limit).read_to_end(&mut out).map_err(failed)?,
        other => return Err(ForeignError::UnsupportedCompression { compression: other.to_string() }),
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33 (mutants deleting `digest`'s arms): each algorithm name Streaming's
    /// `hashing.py` may write, checked against the digest of the same bytes computed by
    /// Python's `hashlib` and `xxhash` 4.1.0 (the packages Streaming hashes with), in lower
    /// and upper case hex; one digit changed is a mismatch naming the algorithm; a name outside
    /// the table is refused.
    #[test]
    fn issue33_foreign_mds_every_hash_algorithm_matches_python_s() {
        let bytes = b"guideloom mds shard\n";
        let python = [
            ("sha1", "2a286df938b0607e3a334eec503a3be3abd05768"),
            ("sha256", "32a5c738b99fc7320a49884d084ec6ba636f15d50e2cf081abd9f36f9ddff6fa"),
            (
                "sha512",
                "2ccb43ded2f0adc037f51dc06f27c4fd02f5382cf50f58585077e27b0369889c114e5494cf705b6aca4bc5fb355dd01016364643ecdd12b2463430368e660a7d",
            ),
            ("md5", "14af2162ebf464ec317fa1549889afc8"),
            ("xxh64", "41f85873569a7a17"),
            ("xxh3_64", "5c66ebb249225c24"),
            ("xxh128", "f3cae01b0fcb422e9897486ddef5f99f"),
            ("xxh3_128", "f3cae01b0fcb422e9897486ddef5f99f"),
        ];
        for (algorithm, hex) in python {
            let one = |h: &str| vec![(algorithm.to_string(), h.to_string())];
            assert_eq!(check_hashes(&one(hex), bytes), Ok(()), "{algorithm}");
            assert_eq!(check_hashes(&one(&hex.to_uppercase()), bytes), Ok(()), "{algorithm}");
            let wrong = format!("{}{}", if hex.starts_with('0') { '1' } else { '0' }, &hex[1..]);
            assert_eq!(
                check_hashes(&one(&wrong), bytes),
                Err(ForeignError::HashMismatch {
                    algorithm: algorithm.into(),
                    expected: wrong.clone(),
                    found: hex.into()
                }),
                "{algorithm}"
            );
        }
        let all: Vec<(String, String)> = python.iter().map(|(a, h)| (a.to_string(), h.to_string())).collect();
        assert_eq!(check_hashes(&all, bytes), Ok(()));
        assert_eq!(
            check_hashes(&[("blake2b".into(), "00".into())], bytes),
            Err(ForeignError::UnsupportedHash { algorithm: "blake2b".into() })
        );
    }

    /// Issue 33 (mutant of `decompress`'s `size > bound`): a claim of exactly the bound of the
    /// compressed bytes is inflated (here to the 5 bytes it holds: the caller compares sizes);
    /// one byte more is refused before inflating.
    #[test]
    fn issue33_foreign_mds_a_claim_of_exactly_the_inflate_bound_is_inflated() {
        let packed = zstd::encode_all(&b"hello"[..], 3).unwrap();
        let bound = guideloom_formats::inflate_bound(packed.len() as u64);
        assert_eq!(decompress("zstd", &packed, bound).unwrap(), b"hello");
        match decompress("zstd", &packed, bound + 1) {
            Err(ForeignError::DecompressionFailed { reason }) => assert!(
                reason.starts_with(&format!(
                    "the index claims {} bytes for {} compressed bytes",
                    bound + 1,
                    packed.len()
                )),
                "{reason}"
            ),
            other => panic!("expected the claim refused, got {other:?}"),
        }
    }
}
