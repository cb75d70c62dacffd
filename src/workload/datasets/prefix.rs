//! `prefix_repetition` (vLLM's) and SGLang's `generated-shared-prefix`: groups of prompts that
//! share a prefix of token ids, SGLang's lengths, group choice and shuffle drawn as SGLang's
//! (numpy's legacy generator, then Python's `random`).

use super::random::{random_ids, sglang_lens, sglang_range};
use super::{DatasetConfig, DatasetError, DatasetKind, PrefixGroups, PromptSource, Sample};
use crate::workload::numpy::{self, Generator, RandomState};
use crate::workload::pyrandom::PyRandom;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// The `prefix_repetition` dataset: `num_prefixes` shared prefixes, each followed by unique
/// suffixes, shuffled.
pub fn prefix_repetition(cfg: &DatasetConfig) -> Result<Vec<Sample>, DatasetError> {
    let n_pre = cfg.prefix_repetition_num_prefixes as usize;
    if n_pre == 0 {
        return Err(DatasetError::Invalid(
            "--prefix-repetition-num-prefixes must be at least 1".into(),
        ));
    }
    if let Some(g) = cfg.prefix_groups {
        return prefix_groups(cfg, g);
    }
    if cfg.num_prompts < n_pre {
        // vLLM's rule too: fewer prompts than prefixes would leave every prefix empty.
        return Err(DatasetError::Invalid(format!(
            "--num-prompts ({}) must be at least --prefix-repetition-num-prefixes ({n_pre})",
            cfg.num_prompts
        )));
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let per = cfg.num_prompts / n_pre;
    let mut out = Vec::with_capacity(cfg.num_prompts);
    let suffix = cfg.prefix_repetition_suffix_len;
    for group in 0..n_pre {
        let prefix: Arc<[u32]> =
            random_ids(&mut rng, cfg.prefix_repetition_prefix_len as usize, cfg.ids).into();
        for _ in 0..per {
            out.push(Sample {
                group: Some(group as u32),
                prompt: PromptSource::Synthetic {
                    prefix: prefix.clone(),
                    start: rng.gen_range(0..cfg.ids.span),
                    len: suffix,
                    ids: cfg.ids,
                },
                prompt_len: prefix.len() as u64 + suffix as u64,
                output_len: cfg.prefix_repetition_output_len,
            });
        }
    }
    // vLLM 0.33 (and SGLang's generated-shared-prefix of equal groups) shuffle with Python's
    // `random` seeded by --seed and send prompts per prefix x prefixes, never oversampled.
    if cfg.shuffle {
        PyRandom::new(cfg.seed).shuffle(&mut out);
    }
    Ok(out)
}

/// SGLang 0.5.23's `generated-shared-prefix`, drawn as SGLang draws it: from numpy's legacy
/// generator seeded with --seed, every group's prefix length, then every prompt's question
/// length for each turn, then every prompt's output length (`[max(int(L*r), 1), L]`, a length of
/// 0 no draw); `groups x prompts per group` slots, slot `i` taking the question and output
/// lengths of prompt `(i / per, i % per)` and the prefix of its group (the slot's own under
/// uniform; under zipf a draw of numpy's `default_rng(seed)`, as SGLang's); then, unless
/// ordered, shuffled by Python's `random` seeded with --seed after the two words of each
/// `random.random()` SGLang's prompt text took (one per token of every prefix and question).
/// Never oversampled. The prompt ids are llmspeed's.
fn prefix_groups(cfg: &DatasetConfig, g: PrefixGroups) -> Result<Vec<Sample>, DatasetError> {
    let d = gsp_lengths(cfg, g)?;
    let groups = cfg.prefix_repetition_num_prefixes as usize;
    let per = cfg.num_prompts / groups;
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let prefixes: Vec<Arc<[u32]>> = d
        .prefix
        .iter()
        .map(|n| random_ids(&mut rng, *n as usize, cfg.ids).into())
        .collect();
    let assignment: Vec<usize> = match g.zipf_alpha {
        None => (0..groups * per).map(|slot| slot / per.max(1)).collect(),
        // SGLang's own generator for it (`default_rng(seed)`): the prompts stay those of the
        // uniform draw.
        Some(alpha) => {
            Generator::new(cfg.seed).choice_weighted(&zipf_probs(groups, alpha)?, groups * per)
        }
    };
    let turns = g.turns.max(1) as usize;
    let mut out = Vec::with_capacity(assignment.len());
    for (slot, group) in assignment.into_iter().enumerate() {
        let prefix = prefixes[group].clone();
        // SGLang: the slot's question and output are those of its place in uniform order.
        let len = d.question[slot * turns];
        out.push(Sample {
            group: Some(group as u32),
            prompt_len: prefix.len() as u64 + len as u64,
            prompt: PromptSource::Synthetic {
                prefix,
                start: rng.gen_range(0..cfg.ids.span),
                len,
                ids: cfg.ids,
            },
            output_len: d.output[slot],
        });
    }
    gsp_shuffle(cfg, &d, &mut out);
    Ok(out)
}

/// SGLang's shuffle of the generated-shared-prefix prompts (unless ordered): Python's `random`
/// seeded with --seed, after what the prompts' texts drew from it.
fn gsp_shuffle<T>(cfg: &DatasetConfig, d: &GspLengths, x: &mut [T]) {
    if cfg.shuffle {
        let mut py = PyRandom::new(cfg.seed);
        py.skip_words(d.python_words);
        py.shuffle(x);
    }
}

/// SGLang's generated-shared-prefix with `--gsp-num-turns` above 1: each prompt's later turns'
/// question lengths (turn 2 on), drawn with the first's, in the order [`prefix_repetition`]
/// gives its prompts. `None` for any other dataset, or one turn.
pub fn later_turn_lens(cfg: &DatasetConfig) -> Option<Vec<Vec<u32>>> {
    let g = cfg.prefix_groups.filter(|g| g.turns > 1)?;
    if cfg.kind != DatasetKind::PrefixRepetition || cfg.prefix_repetition_num_prefixes == 0 {
        return None;
    }
    let d = gsp_lengths(cfg, g).ok()?;
    let turns = g.turns as usize;
    let mut slots: Vec<usize> = (0..d.output.len()).collect();
    gsp_shuffle(cfg, &d, &mut slots);
    Some(
        slots
            .into_iter()
            .map(|slot| d.question[slot * turns + 1..(slot + 1) * turns].to_vec())
            .collect(),
    )
}

/// SGLang's generated-shared-prefix lengths, and what drawing them and their texts took from
/// numpy's legacy generator and Python's `random`.
struct GspLengths {
    prefix: Vec<u32>,
    /// Prompt-major, then turn.
    question: Vec<u32>,
    output: Vec<u32>,
    numpy_words: u64,
    python_words: u64,
}

fn gsp_lengths(cfg: &DatasetConfig, g: PrefixGroups) -> Result<GspLengths, DatasetError> {
    let groups = cfg.prefix_repetition_num_prefixes as usize;
    let prompts = groups * (cfg.num_prompts / groups);
    let mut np = RandomState::from_seed(cfg.seed).map_err(DatasetError::Invalid)?;
    let mut lens = |l: u32, n: usize| sglang_lens(&mut np, sglang_range(l, g.range_ratio), n);
    let prefix = lens(cfg.prefix_repetition_prefix_len, groups);
    let question = lens(
        cfg.prefix_repetition_suffix_len,
        prompts * g.turns.max(1) as usize,
    );
    let output = lens(cfg.prefix_repetition_output_len, prompts);
    let tokens: u64 = prefix.iter().chain(&question).map(|&l| l as u64).sum();
    Ok(GspLengths {
        prefix,
        question,
        output,
        numpy_words: np.words(),
        python_words: 2 * tokens,
    })
}

/// How many 32-bit words SGLang's generated-shared-prefix takes from numpy's legacy generator
/// for `cfg` (0 where the settings are refused).
pub(super) fn numpy_words(cfg: &DatasetConfig, g: PrefixGroups) -> u64 {
    gsp_lengths(cfg, g).map_or(0, |d| d.numpy_words)
}

/// Zipf probabilities by rank, as SGLang computes them with numpy: `1 / rank^alpha` for ranks
/// 1..=n, each over their (pairwise) sum.
fn zipf_probs(n: usize, alpha: f64) -> Result<Vec<f64>, DatasetError> {
    let weights: Vec<f64> = (1..=n)
        .map(|rank| 1.0 / (rank as f64).powf(alpha))
        .collect();
    let total = numpy::sum(&weights);
    if !(total.is_finite() && total > 0.0) {
        return Err(DatasetError::Invalid(format!(
            "--gsp-zipf-alpha {alpha}: the groups' weights do not sum to a positive number"
        )));
    }
    Ok(weights.iter().map(|w| w / total).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::datasets::*;

    #[test]
    fn prefix_repetition_shares_prefixes() {
        let cfg = DatasetConfig {
            kind: DatasetKind::PrefixRepetition,
            num_prompts: 40,
            prefix_repetition_prefix_len: 16,
            prefix_repetition_suffix_len: 8,
            prefix_repetition_num_prefixes: 4,
            ..Default::default()
        };
        let s = prefix_repetition(&cfg).unwrap();
        assert_eq!(s.len(), 40);
        let mut prefixes = std::collections::BTreeSet::new();
        let mut ids = Vec::new();
        for x in &s {
            ids.clear();
            x.write_ids(&mut ids);
            assert_eq!(ids.len(), 24);
            prefixes.insert(ids[..16].to_vec());
        }
        assert_eq!(prefixes.len(), 4);
    }

    /// SGLang's generated-shared-prefix: each sample's prefix (its group's) and suffix length.
    fn groups_of(s: &[Sample]) -> Vec<(Arc<[u32]>, u32)> {
        s.iter()
            .map(|x| match &x.prompt {
                PromptSource::Synthetic { prefix, len, .. } => (prefix.clone(), *len),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn gsp(ratio: f64, zipf: Option<f64>, groups: u32, per: usize) -> DatasetConfig {
        DatasetConfig {
            kind: DatasetKind::PrefixRepetition,
            num_prompts: groups as usize * per,
            seed: 42,
            prefix_repetition_prefix_len: 40,
            prefix_repetition_suffix_len: 10,
            prefix_repetition_num_prefixes: groups,
            prefix_repetition_output_len: 20,
            prefix_groups: Some(PrefixGroups {
                range_ratio: ratio,
                zipf_alpha: zipf,
                turns: 1,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn shared_prefix_lengths_come_from_sglangs_range() {
        // r = 0.5: prefixes in [20, 40] per group, suffixes in [5, 10] and outputs in [10, 20]
        // per prompt; uniform groups keep 25 prompts each.
        let s = prefix_repetition(&gsp(0.5, None, 4, 25)).unwrap();
        assert_eq!(s.len(), 100);
        let g = groups_of(&s);
        let mut per_group: Vec<(Arc<[u32]>, usize)> = Vec::new();
        for (prefix, len) in &g {
            assert!((20..=40).contains(&prefix.len()), "{}", prefix.len());
            assert!((5..=10).contains(len), "{len}");
            match per_group.iter_mut().find(|(p, _)| Arc::ptr_eq(p, prefix)) {
                Some((_, n)) => *n += 1,
                None => per_group.push((prefix.clone(), 1)),
            }
        }
        assert_eq!(per_group.len(), 4);
        assert!(per_group.iter().all(|(_, n)| *n == 25), "{per_group:?}");
        assert!(s.iter().all(|x| (10..=20).contains(&x.output_len)));
        for (x, (prefix, len)) in s.iter().zip(&g) {
            assert_eq!(x.prompt_len, prefix.len() as u64 + *len as u64);
        }
        // Drawn, not fixed: several lengths of each kind occur.
        let lens: std::collections::BTreeSet<u32> = g.iter().map(|(_, l)| *l).collect();
        assert!(lens.len() >= 3, "{lens:?}");
        // Ratio 0 draws from [1, L]; a length of 0 stays 0.
        let mut z = gsp(0.0, None, 2, 50);
        z.prefix_repetition_output_len = 0;
        let s = prefix_repetition(&z).unwrap();
        assert!(s.iter().all(|x| x.output_len == 0));
        assert!(groups_of(&s).iter().all(|(_, l)| (1..=10).contains(l)));
    }

    #[test]
    fn later_turn_lengths_go_with_their_prompts_through_the_shuffle() {
        let cfg = |shuffle| DatasetConfig {
            shuffle,
            prefix_groups: Some(PrefixGroups {
                turns: 3,
                ..gsp(0.2, None, 3, 5).prefix_groups.unwrap()
            }),
            ..gsp(0.2, None, 3, 5)
        };
        // Each prompt as (first question's length, output length, later questions' lengths).
        let rows = |c: &DatasetConfig| -> Vec<(u32, u32, Vec<u32>)> {
            let later = later_turn_lens(c).unwrap();
            prefix_repetition(c)
                .unwrap()
                .into_iter()
                .zip(later)
                .map(|(s, l)| match s.prompt {
                    PromptSource::Synthetic { len, .. } => (len, s.output_len, l),
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let (ordered, mut shuffled) = (rows(&cfg(false)), rows(&cfg(true)));
        // In order, prompt k's questions are draws 3k, 3k + 1 and 3k + 2 of SGLang's.
        let d = gsp_lengths(&cfg(false), cfg(false).prefix_groups.unwrap()).unwrap();
        for (k, (first, _, later)) in ordered.iter().enumerate() {
            assert_eq!(*first, d.question[3 * k]);
            assert_eq!(*later, d.question[3 * k + 1..3 * k + 3]);
        }
        // Shuffled, each prompt keeps its own: the same rows in another order.
        assert_ne!(shuffled, ordered);
        let mut sorted = ordered.clone();
        sorted.sort();
        shuffled.sort();
        assert_eq!(shuffled, sorted);
        // One turn, or another dataset: none.
        assert_eq!(later_turn_lens(&gsp(0.2, None, 3, 5)), None);
        let random = DatasetConfig {
            kind: DatasetKind::Random,
            ..cfg(true)
        };
        assert_eq!(later_turn_lens(&random), None);
    }

    #[test]
    fn zipf_groups_take_their_rank_share_of_the_same_prompts() {
        // alpha 1.5 over 4 groups: p(rank k) = k^-1.5 / (1 + 0.35355 + 0.19245 + 0.125) =
        // 0.5984, 0.2116, 0.1152, 0.0748. 4000 prompts: each share within 0.03 (4 sigma of
        // the hottest group's binomial spread), the hottest group first.
        let s = prefix_repetition(&gsp(1.0, Some(1.5), 4, 1000)).unwrap();
        let uniform = prefix_repetition(&gsp(1.0, None, 4, 1000)).unwrap();
        let (g, u) = (groups_of(&s), groups_of(&uniform));
        // The group prompts are the uniform draw's: the same four prefixes.
        let mut zipf_prefixes: Vec<Vec<u32>> = g.iter().map(|(p, _)| p.to_vec()).collect();
        let mut uniform_prefixes: Vec<Vec<u32>> = u.iter().map(|(p, _)| p.to_vec()).collect();
        for v in [&mut zipf_prefixes, &mut uniform_prefixes] {
            v.sort();
            v.dedup();
        }
        assert_eq!(zipf_prefixes, uniform_prefixes);
        let want = [0.5984, 0.2116, 0.1152, 0.0748];
        let ordered = prefix_repetition(&DatasetConfig {
            shuffle: false,
            ..gsp(1.0, None, 4, 1)
        })
        .unwrap();
        for (rank, prefix) in groups_of(&ordered).iter().map(|(p, _)| p).enumerate() {
            let n = g.iter().filter(|(p, _)| **p == **prefix).count();
            let share = n as f64 / 4000.0;
            assert!(
                (share - want[rank]).abs() < 0.03,
                "rank {}: {share} (want {})",
                rank + 1,
                want[rank]
            );
        }
    }
}
