//! The mock's deterministic tokenizer: `/tokenize`, prompt-length accounting and generated text
//! all go through this one vocabulary, so a client can build a prompt of an exact token count.
//!
//! Vocabulary: ids `0..256` are raw bytes (the fallback for anything unknown), then punctuation,
//! then every base word in four spellings (`word`, ` word`, `Word`, ` Word`), one token each.
//! Text is cut into segments (an optional single space plus a run of ASCII letters, or one other
//! byte); a segment in the vocabulary is one token, any other segment is one token per byte. So
//! `detokenize(tokenize(s)) == s` for every string, and ` the` repeated N times is N tokens.
//! This module must never allocate per generated token: `piece` hands out `&'static`-like slices.

use std::collections::HashMap;

/// Punctuation and whitespace tokens that follow the byte tokens.
const PUNCT: [&str; 12] = [
    ".", ",", "?", "!", ";", ":", "\n", "\n\n", " ", "-", "'", "\"",
];

/// Real English words first (they make generated text read like prose), then invented words
/// built from syllables fill the vocabulary up to [`BASE_WORDS`].
const REAL_WORDS: &str = "the of and to in is that it was for on are as with his they at be this \
from have or by one had not but what all were when we there can an your which their said if do \
will each about how up out them then she many some so these would other into has more her two \
like him see time could no make than first been its who now people my made over did down only \
way find use may water long little very after words called just where most know get through back \
much before go good new write our used me man too any day same right look think also around \
another came come work three word must because does part even place well such here take why \
things help put years different away again off went old number great tell men say small every \
found still between name should home big give air line set own under read last never us left end \
along while might next sound below saw something thought both few those always looked show large \
often together asked house world going want school important until form food keep children feet \
land side without boy once animals life enough took sometimes four head above kind began almost \
live page got earth need far hand high year mother light parts country father let night following \
picture being study second eyes soon times story boys since white days ever paper hard near \
sentence better best across during today others however sure means knew try told young miles sun \
ways thing whole hear example heard several change answer room sea against top turned learn point \
city play toward five using himself usually money seen car morning given body family later order \
upon river system user assistant tool model token server stream engine cache block prompt request \
response quiet garden window morning evening winter summer autumn spring bright dark gentle \
careful simple complex early late narrow broad silver golden wooden stone glass paper field \
forest mountain valley harbor market bridge tower village castle island meadow lantern letter \
journey question memory promise reason silence thunder whisper shadow river candle mirror ocean \
travel wander listen gather follow notice wonder measure balance carry build open close begin \
finish remember forget explain describe imagine consider decide arrive return";

/// Number of base words (real plus invented); each has four spellings.
pub const BASE_WORDS: usize = 2048;

const SYLLABLE_ONSETS: [&str; 16] = [
    "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st",
];
const SYLLABLE_NUCLEI: [&str; 8] = ["a", "e", "i", "o", "u", "ai", "ou", "ee"];
const SYLLABLE_CODAS: [&str; 4] = ["", "n", "r", "l"];

/// First id of the punctuation tokens.
pub const PUNCT_BASE: u32 = 256;
/// First id of the word tokens.
pub const WORD_BASE: u32 = PUNCT_BASE + PUNCT.len() as u32;
/// Total vocabulary size.
pub const VOCAB_SIZE: u32 = WORD_BASE + 4 * BASE_WORDS as u32;

/// Word spelling variants, in id order within a word's group of four.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spelling {
    Lower = 0,
    SpaceLower = 1,
    Capital = 2,
    SpaceCapital = 3,
}

/// The vocabulary and its reverse map. Build once ([`Tokenizer::new`]) and share.
pub struct Tokenizer {
    pieces: Vec<Box<[u8]>>,
    ids: HashMap<Box<[u8]>, u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({} tokens)", self.pieces.len())
    }
}

impl Default for Tokenizer {
    fn default() -> Self {
        Self::new()
    }
}

fn base_words() -> Vec<String> {
    let mut words: Vec<String> = Vec::with_capacity(BASE_WORDS);
    let mut seen = std::collections::HashSet::new();
    for w in REAL_WORDS.split_ascii_whitespace() {
        if seen.insert(w.to_string()) {
            words.push(w.to_string());
        }
    }
    // Invented words: two or three syllables enumerated in a fixed order, skipping duplicates.
    let syllables: Vec<String> = SYLLABLE_ONSETS
        .iter()
        .flat_map(|o| {
            SYLLABLE_NUCLEI
                .iter()
                .flat_map(move |n| SYLLABLE_CODAS.iter().map(move |c| format!("{o}{n}{c}")))
        })
        .collect();
    let n = syllables.len();
    let mut k: usize = 0;
    while words.len() < BASE_WORDS {
        // Walk all n*n syllable pairs in a scattered order (7919 is coprime with n*n).
        let pair = (k * 7919) % (n * n);
        let w = format!("{}{}", syllables[pair % n], syllables[pair / n]);
        if seen.insert(w.clone()) {
            words.push(w);
        }
        k += 1;
    }
    words
}

fn capitalize(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

impl Tokenizer {
    pub fn new() -> Self {
        let mut pieces: Vec<Box<[u8]>> = Vec::with_capacity(VOCAB_SIZE as usize);
        for b in 0..=255u8 {
            pieces.push(vec![b].into_boxed_slice());
        }
        for p in PUNCT {
            pieces.push(p.as_bytes().into());
        }
        for w in base_words() {
            let cap = capitalize(&w);
            pieces.push(w.as_bytes().into());
            pieces.push(format!(" {w}").into_bytes().into_boxed_slice());
            pieces.push(cap.as_bytes().into());
            pieces.push(format!(" {cap}").into_bytes().into_boxed_slice());
        }
        debug_assert_eq!(pieces.len(), VOCAB_SIZE as usize);
        let mut ids = HashMap::with_capacity(pieces.len());
        // Byte tokens are only a fallback: multi-byte pieces and punctuation win the lookup.
        for (i, p) in pieces.iter().enumerate().skip(256) {
            ids.entry(p.clone()).or_insert(i as u32);
        }
        Self { pieces, ids }
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> u32 {
        self.pieces.len() as u32
    }

    /// The bytes of one token; `None` for an id outside the vocabulary.
    #[inline]
    pub fn piece(&self, id: u32) -> Option<&[u8]> {
        self.pieces.get(id as usize).map(|p| &p[..])
    }

    /// Token id of base word `word` (0..BASE_WORDS) in the given spelling.
    #[inline]
    pub fn word_id(word: u32, spelling: Spelling) -> u32 {
        WORD_BASE + word * 4 + spelling as u32
    }

    /// Token id of a punctuation piece, if it is one.
    pub fn punct_id(p: &str) -> Option<u32> {
        PUNCT
            .iter()
            .position(|x| *x == p)
            .map(|i| PUNCT_BASE + i as u32)
    }

    /// Tokenize `text`, appending ids to `out`.
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) {
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let start = i;
            let mut j = i;
            if b[j] == b' ' && j + 1 < b.len() && b[j + 1].is_ascii_alphabetic() {
                j += 1;
            }
            if b[j].is_ascii_alphabetic() {
                while j < b.len() && b[j].is_ascii_alphabetic() {
                    j += 1;
                }
            } else if b[j] == b'\n' && j + 1 < b.len() && b[j + 1] == b'\n' {
                j += 2;
            } else {
                j += 1;
            }
            let seg = &b[start..j];
            match self.ids.get(seg) {
                Some(&id) => out.push(id),
                None => out.extend(seg.iter().map(|&x| x as u32)),
            }
            i = j;
        }
    }

    /// Tokenize `text` into a new vector.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut v = Vec::with_capacity(text.len() / 4 + 1);
        self.encode_into(text, &mut v);
        v
    }

    /// Concatenate the pieces of `ids`; `Err(id)` names the first id outside the vocabulary.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>, u32> {
        let mut out = Vec::with_capacity(ids.len() * 6);
        for &id in ids {
            out.extend_from_slice(self.piece(id).ok_or(id)?);
        }
        Ok(out)
    }

    /// Decode to text; byte tokens that do not form UTF-8 become U+FFFD, as real servers do.
    pub fn decode(&self, ids: &[u32]) -> Result<String, u32> {
        let bytes = self.decode_bytes(ids)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }
}

/// Role and content of one chat message.
pub struct ChatMessage<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

/// The text of a message's `content` as the chat template reads it: a string as it is, a list
/// of content parts as their `text` joined by newlines (parts without text skipped); `None` for
/// any other JSON (the caller decides what a missing content means).
pub fn content_text(content: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The fixed chat template: `role: content` paragraphs, then `assistant:` as the generation
/// prompt. Chat completions and `/tokenize` with `messages` both use it, so their counts agree.
pub fn apply_chat_template(messages: &[ChatMessage<'_>], add_generation_prompt: bool) -> String {
    let mut s = String::new();
    for m in messages {
        s.push_str(m.role);
        s.push(':');
        if !m.content.is_empty() {
            s.push(' ');
            s.push_str(m.content);
        }
        s.push_str("\n\n");
    }
    if add_generation_prompt {
        s.push_str("assistant:");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn repeated_word_counts_exactly() {
        let t = Tokenizer::new();
        for n in [1usize, 7, 1000] {
            let s = " the".repeat(n);
            assert_eq!(t.encode(&s).len(), n);
        }
        assert_eq!(t.encode("Hello world."), {
            // "Hello" is unknown: five byte tokens; " world" and "." are one each.
            let mut v: Vec<u32> = b"Hello".iter().map(|&b| b as u32).collect();
            v.push(t.ids[&b" world"[..]]);
            v.push(Tokenizer::punct_id(".").unwrap());
            v
        });
    }

    #[test]
    fn vocabulary_is_unique_and_sized() {
        let t = Tokenizer::new();
        assert_eq!(t.vocab_size(), VOCAB_SIZE);
        // Every non-byte piece maps back to its own id: no two tokens share a spelling.
        for id in 256..VOCAB_SIZE {
            assert_eq!(t.ids[t.piece(id).unwrap()], id, "piece {id}");
        }
    }

    #[test]
    fn word_tokens_round_trip_as_ids() {
        let t = Tokenizer::new();
        let ids: Vec<u32> = (0..BASE_WORDS as u32)
            .map(|w| Tokenizer::word_id(w, Spelling::SpaceLower))
            .collect();
        let text = t.decode(&ids).unwrap();
        assert_eq!(t.encode(&text), ids);
    }

    #[test]
    fn chat_template_is_counted_like_tokenize() {
        let t = Tokenizer::new();
        let msgs = [ChatMessage {
            role: "user",
            content: "the house",
        }];
        let s = apply_chat_template(&msgs, true);
        assert_eq!(s, "user: the house\n\nassistant:");
        // user : " the" " house" "\n\n" assistant :
        assert_eq!(t.encode(&s).len(), 7);
    }

    #[test]
    fn unknown_id_is_an_error() {
        let t = Tokenizer::new();
        assert_eq!(t.decode(&[1, VOCAB_SIZE]), Err(VOCAB_SIZE));
    }

    proptest! {
        #[test]
        fn any_text_round_trips(s in "\\PC{0,64}") {
            let t = Tokenizer::new();
            prop_assert_eq!(t.decode(&t.encode(&s)).unwrap(), s);
        }
    }
}
