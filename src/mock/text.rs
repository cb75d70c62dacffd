//! Generated output: a seeded stream of token ids that reads like varied prose (sentences of
//! words with commas and full stops), and an optional loop that starts repeating a fixed period
//! after N tokens. Pure and allocation-free per token: the loop replays a fixed ring.

use super::tokenizer::{Spelling, Tokenizer, BASE_WORDS};

/// Period (in tokens) of the repeating tail that `--loop-after` produces.
pub const LOOP_PERIOD: usize = 24;

/// SplitMix64: tiny, seedable, good enough for text; no dependency on `rand`'s feature flags.
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the bias of the modulo is irrelevant here.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A 64-bit mix of one value, for deterministic per-request choices.
pub fn mix64(x: u64) -> u64 {
    SplitMix::new(x).next_u64()
}

/// Produces the output tokens of one sequence.
#[derive(Clone, Debug)]
pub struct TextGen {
    rng: SplitMix,
    /// Words left in the current sentence; 0 means the next token ends the sentence.
    words_left: u32,
    sentence_start: bool,
    produced: u64,
    loop_after: Option<u64>,
    ring: [u32; LOOP_PERIOD],
}

impl TextGen {
    pub fn new(seed: u64, loop_after: Option<u64>) -> Self {
        let mut rng = SplitMix::new(seed);
        let words_left = 4 + rng.below(14) as u32;
        Self {
            rng,
            words_left,
            sentence_start: true,
            produced: 0,
            loop_after,
            ring: [0; LOOP_PERIOD],
        }
    }

    /// The next token id.
    #[inline]
    pub fn next_token(&mut self) -> u32 {
        let i = self.produced;
        self.produced += 1;
        if let Some(n) = self.loop_after {
            // A repeat needs a whole period behind it: below N = 24 the first 24 tokens are the
            // period, so the output from token N on is still that period repeated (and for
            // N < 24 so is everything before N).
            if i >= n.max(LOOP_PERIOD as u64) {
                return self.ring[(i % LOOP_PERIOD as u64) as usize];
            }
        }
        let t = self.prose_token();
        self.ring[(i % LOOP_PERIOD as u64) as usize] = t;
        t
    }

    fn prose_token(&mut self) -> u32 {
        if self.words_left == 0 {
            self.words_left = 4 + self.rng.below(14) as u32;
            self.sentence_start = true;
            let r = self.rng.below(100);
            let p = if r < 85 {
                "."
            } else if r < 93 {
                "?"
            } else if r < 97 {
                "!"
            } else {
                ";"
            };
            return Tokenizer::punct_id(p).unwrap_or(0);
        }
        // A comma now and then, never right after the sentence opens.
        if !self.sentence_start && self.words_left > 2 && self.rng.below(100) < 8 {
            return Tokenizer::punct_id(",").unwrap_or(0);
        }
        self.words_left -= 1;
        let word = self.rng.below(BASE_WORDS as u64) as u32;
        let spelling = if self.sentence_start {
            Spelling::SpaceCapital
        } else {
            Spelling::SpaceLower
        };
        self.sentence_start = false;
        Tokenizer::word_id(word, spelling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The naive twin of a loop detector: the smallest period p such that the last `span`
    /// tokens repeat with period p, if any.
    fn tail_period(t: &[u32], span: usize) -> Option<usize> {
        let tail = &t[t.len() - span..];
        (1..=span / 2).find(|&p| (p..span).all(|i| tail[i] == tail[i - p]))
    }

    #[test]
    fn prose_has_no_repeated_8_grams_in_4096_tokens() {
        for seed in 0..8 {
            let mut g = TextGen::new(seed, None);
            let toks: Vec<u32> = (0..4096).map(|_| g.next_token()).collect();
            let mut seen = HashMap::new();
            for (i, w) in toks.windows(8).enumerate() {
                if let Some(j) = seen.insert(w.to_vec(), i) {
                    panic!("seed {seed}: 8-gram at {j} repeats at {i}");
                }
            }
        }
    }

    #[test]
    fn prose_decodes_to_sentences() {
        let t = Tokenizer::new();
        let mut g = TextGen::new(42, None);
        let toks: Vec<u32> = (0..200).map(|_| g.next_token()).collect();
        let text = t.decode(&toks).unwrap();
        assert!(text.starts_with(' '));
        assert!(text.chars().nth(1).unwrap().is_ascii_uppercase());
        assert!(text.contains(". ") || text.contains("? ") || text.contains("! "));
        // What we generate tokenizes back to exactly the same ids.
        assert_eq!(t.encode(&text), toks);
    }

    #[test]
    fn loop_after_repeats_a_fixed_period() {
        let mut g = TextGen::new(7, Some(100));
        let toks: Vec<u32> = (0..400).map(|_| g.next_token()).collect();
        assert_eq!(tail_period(&toks, 200), Some(LOOP_PERIOD));
        assert_eq!(tail_period(&toks[..100], 90), None);
        let mut plain = TextGen::new(7, None);
        let p: Vec<u32> = (0..100).map(|_| plain.next_token()).collect();
        assert_eq!(
            &toks[..100],
            &p[..],
            "the loop must not change the text before N"
        );
    }

    #[test]
    fn every_loop_after_value_loops_from_token_n_on() {
        // Below the period used to never loop at all (the ring was not full at token N).
        for n in [0u64, 1, 2, 5, 23, 24, 25, 47, 48, 100] {
            let mut g = TextGen::new(11, Some(n));
            let toks: Vec<u32> = (0..n as usize + 200).map(|_| g.next_token()).collect();
            let from = n as usize;
            assert!(
                (from + LOOP_PERIOD..toks.len()).all(|i| toks[i] == toks[i - LOOP_PERIOD]),
                "N = {n}: the output from token N on is not one period repeated"
            );
            assert_eq!(tail_period(&toks, 150), Some(LOOP_PERIOD), "N = {n}");
            // The first repeat is at max(N, 24): nothing repeats earlier.
            let first = n.max(LOOP_PERIOD as u64) as usize;
            let mut plain = TextGen::new(11, None);
            let p: Vec<u32> = (0..first).map(|_| plain.next_token()).collect();
            assert_eq!(&toks[..first], &p[..], "N = {n}: prose before the loop");
        }
    }
}
