//! A small deterministic generator of the texts the hf comparisons write into their rows
//! (`tests/hf_vllm.rs`, `tests/hf_vision.rs`): xorshift64*, and words drawn from each test's own
//! vocabulary, with a newline now and then.

/// The generator: its state and the vocabulary its words come from.
pub struct Gen {
    state: u64,
    vocab: &'static [&'static str],
}

impl Gen {
    pub fn new(seed: u64, vocab: &'static [&'static str]) -> Gen {
        Gen { state: seed, vocab }
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `n` words of the vocabulary, one in nine separated by a newline instead of a space.
    pub fn words(&mut self, n: usize) -> String {
        let mut s = String::new();
        for i in 0..n {
            if i > 0 {
                s.push(if self.below(9) == 0 { '\n' } else { ' ' });
            }
            s += self.vocab[self.below(self.vocab.len() as u64) as usize];
        }
        s
    }
}
