//! The BPE vocabularies `tiktoken-rs` embeds: [`Tokenizer`] names one, [`Vocabulary`] is one
//! loaded (text to token ids and back).

use crate::IngestError;

/// A BPE vocabulary embedded by `tiktoken-rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tokenizer {
    /// `cl100k_base` (GPT-3.5/4; ids < 100,277; end of text 100,257).
    Cl100k,
    /// `o200k_base` (GPT-4o; ids < 200,019; end of text 199,999).
    O200k,
    /// `r50k_base`, GPT-2's vocabulary (ids < 50,257; end of text 50,256).
    Gpt2,
}

impl Tokenizer {
    /// The name used on the command line and in manifests (`cl100k`, `o200k`, `gpt2`).
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Cl100k => "cl100k",
            Tokenizer::O200k => "o200k",
            Tokenizer::Gpt2 => "gpt2",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "cl100k" | "cl100k_base" => Some(Tokenizer::Cl100k),
            "o200k" | "o200k_base" => Some(Tokenizer::O200k),
            "gpt2" | "r50k" | "r50k_base" => Some(Tokenizer::Gpt2),
            _ => None,
        }
    }

    /// The id of `<|endoftext|>`.
    pub fn eos_id(self) -> u32 {
        match self {
            Tokenizer::Cl100k => 100_257,
            Tokenizer::O200k => 199_999,
            Tokenizer::Gpt2 => 50_256,
        }
    }

    /// Loads the embedded vocabulary (no network access).
    ///
    /// # Errors
    /// [`IngestError::Tokenizer`] if the embedded ranks fail to load.
    pub fn load(self) -> Result<Vocabulary, IngestError> {
        let r = match self {
            Tokenizer::Cl100k => tiktoken_rs::cl100k_base(),
            Tokenizer::O200k => tiktoken_rs::o200k_base(),
            Tokenizer::Gpt2 => tiktoken_rs::r50k_base(),
        };
        let bpe = r.map_err(|e| IngestError::Tokenizer { name: self.name(), reason: e.to_string() })?;
        Ok(Vocabulary { tokenizer: self, bpe })
    }
}

/// A loaded BPE vocabulary ([`Tokenizer::load`]): text to token ids and back. It wraps the
/// `tiktoken-rs` encoder, so that crate's version is not part of guideloom's API.
pub struct Vocabulary {
    tokenizer: Tokenizer,
    bpe: tiktoken_rs::CoreBPE,
}

impl std::fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocabulary").field("tokenizer", &self.tokenizer).finish_non_exhaustive()
    }
}

impl Vocabulary {
    /// The tokenizer this vocabulary belongs to.
    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }

    /// The token ids of `text`; special-token text (`<|endoftext|>`) is encoded as ordinary
    /// text.
    pub fn encode_ordinary(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }

    /// The text of `ids`.
    ///
    /// # Errors
    /// [`IngestError::Tokenizer`] when an id is not in the vocabulary or the ids cut a UTF-8
    /// character.
    pub fn decode(&self, ids: &[u32]) -> Result<String, IngestError> {
        self.bpe
            .decode(ids)
            .map_err(|e| IngestError::Tokenizer { name: self.tokenizer.name(), reason: e.to_string() })
    }
}
