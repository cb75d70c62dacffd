//! Token-id prompts: seeded ids from a range free of special tokens, for servers that accept
//! token ids (exact prompt sizes without a tokenizer).

use super::text::Rng;
use std::ops::Range;

/// Errors of [`token_ids`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenIdError {
    #[error("token id range {start}..{end} is empty")]
    EmptyRange { start: u32, end: u32 },
}

/// `n` token ids drawn from `id_range` (exclusive end), deterministic in `seed`. The first ids
/// depend only on the seed, so prompts of different seeds diverge at position 0 (a genuine
/// prefix-cache miss). The caller picks a range free of special tokens.
pub fn token_ids(n: usize, seed: u64, id_range: Range<u32>) -> Result<Vec<u32>, TokenIdError> {
    if id_range.is_empty() {
        return Err(TokenIdError::EmptyRange {
            start: id_range.start,
            end: id_range.end,
        });
    }
    let span = (id_range.end - id_range.start) as usize;
    let mut rng = Rng(seed ^ 0x7F4A_7C15_9E37_79B9);
    Ok((0..n)
        .map(|_| id_range.start + rng.below(span) as u32)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn token_ids_are_deterministic_and_in_range() {
        let a = token_ids(10_000, 1, 100..50_000).unwrap();
        assert_eq!(a, token_ids(10_000, 1, 100..50_000).unwrap());
        assert!(a.iter().all(|&t| (100..50_000).contains(&t)));
        let b = token_ids(10_000, 2, 100..50_000).unwrap();
        assert_ne!(a[..4], b[..4]);
        let mut freq: HashMap<u32, u32> = HashMap::new();
        for t in &a {
            *freq.entry(*t).or_default() += 1;
        }
        assert!(freq.len() > 8_000, "spread: {}", freq.len());
        assert_eq!(
            token_ids(1, 1, 5..5),
            Err(TokenIdError::EmptyRange { start: 5, end: 5 })
        );
    }
}
