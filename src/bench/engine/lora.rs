//! `--lora-modules` with `--lora-assignment` (vLLM's and vllm-bench's): each benchmark request
//! names one LoRA adapter in its `model` field instead of the base model. Pure: which adapter
//! each request gets, deterministic for a seed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How requests are spread over the adapters.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoraAssignment {
    /// Uniformly at random, per request (vLLM's default).
    Random,
    /// Request `i` gets adapter `i mod N`.
    RoundRobin,
}

impl LoraAssignment {
    pub fn as_str(self) -> &'static str {
        match self {
            LoraAssignment::Random => "random",
            LoraAssignment::RoundRobin => "round-robin",
        }
    }
}

/// The adapter index of each of `n` requests over `modules` adapters (none when there are
/// none). Random draws come from `seed`, so a run's assignment repeats with its `--seed`.
pub fn assign(modules: usize, how: LoraAssignment, n: usize, seed: u64) -> Vec<usize> {
    if modules == 0 {
        return Vec::new();
    }
    match how {
        LoraAssignment::RoundRobin => (0..n).map(|i| i % modules).collect(),
        LoraAssignment::Random => {
            // Its own stream: the dataset's draws from `seed` stay as they were without LoRA.
            let mut rng = StdRng::seed_from_u64(seed ^ 0x4C6F_5241_4C6F_5241);
            (0..n).map(|_| rng.gen_range(0..modules)).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_cycles_and_random_is_seeded_and_covers() {
        assert_eq!(
            assign(3, LoraAssignment::RoundRobin, 7, 0),
            [0, 1, 2, 0, 1, 2, 0]
        );
        assert!(assign(0, LoraAssignment::Random, 7, 0).is_empty());
        let a = assign(4, LoraAssignment::Random, 400, 1);
        assert_eq!(a, assign(4, LoraAssignment::Random, 400, 1));
        assert_ne!(a, assign(4, LoraAssignment::Random, 400, 2));
        // Every adapter is used, none far from a quarter (binomial sd ~8.7).
        for k in 0..4 {
            let c = a.iter().filter(|&&x| x == k).count();
            assert!((60..=140).contains(&c), "adapter {k}: {c}");
        }
    }
}
