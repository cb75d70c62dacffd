//! Request traces: vLLM's `timed_trace` dataset, which reads Mooncake-style JSONL (one request
//! a line: `timestamp`, `input_length`, `output_length`, `hash_ids`).
//!
//! Owns parsing a trace into rows, turning rows into token-id [`Sample`]s whose prompts
//! reproduce the trace's prefix sharing, and the rows' send offsets for `--self-timed`. It must
//! never do IO beyond reading the file it is given, or read a clock.
//!
//! Each entry of `hash_ids` names one block of `--timed-trace-chunk-hash-size` prompt tokens
//! (Mooncake uses 512; vLLM's default is 16). A block's tokens are a pure function of its hash
//! id, so two requests whose `hash_ids` start alike send the same leading tokens and a server's
//! prefix cache sees exactly the sharing the trace recorded. Prompt tokens past the last block
//! are unique to the request (seeded by its line and `--seed`); a prompt shorter than its blocks
//! ends inside the last one, at the same tokens any longer use of that block starts with.
//!
//! The block tokens themselves are written by [`crate::workload::sample`] when a prompt is sent.

use crate::workload::sample::{DatasetError, IdRange, PromptSource, Sample};
use serde_json::Value;
use std::sync::Arc;

/// `--timed-trace-*`: the field names and units of a trace, with vLLM's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceConfig {
    /// Tokens per `hash_ids` entry.
    pub chunk_hash_size: u32,
    /// Multiplies each `timestamp` into seconds (Mooncake's are milliseconds: 0.001); below 1
    /// it also compresses the trace in time, above 1 it stretches it.
    pub sec_multiplier: f64,
    pub label_timestamp: String,
    pub label_input_length: String,
    pub label_output_length: String,
    pub label_hash_ids: String,
    /// Requests per row (SGLang's `--mooncake-num-rounds`, at least 1): a row is a session whose
    /// rounds are all sent at its time, round r (1-based) asking with the row's prompt r times,
    /// a placeholder answer of the row's output length between each two (SGLang's history of
    /// user turns and placeholder answers): each round's prompt starts with the one before it.
    pub rounds: u32,
}

impl Default for TraceConfig {
    fn default() -> Self {
        Self {
            chunk_hash_size: 16,
            sec_multiplier: 1.0,
            label_timestamp: "timestamp".into(),
            label_input_length: "input_length".into(),
            label_output_length: "output_length".into(),
            label_hash_ids: "hash_ids".into(),
            rounds: 1,
        }
    }
}

/// One request of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRow {
    /// 1-based line in the file (names the row in errors and seeds its unshared tail).
    pub line: usize,
    /// Send offset in seconds (the timestamp times `sec_multiplier`).
    pub offset_s: f64,
    pub input_len: u32,
    pub output_len: u32,
    pub hash_ids: Arc<[u64]>,
}

/// Reads the first `limit` requests of a JSONL trace (blank lines skipped).
pub fn read(
    path: &std::path::Path,
    cfg: &TraceConfig,
    limit: usize,
) -> Result<Vec<TraceRow>, DatasetError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| DatasetError::Read {
        path: name.clone(),
        err,
    })?;
    parse(&text, cfg, limit).map_err(|msg| DatasetError::Format { path: name, msg })
}

/// [`read`] on text already in memory.
pub fn parse(text: &str, cfg: &TraceConfig, limit: usize) -> Result<Vec<TraceRow>, String> {
    if cfg.chunk_hash_size == 0 {
        return Err("--timed-trace-chunk-hash-size must be at least 1".into());
    }
    if !(cfg.sec_multiplier.is_finite() && cfg.sec_multiplier >= 0.0) {
        return Err(format!(
            "--timed-trace-sec-multiplier must be a finite number >= 0, got {}",
            cfg.sec_multiplier
        ));
    }
    let mut rows = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if rows.len() == limit {
            break;
        }
        let l = l.trim();
        if l.is_empty() {
            continue;
        }
        let line = i + 1;
        let v: Value =
            serde_json::from_str(l).map_err(|e| format!("line {line}: not JSON: {e}"))?;
        let num = |label: &str| -> Result<&Value, String> {
            v.get(label)
                .ok_or_else(|| format!("line {line}: no field {label:?}"))
        };
        let count = |label: &str| -> Result<u32, String> {
            num(label)?
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("line {line}: {label:?} must be a whole number of tokens"))
        };
        let ts = num(&cfg.label_timestamp)?
            .as_f64()
            .filter(|t| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| {
                format!(
                    "line {line}: {:?} must be a number >= 0",
                    cfg.label_timestamp
                )
            })?;
        // Traces without prefix identity are still traces: no shared blocks.
        let hash_ids: Vec<u64> = match v.get(&cfg.label_hash_ids) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|h| {
                    h.as_u64().ok_or_else(|| {
                        format!(
                            "line {line}: {:?} must hold whole numbers >= 0",
                            cfg.label_hash_ids
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(format!(
                    "line {line}: {:?} must be an array",
                    cfg.label_hash_ids
                ))
            }
        };
        let input_len = count(&cfg.label_input_length)?;
        let output_len = count(&cfg.label_output_length)?;
        if input_len == 0 || output_len == 0 {
            return Err(format!(
                "line {line}: input and output lengths must be at least 1"
            ));
        }
        rows.push(TraceRow {
            line,
            offset_s: ts * cfg.sec_multiplier,
            input_len,
            output_len,
            hash_ids: hash_ids.into(),
        });
    }
    if rows.is_empty() {
        return Err("the trace holds no request".into());
    }
    Ok(rows)
}

/// Rows -> samples whose prompts are [`PromptSource::Blocks`]: `rounds` per row, in order
/// (see [`TraceConfig::rounds`]).
pub fn rows_to_samples(
    rows: &[TraceRow],
    block: u32,
    ids: IdRange,
    seed: u64,
    rounds: u32,
) -> Vec<Sample> {
    rows.iter()
        .flat_map(|r| {
            (1..=rounds).map(move |round| Sample {
                group: None,
                prompt: PromptSource::Blocks {
                    hash_ids: r.hash_ids.clone(),
                    block,
                    len: r.input_len,
                    tail_seed: seed ^ (r.line as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    ids,
                    rounds: round,
                    answer: r.output_len,
                },
                prompt_len: u64::from(round) * u64::from(r.input_len)
                    + u64::from(round - 1) * u64::from(r.output_len),
                output_len: r.output_len,
            })
        })
        .collect()
}

/// Send offsets for `--self-timed`, in nanoseconds from the start of the run, `rounds` per row
/// (a session's rounds all go at its time). As vLLM does, a row's timestamp is its offset (not
/// relative to the first row), and rows are sent in file order: a row stamped earlier than the
/// one before it goes as soon as its turn comes.
pub fn offsets_ns(rows: &[TraceRow], rounds: u32) -> Vec<u64> {
    rows.iter()
        .flat_map(|r| {
            let at = (r.offset_s * 1e9).round().min(u64::MAX as f64) as u64;
            std::iter::repeat_n(at, rounds as usize)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids_of(s: &Sample) -> Vec<u32> {
        let mut v = Vec::new();
        assert!(s.write_ids(&mut v));
        v
    }

    const TRACE: &str = r#"{"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [7, 8, 9]}

{"timestamp": 250, "input_length": 20, "output_length": 3, "hash_ids": [7, 8]}
{"timestamp": 500, "input_length": 36, "output_length": 4, "hash_ids": [7, 11, 12]}
{"timestamp": 1000, "input_length": 50, "output_length": 2, "hash_ids": [7, 8, 9]}
"#;

    fn cfg() -> TraceConfig {
        TraceConfig {
            chunk_hash_size: 16,
            sec_multiplier: 0.001,
            ..TraceConfig::default()
        }
    }

    #[test]
    fn rows_keep_lines_lengths_and_scaled_timestamps() {
        let rows = parse(TRACE, &cfg(), 100).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows.iter().map(|r| r.line).collect::<Vec<_>>(),
            [1, 3, 4, 5]
        );
        assert_eq!(
            offsets_ns(&rows, 1),
            [0, 250_000_000, 500_000_000, 1_000_000_000]
        );
        assert_eq!((rows[2].input_len, rows[2].output_len), (36, 4));
        assert_eq!(&*rows[2].hash_ids, &[7, 11, 12]);
        // The limit takes the first rows.
        assert_eq!(parse(TRACE, &cfg(), 2).unwrap().len(), 2);
    }

    #[test]
    fn shared_leading_hash_ids_share_exactly_their_leading_tokens() {
        let rows = parse(TRACE, &cfg(), 100).unwrap();
        let s = rows_to_samples(&rows, 16, IdRange::DEFAULT, 0, 1);
        let p: Vec<Vec<u32>> = s.iter().map(ids_of).collect();
        for (x, r) in p.iter().zip(&rows) {
            assert_eq!(x.len(), r.input_len as usize);
            assert!(x.iter().all(|&t| (1000..8000).contains(&t)));
        }
        let common = |a: &[u32], b: &[u32]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
        // [7,8,9] x 40 and [7,8] x 20: the second is the first's first 20 tokens.
        assert_eq!(p[1][..], p[0][..20]);
        // [7,11,12]: one block in common with [7,8,9], not a token more.
        assert_eq!(common(&p[0], &p[2]), 16);
        // Same blocks, longer prompt: 40 shared, then each its own tail.
        assert_eq!(common(&p[0], &p[3]), 40);
        // Past the blocks, each row has its own tail: equal lengths, no hash ids, different
        // prompts from the first token on.
        let t = parse(
            "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": []}\n\
             {\"timestamp\": 0, \"input_length\": 32, \"output_length\": 1}\n",
            &cfg(),
            10,
        )
        .unwrap();
        let q: Vec<Vec<u32>> = rows_to_samples(&t, 16, IdRange::DEFAULT, 0, 1)
            .iter()
            .map(ids_of)
            .collect();
        assert_eq!(common(&q[0], &q[1]), 0);
        assert_eq!(common(&p[3][48..], &q[0]), 0);
    }

    #[test]
    fn bad_rows_are_named_by_line() {
        let e = parse("{\"timestamp\": 1}\n", &cfg(), 10).unwrap_err();
        assert!(e.contains("line 1") && e.contains("input_length"), "{e}");
        let e = parse(
            "\n{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1}",
            &cfg(),
            10,
        )
        .unwrap_err();
        assert!(e.contains("line 2") && e.contains("timestamp"), "{e}");
        let e = parse(
            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [\"x\"]}",
            &cfg(),
            10,
        )
        .unwrap_err();
        assert!(e.contains("hash_ids"), "{e}");
        assert!(parse("", &cfg(), 10).is_err());
    }

    #[test]
    fn labels_rename_the_fields() {
        let c = TraceConfig {
            label_timestamp: "t".into(),
            label_input_length: "in".into(),
            label_output_length: "out".into(),
            label_hash_ids: "h".into(),
            ..cfg()
        };
        let rows = parse("{\"t\": 2000, \"in\": 3, \"out\": 4, \"h\": [5]}", &c, 10).unwrap();
        assert_eq!(offsets_ns(&rows, 1), [2_000_000_000]);
        assert_eq!((rows[0].input_len, rows[0].output_len), (3, 4));
    }

    #[test]
    fn rounds_are_sent_together_and_each_extends_the_one_before() {
        let rows = parse(TRACE, &cfg(), 2).unwrap();
        assert_eq!(
            offsets_ns(&rows, 3),
            [0, 0, 0, 250_000_000, 250_000_000, 250_000_000]
        );
        let s = rows_to_samples(&rows, 16, IdRange::DEFAULT, 0, 3);
        assert_eq!(s.len(), 6);
        let p: Vec<Vec<u32>> = s.iter().map(ids_of).collect();
        // Row 1 (40 prompt tokens, 5 output): round r is r prompts and r - 1 answers long.
        let one = &p[0];
        assert_eq!(one.len(), 40);
        for (k, want) in [(1, 40 + 5 + 40), (2, 40 + 5 + 40 + 5 + 40)] {
            assert_eq!(p[k].len(), want, "round {}", k + 1);
            assert_eq!(s[k].prompt_len, want as u64);
            assert_eq!(s[k].output_len, 5);
            // The round before is its beginning, then an answer, then the prompt again.
            assert_eq!(p[k][..p[k - 1].len()], p[k - 1][..]);
            assert_eq!(&p[k][want - 40..], &one[..]);
            let answer = &p[k][p[k - 1].len()..want - 40];
            assert_eq!(answer.len(), 5);
            assert!(answer.iter().all(|&t| t == answer[0]), "{answer:?}");
        }
        // One round per row is the row as it was: the first round of each.
        let single = rows_to_samples(&rows, 16, IdRange::DEFAULT, 0, 1);
        assert_eq!(single, [s[0].clone(), s[3].clone()]);
    }
}
