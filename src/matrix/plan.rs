//! The matrix plan: which prefill contexts and which (context × concurrency) decode cells a run
//! will measure, and which it will not run and why, before anything is sent.
//!
//! Owns list parsing (`8k,32k,max`, `1..128`), context resolution against `max_model_len`
//! (including the "largest that fits" column), the pre-run verdicts, a run-length estimate and
//! the console rendering of the plan. It is pure: it must never probe a server, read a clock or
//! print; the caller hands it the limits it found and prints what `render` returns.

use crate::matrix::status::{self, CellStatus, KvSource, ServerLimits};
use crate::report::format::group_digits;
use crate::report::{DecodeCell, PrefillRow};
use std::fmt::Write as _;

/// Default decode contexts besides "the largest that fits".
pub const DEFAULT_CONTEXTS: [u64; 5] = [8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10];
/// Default concurrency levels.
pub const DEFAULT_CONCURRENCY: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
/// Room left for the chat template and the server's own accounting when a context is trimmed to
/// fit (the peer tool uses 64; so do we, so the "largest that fits" columns agree).
pub const DEFAULT_MARGIN: u64 = 64;
/// A requested context larger than the model allows is trimmed to fit when that loses at most
/// this share of it; a bigger cut would measure a different context, so the row is Skipped.
pub const MAX_TRIM: f64 = 0.10;

/// A parse error naming the offending item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{list}: '{item}' is not a valid item: {reason}")]
    BadItem {
        list: &'static str,
        item: String,
        reason: &'static str,
    },
    #[error("{list}: the list is empty")]
    Empty { list: &'static str },
}

/// One item of a context list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextSpec {
    Tokens(u64),
    /// The largest context that fits the model (decode: `max_model_len - max_tokens - margin`;
    /// prefill: `max_model_len - 1`).
    Max,
}

/// Parse a context list such as `8k,32k,max`, `8K`, `131072`, `1m`, `1.5k`. `k` = 1024, `m` =
/// 1024².
pub fn parse_contexts(list_name: &'static str, s: &str) -> Result<Vec<ContextSpec>, PlanError> {
    let mut out = Vec::new();
    for raw in s.split(',') {
        let item = raw.trim();
        if item.is_empty() {
            if s.trim().is_empty() {
                return Err(PlanError::Empty { list: list_name });
            }
            return Err(bad(list_name, raw, "empty item (two commas in a row?)"));
        }
        if item.eq_ignore_ascii_case("max") {
            out.push(ContextSpec::Max);
            continue;
        }
        out.push(ContextSpec::Tokens(parse_size(list_name, item)?));
    }
    Ok(out)
}

fn bad(list: &'static str, item: &str, reason: &'static str) -> PlanError {
    PlanError::BadItem {
        list,
        item: item.trim().to_string(),
        reason,
    }
}

/// The largest decode context that fits the model (`max`): what `max_model_len` leaves after
/// the output and the margin (0: none).
pub fn decode_fit(max_model_len: u64, max_tokens: u64, margin: u64) -> u64 {
    max_model_len
        .saturating_sub(max_tokens)
        .saturating_sub(margin)
}

/// The most streams a cell may open.
pub const MAX_CONCURRENCY: u64 = 1 << 16;

/// The largest context a list may name.
pub const MAX_CONTEXT_TOKENS: u64 = 1 << 32;

fn parse_size(list: &'static str, item: &str) -> Result<u64, PlanError> {
    let (num, mult) = match item.as_bytes()[item.len() - 1] {
        b'k' | b'K' => (&item[..item.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&item[..item.len() - 1], 1u64 << 20),
        _ => (item, 1),
    };
    let num = num.replace('_', "");
    let value = if let Some((int, frac)) = num.split_once('.') {
        if mult == 1 {
            return Err(bad(list, item, "a fraction needs a k or m suffix"));
        }
        let whole: u64 = int
            .parse()
            .map_err(|_| bad(list, item, "expected a number like 8k, 131072 or 1m"))?;
        if frac.is_empty() || frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(list, item, "expected at most 3 decimals, like 1.5k"));
        }
        let scale = 10u64.pow(frac.len() as u32);
        let f: u64 = frac.parse().unwrap_or(0);
        whole
            .checked_mul(mult)
            .and_then(|w| w.checked_add(f * mult / scale))
            .ok_or_else(|| bad(list, item, "too large"))?
    } else {
        let n: u64 = num
            .parse()
            .map_err(|_| bad(list, item, "expected a number like 8k, 131072 or 1m"))?;
        n.checked_mul(mult)
            .ok_or_else(|| bad(list, item, "too large"))?
    };
    if value == 0 {
        return Err(bad(list, item, "must be at least 1 token"));
    }
    // Contexts become prompts held in memory: a mistyped `1000000m` must not become an
    // allocation of terabytes (and sums with max_tokens stay far from overflow).
    if value > MAX_CONTEXT_TOKENS {
        return Err(bad(list, item, "too large (at most 4096m tokens)"));
    }
    Ok(value)
}

/// Parse a concurrency list such as `1,2,4,8` or `1..128` (the powers of two in that range,
/// from the first bound doubling up to the last), or a mix: `1..16,24,32`. Sorted, deduplicated.
pub fn parse_concurrency(s: &str) -> Result<Vec<u64>, PlanError> {
    const LIST: &str = "--concurrency";
    if s.trim().is_empty() {
        return Err(PlanError::Empty { list: LIST });
    }
    let mut out = Vec::new();
    for raw in s.split(',') {
        let item = raw.trim();
        if item.is_empty() {
            return Err(bad(LIST, raw, "empty item (two commas in a row?)"));
        }
        let num = |t: &str| -> Result<u64, PlanError> {
            let n: u64 = t
                .trim()
                .parse()
                .map_err(|_| bad(LIST, item, "expected a whole number or a range like 1..128"))?;
            if n == 0 {
                return Err(bad(LIST, item, "must be at least 1"));
            }
            // A cell opens this many streams (and the run stores it as u32).
            if n > MAX_CONCURRENCY {
                return Err(bad(LIST, item, "too large (at most 65536 streams)"));
            }
            Ok(n)
        };
        if let Some((a, b)) = item.split_once("..") {
            let b = b.strip_prefix('=').unwrap_or(b);
            let (lo, hi) = (num(a)?, num(b)?);
            if lo > hi {
                return Err(bad(LIST, item, "the range runs backwards"));
            }
            let mut c = lo;
            while c <= hi {
                out.push(c);
                match c.checked_mul(2) {
                    Some(n) => c = n,
                    None => break,
                }
            }
        } else {
            out.push(num(item)?);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The short label of a context, as the seed writes it: the nearest whole kibitoken (`256K` for
/// the 262,143 tokens of a full 262,144 window), `M` for whole mebitokens, the plain number
/// below 10K when not a whole K. Contexts cut to fit the model use [`fitted_label`].
pub fn context_label(tokens: u64) -> String {
    k_label(tokens, (tokens + 512) >> 10)
}

/// The label of a context trimmed to what fits the model: whole kibitokens rounded down (`251K`
/// for the seed's 257,984 = 262,144 - 4,096 - 64), so the label never claims more room than
/// the model has.
pub fn fitted_label(tokens: u64) -> String {
    k_label(tokens, tokens >> 10)
}

fn k_label(tokens: u64, k: u64) -> String {
    if tokens % 1024 != 0 && tokens < 10 * 1024 {
        group_digits(tokens)
    } else if k >= 1024 && k % 1024 == 0 {
        format!("{}M", k >> 10)
    } else {
        format!("{k}K")
    }
}

/// A resolved context: the prompt size in tokens and its label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context {
    pub tokens: u64,
    pub label: String,
    /// The requested size when this one was trimmed to fit the model.
    pub trimmed_from: Option<u64>,
}

impl Context {
    fn new(tokens: u64) -> Self {
        Self {
            tokens,
            label: context_label(tokens),
            trimmed_from: None,
        }
    }

    /// A context cut to fit the model (`max`, or a trimmed request).
    fn fitted(tokens: u64, trimmed_from: Option<u64>) -> Self {
        Self {
            tokens,
            label: fitted_label(tokens),
            trimmed_from,
        }
    }
}

/// A prefill measurement to make (`status` None) or not (`Some(Skipped)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedPrefill {
    pub context: Context,
    pub status: Option<CellStatus>,
}

/// A decode cell and its pre-run verdict (`None` = run it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedCell {
    /// Index into [`Plan::contexts`].
    pub context: usize,
    pub concurrency: u64,
    pub status: Option<CellStatus>,
}

/// What the user asked for; `None` lists take the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanConfig {
    pub contexts: Option<Vec<ContextSpec>>,
    pub prefill_contexts: Option<Vec<ContextSpec>>,
    pub concurrency: Option<Vec<u64>>,
    pub max_tokens: u64,
    pub margin: u64,
    /// Prefill samples per context (median reported).
    pub prefill_samples: u32,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            contexts: None,
            prefill_contexts: None,
            concurrency: None,
            max_tokens: 4096,
            margin: DEFAULT_MARGIN,
            prefill_samples: 1,
        }
    }
}

/// Rough rates for [`Plan::estimate_seconds`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EstimateInputs {
    /// Prompt tokens per second for a cold prefill (a 256K prefill is slower per token; this is
    /// a rough figure).
    pub prefill_tok_per_s: f64,
    /// Seconds from starting a cell's streams to the readiness gate opening.
    pub warmup_s: f64,
    /// Seconds to wait for the server to drain after a cell.
    pub drain_s: f64,
}

impl Default for EstimateInputs {
    fn default() -> Self {
        Self {
            prefill_tok_per_s: 10_000.0,
            warmup_s: 5.0,
            drain_s: 2.0,
        }
    }
}

/// The full plan of a matrix run.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub limits: ServerLimits,
    pub max_tokens: u64,
    pub prefill_samples: u32,
    pub prefill: Vec<PlannedPrefill>,
    /// Decode rows, ascending; a row that does not fit the model has all cells Skipped.
    pub contexts: Vec<Context>,
    pub concurrency: Vec<u64>,
    /// Row-major: `cells[row * concurrency.len() + col]`.
    pub cells: Vec<PlannedCell>,
    /// Things the user should know (e.g. `max` left out because `max_model_len` is unknown).
    pub notes: Vec<String>,
}

impl Plan {
    pub fn new(config: &PlanConfig, limits: ServerLimits) -> Plan {
        let mut notes = Vec::new();
        let max_tokens = config.max_tokens;
        let default_decode: Vec<ContextSpec> = DEFAULT_CONTEXTS
            .iter()
            .map(|&t| ContextSpec::Tokens(t))
            .chain([ContextSpec::Max])
            .collect();
        let decode_specs = config.contexts.as_deref().unwrap_or(&default_decode);

        let decode_fit = limits
            .max_model_len
            .map(|m| decode_fit(m, max_tokens, config.margin));
        let mut contexts: Vec<Context> = Vec::new();
        for spec in decode_specs {
            match (*spec, limits.max_model_len, decode_fit) {
                (ContextSpec::Max, Some(_), Some(fit)) if fit > 0 => {
                    contexts.push(Context::fitted(fit, None))
                }
                (ContextSpec::Max, Some(m), _) => notes.push(format!(
                    "decode context 'max' left out: max_model_len {m} leaves no room for {max_tokens} output tokens"
                )),
                (ContextSpec::Max, None, _) => notes.push(
                    "decode context 'max' left out: max_model_len is unknown (pass --max-model-len)"
                        .to_string(),
                ),
                (ContextSpec::Tokens(t), Some(m), Some(fit))
                    if t.saturating_add(max_tokens) > m
                        && fit > 0
                        && fit as f64 >= t as f64 * (1.0 - MAX_TRIM) =>
                {
                    contexts.push(Context::fitted(fit, Some(t)))
                }
                (ContextSpec::Tokens(t), _, _) => contexts.push(Context::new(t)),
            }
        }
        contexts.sort_by_key(|c| c.tokens);
        contexts.dedup_by_key(|c| c.tokens);

        let concurrency = config
            .concurrency
            .clone()
            .unwrap_or_else(|| DEFAULT_CONCURRENCY.to_vec());
        let mut cells = Vec::with_capacity(contexts.len() * concurrency.len());
        for (row, ctx) in contexts.iter().enumerate() {
            for &c in &concurrency {
                cells.push(PlannedCell {
                    context: row,
                    concurrency: c,
                    status: status::pre_run(&limits, ctx.tokens, max_tokens, c),
                });
            }
        }

        // Prefill needs room for one output token only.
        let prefill_fits = |t: u64| limits.max_model_len.is_none_or(|m| t < m);
        let mut prefill: Vec<Context> = Vec::new();
        match &config.prefill_contexts {
            Some(specs) => {
                for spec in specs {
                    match (*spec, limits.max_model_len) {
                        (ContextSpec::Tokens(t), _) => prefill.push(Context::new(t)),
                        (ContextSpec::Max, Some(m)) if m > 1 => prefill.push(prefill_max(m)),
                        (ContextSpec::Max, _) => notes.push(
                            "prefill context 'max' left out: max_model_len is unknown (pass --max-model-len)"
                                .to_string(),
                        ),
                    }
                }
            }
            None => {
                prefill.extend(
                    contexts
                        .iter()
                        .filter(|c| {
                            prefill_fits(c.tokens)
                                && c.tokens.saturating_add(max_tokens)
                                    <= limits.max_model_len.unwrap_or(u64::MAX)
                        })
                        .cloned(),
                );
                if let Some(m) = limits.max_model_len.filter(|&m| m > 1) {
                    prefill.push(prefill_max(m));
                }
            }
        }
        prefill.sort_by_key(|c| c.tokens);
        prefill.dedup_by_key(|c| c.tokens);
        let prefill = prefill
            .into_iter()
            .map(|context| PlannedPrefill {
                status: (!prefill_fits(context.tokens)).then_some(CellStatus::Skipped),
                context,
            })
            .collect();

        if limits.kv_tokens.is_none() {
            notes.push(
                "KV-cache capacity unknown: no cell is marked Over capacity (pass --kv-budget)"
                    .to_string(),
            );
        }
        Plan {
            limits,
            max_tokens,
            prefill_samples: config.prefill_samples.max(1),
            prefill,
            contexts,
            concurrency,
            cells,
            notes,
        }
    }

    /// The cell at (row, column).
    pub fn cell(&self, row: usize, col: usize) -> &PlannedCell {
        &self.cells[row * self.concurrency.len() + col]
    }

    /// Decode cells that will run.
    pub fn runnable_cells(&self) -> impl Iterator<Item = &PlannedCell> {
        self.cells.iter().filter(|c| c.status.is_none())
    }

    /// Prefill measurements that will run.
    pub fn runnable_prefill(&self) -> impl Iterator<Item = &PlannedPrefill> {
        self.prefill.iter().filter(|p| p.status.is_none())
    }

    /// A rough length of the run in seconds: every prefill sample at `prefill_tok_per_s`, every
    /// runnable cell for warm-up + `duration_s` + drain.
    pub fn estimate_seconds(&self, duration_s: f64, inputs: &EstimateInputs) -> f64 {
        let prefill_tokens: u64 = self.runnable_prefill().map(|p| p.context.tokens).sum();
        let prefill_s = if inputs.prefill_tok_per_s > 0.0 {
            prefill_tokens as f64 * self.prefill_samples as f64 / inputs.prefill_tok_per_s
        } else {
            0.0
        };
        let cells = self.runnable_cells().count() as f64;
        prefill_s + cells * (inputs.warmup_s + duration_s + inputs.drain_s)
    }

    /// The plan as a few console lines: limits, prefill contexts, a grid of what will run.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let runnable = self.runnable_cells().count();
        let over = self
            .cells
            .iter()
            .filter(|c| matches!(c.status, Some(CellStatus::OverCapacity(_))))
            .count();
        let skipped = self
            .cells
            .iter()
            .filter(|c| c.status == Some(CellStatus::Skipped))
            .count();
        let _ = writeln!(
            s,
            "Plan: {} decode contexts × {} concurrency levels, max_tokens {}",
            self.contexts.len(),
            self.concurrency.len(),
            group_digits(self.max_tokens)
        );
        let kv = match self.limits.kv_tokens {
            Some((kv, src)) => format!("{} tokens ({})", group_digits(kv), KvSource::describe(src)),
            None => "unknown".to_string(),
        };
        let mml = self
            .limits
            .max_model_len
            .map_or("unknown".to_string(), group_digits);
        let running = self
            .limits
            .max_running
            .map_or("unknown".to_string(), group_digits);
        let _ = writeln!(
            s,
            "Server: max_model_len {mml} · KV capacity {kv} · running limit {running}"
        );
        let prefill: Vec<&str> = self
            .runnable_prefill()
            .map(|p| p.context.label.as_str())
            .collect();
        let _ = writeln!(
            s,
            "Prefill at: {}{}",
            if prefill.is_empty() {
                "none".to_string()
            } else {
                prefill.join(", ")
            },
            if self.prefill_samples > 1 {
                format!(" ({} samples each)", self.prefill_samples)
            } else {
                String::new()
            }
        );
        let w = self
            .contexts
            .iter()
            .map(|c| c.label.len())
            .max()
            .unwrap_or(0)
            .max("Context".len());
        let _ = write!(s, "{:<w$}", "Context");
        for c in &self.concurrency {
            let _ = write!(s, " {c:>4}");
        }
        s.push('\n');
        for (row, ctx) in self.contexts.iter().enumerate() {
            let _ = write!(s, "{:<w$}", ctx.label);
            for col in 0..self.concurrency.len() {
                let mark = match self.cell(row, col).status {
                    None => "run",
                    Some(CellStatus::Skipped) => "skip",
                    Some(_) => "over",
                };
                let _ = write!(s, " {mark:>4}");
            }
            if let Some(from) = ctx.trimmed_from {
                let _ = write!(s, "  (trimmed from {})", context_label(from));
            }
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "{runnable} cells to run, {over} over capacity, {skipped} skipped (do not fit max_model_len)"
        );
        for n in &self.notes {
            let _ = writeln!(s, "Note: {n}");
        }
        s
    }
}

fn prefill_max(max_model_len: u64) -> Context {
    // Nearest-K labelling gives the window it fills (`256K` for 262,143 tokens), as the seed.
    Context::new(max_model_len - 1)
}

/// The rows of a report for `plan` before anything ran: cells the plan will not run carry their
/// verdict (Over capacity, Skipped), the rest are Pending, to be replaced as they finish. A
/// report written from this is already valid, which is what makes partial reports possible.
pub fn rows_from_plan(plan: &Plan) -> (Vec<PrefillRow>, Vec<DecodeCell>) {
    let prefill = plan
        .prefill
        .iter()
        .map(|p| PrefillRow {
            context: p.context.tokens,
            context_label: p.context.label.clone(),
            status: p.status.clone().unwrap_or(CellStatus::Pending),
            prompt_tokens: None,
            ttft_ms: None,
            prefill_tok_per_s: None,
            samples: 0,
            ttft_ms_samples: Vec::new(),
            server_prompt_tokens: None,
            image_tokens: None,
            error_messages: Vec::new(),
            measured_under: None,
        })
        .collect();
    let decode = plan
        .cells
        .iter()
        .map(|c| {
            let ctx = &plan.contexts[c.context];
            DecodeCell::empty(
                ctx.tokens,
                &ctx.label,
                c.concurrency,
                c.status.clone().unwrap_or(CellStatus::Pending),
            )
        })
        .collect();
    (prefill, decode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::status::CapacityReason;

    fn seed_limits(kv: u64) -> ServerLimits {
        ServerLimits {
            max_model_len: Some(262_144),
            kv_tokens: Some((kv, KvSource::KvCacheSizeTokens)),
            max_running: None,
        }
    }

    /// The seed report's decode grid: `o` = Over capacity, `.` = run.
    const SEED_GRID: [&str; 6] = [
        "........", // 8K
        ".......o", // 16K
        "......oo", // 32K
        ".....ooo", // 64K
        "....oooo", // 128K
        "...ooooo", // 251K
    ];

    fn pattern(plan: &Plan) -> Vec<String> {
        (0..plan.contexts.len())
            .map(|r| {
                (0..plan.concurrency.len())
                    .map(|c| match plan.cell(r, c).status {
                        None => '.',
                        Some(CellStatus::OverCapacity(_)) => 'o',
                        Some(CellStatus::Skipped) => 's',
                        Some(_) => '?',
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn seed_columns_and_prefill_rows() {
        let plan = Plan::new(&PlanConfig::default(), seed_limits(1_600_000));
        let labels: Vec<&str> = plan.contexts.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["8K", "16K", "32K", "64K", "128K", "251K"]);
        assert_eq!(plan.contexts[5].tokens, 262_144 - 4096 - 64);
        let prefill: Vec<(&str, u64)> = plan
            .prefill
            .iter()
            .map(|p| (p.context.label.as_str(), p.context.tokens))
            .collect();
        assert_eq!(
            prefill,
            [
                ("8K", 8192),
                ("16K", 16384),
                ("32K", 32768),
                ("64K", 65536),
                ("128K", 131072),
                ("251K", 257_984),
                ("256K", 262_143)
            ]
        );
        assert!(plan.prefill.iter().all(|p| p.status.is_none()));
    }

    /// The seed's Over-capacity pattern holds for exactly KV ∈ [1,572,864, 2,096,639]: the
    /// lower bound is 128 × (8K + 4096) (8K ran at 128), the upper is 8 × (251K + 4096) - 1
    /// (251K was over capacity at 8).
    #[test]
    fn seed_over_capacity_pattern() {
        for kv in [1_572_864, 1_800_000, 2_096_639] {
            let plan = Plan::new(&PlanConfig::default(), seed_limits(kv));
            assert_eq!(pattern(&plan), SEED_GRID, "kv {kv}");
        }
        for kv in [1_572_863, 2_096_640, 1_100_000] {
            let plan = Plan::new(&PlanConfig::default(), seed_limits(kv));
            assert_ne!(pattern(&plan), SEED_GRID, "kv {kv}");
        }
        let plan = Plan::new(&PlanConfig::default(), seed_limits(1_572_864));
        assert_eq!(
            plan.cell(5, 3).status,
            Some(CellStatus::OverCapacity(CapacityReason::KvCache {
                needed_tokens: 8 * 262_080,
                kv_tokens: 1_572_864
            }))
        );
    }

    #[test]
    fn contexts_beyond_the_model_are_trimmed_or_skipped() {
        let limits = ServerLimits {
            max_model_len: Some(32_768),
            ..Default::default()
        };
        let plan = Plan::new(&PlanConfig::default(), limits);
        let rows: Vec<(&str, u64)> = plan
            .contexts
            .iter()
            .map(|c| (c.label.as_str(), c.tokens))
            .collect();
        // 32K would lose 13% to fit: Skipped; the largest that fits is its own row.
        assert_eq!(
            rows,
            [
                ("8K", 8192),
                ("16K", 16384),
                ("27K", 28_608),
                ("32K", 32768),
                ("64K", 65536),
                ("128K", 131072)
            ]
        );
        assert_eq!(pattern(&plan)[2], "........");
        assert_eq!(pattern(&plan)[3], "ssssssss");
        // Prefill-only may go to max_model_len - 1; skipped decode rows are not prefilled.
        let prefill: Vec<&str> = plan
            .prefill
            .iter()
            .map(|p| p.context.label.as_str())
            .collect();
        assert_eq!(prefill, ["8K", "16K", "27K", "32K"]);
        assert_eq!(plan.prefill[3].context.tokens, 32_767);

        // 128K on a 131,072 model loses 3%: trimmed.
        let limits = ServerLimits {
            max_model_len: Some(131_072),
            ..Default::default()
        };
        let cfg = PlanConfig {
            contexts: Some(vec![ContextSpec::Tokens(131_072)]),
            ..Default::default()
        };
        let plan = Plan::new(&cfg, limits);
        assert_eq!(plan.contexts.len(), 1);
        assert_eq!(plan.contexts[0].tokens, 126_912);
        assert_eq!(plan.contexts[0].trimmed_from, Some(131_072));
        assert!(plan.render().contains("(trimmed from 128K)"));
    }

    #[test]
    fn explicit_prefill_list_marks_what_does_not_fit() {
        let cfg = PlanConfig {
            prefill_contexts: Some(parse_contexts("--prefill-contexts", "8k,1m,max").unwrap()),
            ..Default::default()
        };
        let plan = Plan::new(&cfg, seed_limits(2_000_000));
        let got: Vec<(&str, bool)> = plan
            .prefill
            .iter()
            .map(|p| (p.context.label.as_str(), p.status.is_none()))
            .collect();
        assert_eq!(got, [("8K", true), ("256K", true), ("1M", false)]);
    }

    #[test]
    fn unknown_limits_leave_max_out_with_a_note() {
        let plan = Plan::new(&PlanConfig::default(), ServerLimits::default());
        assert_eq!(plan.contexts.len(), 5);
        assert_eq!(plan.runnable_cells().count(), 40);
        assert!(plan
            .notes
            .iter()
            .any(|n| n.contains("max_model_len is unknown")));
        assert!(plan.notes.iter().any(|n| n.contains("--kv-budget")));
    }

    #[test]
    fn list_parsing() {
        use ContextSpec::*;
        assert_eq!(
            parse_contexts("--contexts", "8k, 32K ,max,131072,1m,1.5k").unwrap(),
            [
                Tokens(8192),
                Tokens(32768),
                Max,
                Tokens(131_072),
                Tokens(1 << 20),
                Tokens(1536)
            ]
        );
        assert_eq!(
            parse_concurrency("1..128").unwrap(),
            [1, 2, 4, 8, 16, 32, 64, 128]
        );
        assert_eq!(parse_concurrency("3..16,5, 1").unwrap(), [1, 3, 5, 6, 12]);
        assert_eq!(parse_concurrency("1..=4").unwrap(), [1, 2, 4]);
    }

    #[test]
    fn list_errors_name_the_item() {
        let e = parse_contexts("--contexts", "8k,32q").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--contexts: '32q' is not a valid item: expected a number like 8k, 131072 or 1m"
        );
        for (s, item) in [("8k,,16k", ""), ("0", "0"), ("1.5", "1.5"), ("k", "k")] {
            match parse_contexts("--contexts", s) {
                Err(PlanError::BadItem { item: got, .. }) => assert_eq!(got, item, "{s}"),
                other => panic!("{s}: {other:?}"),
            }
        }
        assert_eq!(
            parse_contexts("--contexts", " ").unwrap_err(),
            PlanError::Empty { list: "--contexts" }
        );
        assert_eq!(
            parse_concurrency("1,two").unwrap_err().to_string(),
            "--concurrency: 'two' is not a valid item: expected a whole number or a range like 1..128"
        );
        assert!(matches!(
            parse_concurrency("8..2"),
            Err(PlanError::BadItem {
                reason: "the range runs backwards",
                ..
            })
        ));
        assert!(parse_concurrency("0").is_err());
        assert!(parse_contexts("--contexts", "99999999999999999999k").is_err());
    }

    #[test]
    fn absurd_sizes_are_refused_with_a_reason() {
        // A 1e18-token context used to be planned (and its prompt built); with no
        // max_model_len, `tokens + max_tokens` then overflowed while planning prefill rows.
        for s in ["18446744073709551615", "4097m", "4294967297"] {
            let e = parse_contexts("--contexts", s).unwrap_err().to_string();
            assert!(e.contains("too large"), "{s}: {e}");
        }
        assert_eq!(
            parse_contexts("--contexts", "4096m").unwrap(),
            [ContextSpec::Tokens(MAX_CONTEXT_TOKENS)]
        );
        // 4294967296 streams used to become `0` when stored as u32.
        for s in ["4294967296", "1..4294967296", "65537"] {
            let e = parse_concurrency(s).unwrap_err().to_string();
            assert!(e.contains("too large"), "{s}: {e}");
        }
        // Planning with a huge max_tokens and no known limits must not overflow.
        let cfg = PlanConfig {
            contexts: Some(vec![ContextSpec::Tokens(MAX_CONTEXT_TOKENS)]),
            max_tokens: u64::MAX,
            ..Default::default()
        };
        let plan = Plan::new(&cfg, ServerLimits::default());
        assert_eq!(plan.contexts.len(), 1);
    }

    #[test]
    fn labels() {
        // Every label of the seed, from the token counts that produce them.
        for (tokens, label) in [
            (8192, "8K"),
            (16_384, "16K"),
            (32_768, "32K"),
            (65_536, "64K"),
            (131_072, "128K"),
            (262_143, "256K"),
            (262_144, "256K"),
        ] {
            assert_eq!(context_label(tokens), label, "{tokens}");
        }
        // The seed's 251K column: 262,144 - 4,096 - 64 fitted (251.94 Ki) rounds down...
        assert_eq!(fitted_label(257_984), "251K");
        // ...while a context asked for by number takes the nearest K.
        assert_eq!(context_label(257_984), "252K");
        assert_eq!(context_label(12_800), "13K");
        assert_eq!(context_label(12_700), "12K");
        assert_eq!(context_label(1 << 20), "1M");
        assert_eq!(context_label((1 << 20) - 1), "1M");
        assert_eq!(fitted_label((1 << 20) - 1), "1023K");
        assert_eq!(context_label(3 << 19), "1536K");
        assert_eq!(context_label(1500), "1,500");
        assert_eq!(context_label(8191), "8,191");
        assert_eq!(group_digits(1_234_567), "1,234,567");
        assert_eq!(group_digits(12), "12");
    }

    #[test]
    fn estimate_and_render() {
        let plan = Plan::new(&PlanConfig::default(), seed_limits(1_600_000));
        let runnable = plan.runnable_cells().count();
        assert_eq!(runnable, 8 + 7 + 6 + 5 + 4 + 3);
        let inputs = EstimateInputs {
            prefill_tok_per_s: 1e12,
            warmup_s: 5.0,
            drain_s: 2.0,
        };
        let est = plan.estimate_seconds(30.0, &inputs);
        assert!((est - runnable as f64 * 37.0).abs() < 0.01, "{est}");
        let r = plan.render();
        assert!(
            r.contains("33 cells to run, 15 over capacity, 0 skipped"),
            "{r}"
        );
        assert!(
            r.contains("Prefill at: 8K, 16K, 32K, 64K, 128K, 251K, 256K"),
            "{r}"
        );
        assert!(
            r.contains("251K     run  run  run over over over over over"),
            "{r}"
        );
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parsers_never_panic(s in "\\PC{0,40}") {
                let _ = parse_contexts("--contexts", &s);
                let _ = parse_concurrency(&s);
            }

            #[test]
            fn parsers_never_panic_on_list_like_input(s in "[0-9kKmM.,_ =max]{0,30}") {
                let _ = parse_contexts("--contexts", &s);
                let _ = parse_concurrency(&s);
            }

            /// Any list we print reads back as the same numbers (k-suffixed where whole).
            #[test]
            fn written_lists_read_back(values in proptest::collection::vec(1u64..(1 << 30), 1..8)) {
                let text: Vec<String> = values
                    .iter()
                    .map(|&v| if v % 1024 == 0 { format!("{}k", v / 1024) } else { v.to_string() })
                    .collect();
                let parsed = parse_contexts("--contexts", &text.join(",")).unwrap();
                let want: Vec<ContextSpec> = values.iter().map(|&v| ContextSpec::Tokens(v)).collect();
                prop_assert_eq!(parsed, want);
                // Concurrency levels stop at MAX_CONCURRENCY.
                let levels: Vec<u64> = values.iter().map(|v| v % MAX_CONCURRENCY + 1).collect();
                let conc = parse_concurrency(&levels.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",")).unwrap();
                let mut sorted = levels;
                sorted.sort_unstable();
                sorted.dedup();
                prop_assert_eq!(conc, sorted);
            }

            /// Every planned cell's verdict is the capacity rule applied directly.
            #[test]
            fn plan_verdicts_follow_the_rule(
                mml in 2_000u64..400_000,
                kv in 1u64..4_000_000,
                running in proptest::option::of(1u64..256),
                max_tokens in 1u64..8192,
            ) {
                let limits = ServerLimits {
                    max_model_len: Some(mml),
                    kv_tokens: Some((kv, KvSource::UserFlag)),
                    max_running: running,
                };
                let cfg = PlanConfig { max_tokens, ..Default::default() };
                let plan = Plan::new(&cfg, limits);
                for cell in &plan.cells {
                    let ctx = plan.contexts[cell.context].tokens;
                    let c = cell.concurrency;
                    let want = if ctx + max_tokens > mml {
                        "skip"
                    } else if c * (ctx + max_tokens) > kv || running.is_some_and(|r| c > r) {
                        "over"
                    } else {
                        "run"
                    };
                    let got = match cell.status {
                        None => "run",
                        Some(CellStatus::Skipped) => "skip",
                        Some(CellStatus::OverCapacity(_)) => "over",
                        _ => "?",
                    };
                    prop_assert_eq!(got, want, "ctx {} c {}", ctx, c);
                }
                for p in &plan.prefill {
                    prop_assert_eq!(p.status.is_none(), p.context.tokens < mml);
                }
            }
        }
    }
}
