//! The simulated inference engine: continuous batching over a paged KV cache with a prefix
//! cache, as a pure state machine. The caller says what time it is (`advance(now)`), asks when
//! to come back (`next_wakeup`) and receives the tokens that became due. No clock, no threads,
//! no I/O here, so tests drive it with plain numbers.
//!
//! Model of one engine step (vLLM V1-like): every running sequence whose prefill is done decodes
//! one token; the rest of the token budget (`max_num_batched_tokens`) goes to prefill chunks in
//! admission order (chunked prefill). The step lasts decode cost + prefill cost, both scaled by
//! `time_scale`. Tokens are due at the end of the step; a sequence whose last prefill chunk ends
//! in a step emits its first token then. Blocks for prompt + `max_tokens` are reserved at
//! admission (full prompt blocks already in the prefix cache are shared, not reserved), so a
//! request that does not fit waits in FCFS order and nothing is ever preempted.

use super::text::{mix64, TextGen};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};

/// Prefill speed for a prompt of `L` tokens is `rate_tok_s / (1 + L / half_ctx)`; the time to
/// prefill from context `a` to `b` is `T(b) - T(a)` with `T(L) = (L + L^2 / half_ctx) / rate`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrefillCurve {
    pub rate_tok_s: f64,
    pub half_ctx: f64,
}

impl PrefillCurve {
    /// Seconds to prefill a whole `len`-token prompt from nothing.
    pub fn seconds(&self, len: f64) -> f64 {
        (len + len * len / self.half_ctx) / self.rate_tok_s
    }

    /// Prompt tokens per second for an uncached `len`-token prompt.
    pub fn rate_at(&self, len: f64) -> f64 {
        self.rate_tok_s / (1.0 + len / self.half_ctx)
    }
}

/// Decode step time = base + per_seq * batch + per_ktok_total * (sum of contexts) / 1000
/// + per_ktok_max * (longest context) / 1000, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeCost {
    pub base_us: f64,
    pub per_seq_us: f64,
    pub per_ktok_total_us: f64,
    pub per_ktok_max_us: f64,
}

impl DecodeCost {
    /// Microseconds of one decode step over `batch` sequences.
    pub fn step_us(&self, batch: usize, total_ctx: u64, max_ctx: u64) -> f64 {
        self.base_us
            + self.per_seq_us * batch as f64
            + self.per_ktok_total_us * total_ctx as f64 / 1000.0
            + self.per_ktok_max_us * max_ctx as f64 / 1000.0
    }
}

/// Everything that shapes the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineParams {
    pub kv_tokens: u64,
    pub block_size: u32,
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub prefill: PrefillCurve,
    pub decode: DecodeCost,
    /// Multiplies every simulated duration (0.01 = 100x faster than the model says).
    pub time_scale: f64,
}

impl EngineParams {
    pub fn num_blocks(&self) -> u32 {
        (self.kv_tokens / self.block_size as u64) as u32
    }
}

/// One request as the engine sees it.
#[derive(Clone, Debug)]
pub struct NewSeq {
    /// The caller's key, echoed in every emission; must be unique among live sequences.
    pub tag: u64,
    pub prompt: Vec<u32>,
    /// `cache_salt`, mixed into the first block's hash.
    pub salt: Option<String>,
    pub max_tokens: u32,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    /// Seeds the generated text and the end-of-sequence point.
    pub seed: u64,
    pub loop_after: Option<u64>,
    /// The vision encoder's time for the request's images, in microseconds (before
    /// `time_scale`): added to the prefill step that computes its first prompt chunk.
    pub vision_us: f64,
}

/// Why a sequence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// A token that became due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Emission {
    pub tag: u64,
    /// 0-based index of this output token.
    pub index: u32,
    pub token: u32,
    /// Engine time (ns) at which the token exists: the end of its step.
    pub due_ns: u64,
    /// Prompt tokens served from the prefix cache (same on every emission of a sequence).
    pub cached_tokens: u32,
    pub finish: Option<Finish>,
    /// Engine time (ns) the sequence was queued (`add`) and first scheduled (the start of the
    /// step that admitted it): vLLM's `queued_ts` and `scheduled_ts`, the same on every emission.
    pub queued_ns: u64,
    pub scheduled_ns: u64,
}

/// Why a request cannot be accepted at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdmitError {
    /// Prompt plus `max_tokens` needs more blocks than the whole KV cache has.
    LargerThanCache {
        needed_tokens: u64,
        kv_tokens: u64,
    },
    DuplicateTag(u64),
    /// The engine thread has stopped (server shutting down).
    Stopped,
}

impl std::fmt::Display for AdmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdmitError::LargerThanCache {
                needed_tokens,
                kv_tokens,
            } => write!(
                f,
                "request needs {needed_tokens} KV tokens but the cache holds {kv_tokens}"
            ),
            AdmitError::DuplicateTag(t) => write!(f, "sequence tag {t} is already live"),
            AdmitError::Stopped => write!(f, "the engine has stopped"),
        }
    }
}

/// Whether `s` could ever run under `p`, whatever else is running: the check [`Engine::add`]
/// makes first, also callable without the engine (the driver answers a request with it at
/// once instead of waiting for the engine thread).
pub fn admissible(p: &EngineParams, s: &NewSeq) -> Result<(), AdmitError> {
    let bs = p.block_size as u64;
    let tokens = s.prompt.len() as u64 + s.max_tokens.max(1) as u64;
    if tokens.div_ceil(bs) > p.num_blocks() as u64 {
        return Err(AdmitError::LargerThanCache {
            needed_tokens: tokens,
            kv_tokens: p.num_blocks() as u64 * bs,
        });
    }
    Ok(())
}

/// Counters and gauges for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub running: u32,
    pub waiting: u32,
    pub used_blocks: u32,
    pub num_blocks: u32,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub prefix_cache_queries_total: u64,
    pub prefix_cache_hits_total: u64,
    pub preemptions_total: u64,
    pub finished_total: u64,
    /// Requests admitted from the waiting queue so far, and the time they spent in it from
    /// arrival to the start of the step that admitted them (vLLM's `request_queue_time`).
    pub admitted_total: u64,
    pub queue_time_ns_total: u64,
}

impl EngineStats {
    pub fn kv_usage(&self) -> f64 {
        if self.num_blocks == 0 {
            0.0
        } else {
            self.used_blocks as f64 / self.num_blocks as f64
        }
    }
}

struct Seq {
    prompt: Vec<u32>,
    /// Hash chain of the prompt's full blocks.
    hashes: Vec<u64>,
    blocks: Vec<u32>,
    /// Prompt tokens whose KV exists (cached or prefilled).
    computed: u32,
    cached: u32,
    generated: u32,
    stop_at: u32,
    finish: Finish,
    max_tokens: u32,
    gen: TextGen,
    /// When the request arrived (`add`'s `now`).
    arrived: u64,
    /// The start of the step that admitted it (nothing is preempted, so it is admitted once).
    scheduled: u64,
    /// [`NewSeq::vision_us`].
    vision_us: f64,
}

impl Seq {
    fn prompt_len(&self) -> u32 {
        self.prompt.len() as u32
    }
    fn prefilled(&self) -> bool {
        self.computed >= self.prompt_len()
    }
}

/// The paged KV cache: reference counts, a hash -> block map for full prompt blocks, and an LRU
/// of cached blocks nobody holds (evicted oldest first when a new block is needed).
struct Blocks {
    refs: Vec<u32>,
    hash_of: Vec<Option<u64>>,
    lru_tick: Vec<u64>,
    free: Vec<u32>,
    cached: HashMap<u64, u32>,
    lru: BTreeMap<u64, u32>,
    tick: u64,
    used: u32,
}

impl Blocks {
    fn new(n: u32) -> Self {
        Self {
            refs: vec![0; n as usize],
            hash_of: vec![None; n as usize],
            lru_tick: vec![0; n as usize],
            free: (0..n).rev().collect(),
            cached: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            used: 0,
        }
    }

    fn hits(&self, hashes: &[u64], out: &mut Vec<u32>) {
        out.clear();
        for h in hashes {
            match self.cached.get(h) {
                Some(&b) => out.push(b),
                None => break,
            }
        }
    }

    fn available_for(&self, hits: &[u32]) -> usize {
        let idle_hits = hits.iter().filter(|&&b| self.refs[b as usize] == 0).count();
        self.free.len() + self.lru.len() - idle_hits
    }

    fn take(&mut self, b: u32) {
        if self.refs[b as usize] == 0 {
            self.lru.remove(&self.lru_tick[b as usize]);
            self.used += 1;
        }
        self.refs[b as usize] += 1;
    }

    fn alloc(&mut self) -> Option<u32> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self.lru.pop_first()?;
                if let Some(h) = self.hash_of[b as usize].take() {
                    self.cached.remove(&h);
                }
                b
            }
        };
        self.refs[b as usize] = 1;
        self.used += 1;
        Some(b)
    }

    fn release(&mut self, b: u32) {
        let r = &mut self.refs[b as usize];
        *r -= 1;
        if *r == 0 {
            self.used -= 1;
            if self.hash_of[b as usize].is_some() {
                self.tick += 1;
                self.lru_tick[b as usize] = self.tick;
                self.lru.insert(self.tick, b);
            } else {
                self.free.push(b);
            }
        }
    }

    /// Forgets every cached block nobody holds (SGLang's `/flush_cache`).
    fn flush(&mut self) {
        while let Some((_, b)) = self.lru.pop_first() {
            if let Some(h) = self.hash_of[b as usize].take() {
                self.cached.remove(&h);
            }
            self.free.push(b);
        }
    }

    fn register(&mut self, b: u32, h: u64) {
        if self.hash_of[b as usize].is_some() || self.cached.contains_key(&h) {
            return;
        }
        self.hash_of[b as usize] = Some(h);
        self.cached.insert(h, b);
    }
}

/// Hash chain over full blocks; the salt (if any) seeds the first block's parent.
pub fn block_hashes(prompt: &[u32], block_size: u32, salt: Option<&str>) -> Vec<u64> {
    let mut parent = {
        let mut h = DefaultHasher::new();
        salt.hash(&mut h);
        h.finish()
    };
    prompt
        .chunks_exact(block_size as usize)
        .map(|blk| {
            let mut h = DefaultHasher::new();
            parent.hash(&mut h);
            blk.hash(&mut h);
            parent = h.finish();
            parent
        })
        .collect()
}

/// The engine. See the module docs for the model.
pub struct Engine {
    p: EngineParams,
    blocks: Blocks,
    seqs: HashMap<u64, Seq>,
    waiting: VecDeque<u64>,
    running: Vec<u64>,
    step_end: Option<u64>,
    step_decode: Vec<u64>,
    step_prefill: Vec<(u64, u32)>,
    hit_buf: Vec<u32>,
    stats: EngineStats,
}

impl Engine {
    pub fn new(p: EngineParams) -> Self {
        let n = p.num_blocks();
        Self {
            blocks: Blocks::new(n),
            stats: EngineStats {
                num_blocks: n,
                ..EngineStats::default()
            },
            p,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            step_end: None,
            step_decode: Vec::new(),
            step_prefill: Vec::new(),
            hit_buf: Vec::new(),
        }
    }

    pub fn params(&self) -> &EngineParams {
        &self.p
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = self.stats;
        s.running = self.running.len() as u32;
        s.waiting = self.waiting.len() as u32;
        s.used_blocks = self.blocks.used;
        s
    }

    /// Empties the prefix cache, as SGLang's `/flush_cache` does: only when no request is
    /// running or waiting (`false`, and nothing done, otherwise).
    pub fn flush_cache(&mut self) -> bool {
        if !self.running.is_empty() || !self.waiting.is_empty() {
            return false;
        }
        self.blocks.flush();
        true
    }

    /// When the current step ends (the next time tokens become due); `None` when idle.
    pub fn next_wakeup(&self) -> Option<u64> {
        self.step_end
    }

    /// Queue a request at time `now`. The caller has advanced to `now` first (a step that ended
    /// before it would otherwise admit the request before it arrived).
    pub fn add(&mut self, now: u64, s: NewSeq) -> Result<(), AdmitError> {
        let bs = self.p.block_size as u64;
        let max_tokens = s.max_tokens.max(1);
        admissible(&self.p, &s)?;
        if self.seqs.contains_key(&s.tag) {
            return Err(AdmitError::DuplicateTag(s.tag));
        }
        // Without ignore_eos the sequence "samples EOS" at a point fixed by its seed.
        let eos_at = 64 + (mix64(s.seed ^ 0xE05) % 960) as u32;
        let (stop_at, finish) = if s.ignore_eos || eos_at.max(s.min_tokens) >= max_tokens {
            (max_tokens, Finish::Length)
        } else {
            (eos_at.max(s.min_tokens), Finish::Stop)
        };
        // A full hit still recomputes the last prompt token, so only blocks wholly inside the
        // first `len - 1` tokens can be served from the cache.
        let cacheable = s.prompt.len().saturating_sub(1) / bs as usize;
        let mut hashes = block_hashes(&s.prompt, self.p.block_size, s.salt.as_deref());
        let full = hashes.len();
        hashes.truncate(cacheable.min(full));
        let seq = Seq {
            hashes,
            blocks: Vec::new(),
            computed: 0,
            cached: 0,
            generated: 0,
            stop_at,
            finish,
            max_tokens,
            gen: TextGen::new(s.seed, s.loop_after),
            prompt: s.prompt,
            arrived: now,
            scheduled: now,
            vision_us: s.vision_us,
        };
        self.seqs.insert(s.tag, seq);
        self.waiting.push_back(s.tag);
        if self.step_end.is_none() {
            self.plan_step(now);
        }
        Ok(())
    }

    /// Drop a request (client went away): frees its blocks; its pending tokens never come.
    pub fn abort(&mut self, tag: u64) {
        let Some(seq) = self.seqs.remove(&tag) else {
            return;
        };
        self.waiting.retain(|&t| t != tag);
        self.running.retain(|&t| t != tag);
        for &b in &seq.blocks {
            self.blocks.release(b);
        }
    }

    /// Run every step that has ended by `now`, pushing due tokens to `out` in time order.
    pub fn advance(&mut self, now: u64, out: &mut Vec<Emission>) {
        while let Some(end) = self.step_end {
            if end > now {
                return;
            }
            self.finish_step(end, out);
            self.step_end = None;
            self.plan_step(end);
        }
    }

    /// Move waiting requests into the batch at a step that starts at `now`, in FCFS order,
    /// while the running limit and the free blocks allow.
    fn admit(&mut self, now: u64) {
        let bs = self.p.block_size as u64;
        while (self.running.len() as u32) < self.p.max_num_seqs {
            let Some(&tag) = self.waiting.front() else {
                return;
            };
            let Some(seq) = self.seqs.get_mut(&tag) else {
                self.waiting.pop_front();
                continue;
            };
            self.blocks.hits(&seq.hashes, &mut self.hit_buf);
            let needed = (seq.prompt.len() as u64 + seq.max_tokens as u64).div_ceil(bs) as usize;
            let new_blocks = needed - self.hit_buf.len();
            if new_blocks > self.blocks.available_for(&self.hit_buf) {
                // FCFS: the head waits, and so does everyone behind it.
                return;
            }
            self.waiting.pop_front();
            for i in 0..self.hit_buf.len() {
                let b = self.hit_buf[i];
                self.blocks.take(b);
                seq.blocks.push(b);
            }
            for _ in 0..new_blocks {
                match self.blocks.alloc() {
                    Some(b) => seq.blocks.push(b),
                    None => break, // unreachable: availability was checked above
                }
            }
            seq.cached = (self.hit_buf.len() as u64 * bs) as u32;
            seq.computed = seq.cached;
            self.stats.prefix_cache_queries_total += seq.prompt.len() as u64;
            self.stats.prefix_cache_hits_total += seq.cached as u64;
            self.stats.admitted_total += 1;
            self.stats.queue_time_ns_total += now.saturating_sub(seq.arrived);
            seq.scheduled = now;
            self.running.push(tag);
        }
    }

    fn plan_step(&mut self, start: u64) {
        self.admit(start);
        self.step_decode.clear();
        self.step_prefill.clear();
        let mut budget = self.p.max_num_batched_tokens;
        let (mut total_ctx, mut max_ctx) = (0u64, 0u64);
        let mut prefill_s = 0.0;
        for &tag in &self.running {
            let Some(seq) = self.seqs.get(&tag) else {
                continue;
            };
            if seq.prefilled() {
                let ctx = (seq.prompt.len() + seq.generated as usize) as u64;
                total_ctx += ctx;
                max_ctx = max_ctx.max(ctx);
                self.step_decode.push(tag);
                budget = budget.saturating_sub(1);
            }
        }
        for &tag in &self.running {
            if budget == 0 {
                break;
            }
            let Some(seq) = self.seqs.get(&tag) else {
                continue;
            };
            if !seq.prefilled() {
                let chunk = (seq.prompt_len() - seq.computed).min(budget);
                budget -= chunk;
                let a = seq.computed as f64;
                let b = (seq.computed + chunk) as f64;
                prefill_s += self.p.prefill.seconds(b) - self.p.prefill.seconds(a);
                // The images are encoded before their tokens are computed: once, with the
                // first chunk (nothing computed past the cached prefix yet).
                if seq.computed == seq.cached {
                    prefill_s += seq.vision_us / 1e6;
                }
                self.step_prefill.push((tag, seq.computed + chunk));
            }
        }
        if self.step_decode.is_empty() && self.step_prefill.is_empty() {
            return;
        }
        let mut us = prefill_s * 1e6;
        if !self.step_decode.is_empty() {
            us += self
                .p
                .decode
                .step_us(self.step_decode.len(), total_ctx, max_ctx);
        }
        let ns = (us * 1000.0 * self.p.time_scale).max(1.0) as u64;
        self.step_end = Some(start + ns);
    }

    fn finish_step(&mut self, end: u64, out: &mut Vec<Emission>) {
        let decode = std::mem::take(&mut self.step_decode);
        let prefill = std::mem::take(&mut self.step_prefill);
        let bs = self.p.block_size as usize;
        for &(tag, upto) in &prefill {
            let Some(seq) = self.seqs.get_mut(&tag) else {
                continue;
            };
            seq.computed = upto;
            if seq.prefilled() {
                self.stats.prompt_tokens_total += seq.prompt.len() as u64;
                // Publish the prompt's full blocks for later requests.
                for (i, &h) in seq.hashes.iter().enumerate() {
                    if i < seq.blocks.len() && (i + 1) * bs <= seq.prompt.len() {
                        self.blocks.register(seq.blocks[i], h);
                    }
                }
                self.emit(tag, end, out);
            }
        }
        for &tag in &decode {
            self.emit(tag, end, out);
        }
        self.step_decode = decode;
        self.step_prefill = prefill;
    }

    fn emit(&mut self, tag: u64, end: u64, out: &mut Vec<Emission>) {
        let Some(seq) = self.seqs.get_mut(&tag) else {
            return;
        };
        let index = seq.generated;
        seq.generated += 1;
        let token = seq.gen.next_token();
        let done = seq.generated >= seq.stop_at;
        out.push(Emission {
            tag,
            index,
            token,
            due_ns: end,
            cached_tokens: seq.cached,
            finish: done.then_some(seq.finish),
            queued_ns: seq.arrived,
            scheduled_ns: seq.scheduled,
        });
        self.stats.generation_tokens_total += 1;
        if done {
            self.stats.finished_total += 1;
            self.abort(tag);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn params() -> EngineParams {
        EngineParams {
            kv_tokens: 16 * 64,
            block_size: 16,
            max_num_seqs: 8,
            max_num_batched_tokens: 256,
            prefill: PrefillCurve {
                rate_tok_s: 100_000.0,
                half_ctx: 1e12,
            },
            decode: DecodeCost {
                base_us: 1000.0,
                per_seq_us: 100.0,
                per_ktok_total_us: 0.0,
                per_ktok_max_us: 0.0,
            },
            time_scale: 1.0,
        }
    }

    fn seq(tag: u64, prompt_len: usize, max_tokens: u32) -> NewSeq {
        NewSeq {
            tag,
            prompt: (0..prompt_len as u32).map(|i| 300 + i % 5000).collect(),
            salt: None,
            max_tokens,
            min_tokens: 0,
            ignore_eos: true,
            seed: tag,
            loop_after: None,
            vision_us: 0.0,
        }
    }

    /// Drive the engine to idle, collecting every emission.
    fn run(e: &mut Engine) -> Vec<Emission> {
        let mut out = Vec::new();
        while let Some(t) = e.next_wakeup() {
            e.advance(t, &mut out);
        }
        out
    }

    fn first_token_ns(out: &[Emission], tag: u64) -> u64 {
        out.iter()
            .find(|e| e.tag == tag && e.index == 0)
            .expect("first token")
            .due_ns
    }

    #[test]
    fn one_sequence_prefills_then_decodes_on_schedule() {
        let mut e = Engine::new(params());
        e.add(0, seq(1, 100, 5)).unwrap();
        let out = run(&mut e);
        assert_eq!(out.len(), 5);
        // 100 tokens at 100K tok/s = 1 ms; then one decode step of 1.1 ms per token.
        assert_eq!(out[0].due_ns, MS);
        for w in out.windows(2) {
            assert_eq!(w[1].due_ns - w[0].due_ns, 1_100_000);
        }
        assert_eq!(out[4].finish, Some(Finish::Length));
        assert_eq!(e.stats().used_blocks, 0);
        assert_eq!(e.stats().generation_tokens_total, 5);
    }

    /// A request's images cost their encoder time once, in the step of its first prefill
    /// chunk: with a 100-token budget a 300-token prompt takes three 1 ms chunks, and 3 ms of
    /// vision lengthen the first step alone.
    #[test]
    fn vision_time_is_charged_once_with_the_first_prefill_chunk() {
        let mut p = params();
        p.max_num_batched_tokens = 100;
        let mut e = Engine::new(p.clone());
        let mut s = seq(1, 300, 2);
        s.vision_us = 3000.0;
        e.add(0, s).unwrap();
        let out = run(&mut e);
        assert_eq!(out[0].due_ns, 3 * MS + 3 * MS);
        assert_eq!(out[1].due_ns - out[0].due_ns, 1_100_000);
        // A request without images: the prefill alone.
        let mut e = Engine::new(p);
        e.add(0, seq(2, 300, 2)).unwrap();
        assert_eq!(run(&mut e)[0].due_ns, 3 * MS);
    }

    #[test]
    fn advance_emits_nothing_early_and_catches_up_late() {
        let mut e = Engine::new(params());
        e.add(0, seq(1, 100, 5)).unwrap();
        let mut out = Vec::new();
        e.advance(MS - 1, &mut out);
        assert!(out.is_empty());
        e.advance(10 * MS, &mut out);
        assert_eq!(
            out.len(),
            5,
            "a late driver gets every due token, stamped on schedule"
        );
        assert_eq!(out[4].due_ns, MS + 4 * 1_100_000);
    }

    #[test]
    fn batching_slows_each_stream_but_raises_total() {
        let mut e = Engine::new(params());
        for tag in 0..4 {
            e.add(0, seq(tag, 16, 50)).unwrap();
        }
        let out = run(&mut e);
        let last = out.iter().map(|x| x.due_ns).max().unwrap();
        let mut e1 = Engine::new(params());
        e1.add(0, seq(9, 16, 50)).unwrap();
        let out1 = run(&mut e1);
        let last1 = out1.iter().map(|x| x.due_ns).max().unwrap();
        // Per-stream gap: 1.4 ms at batch 4 vs 1.1 ms alone; total tokens 4x in < 4x the time.
        let gaps4: Vec<u64> = out
            .iter()
            .filter(|x| x.tag == 0)
            .map(|x| x.due_ns)
            .collect();
        assert_eq!(gaps4[2] - gaps4[1], 1_400_000);
        assert!(last > last1 && last < 2 * last1);
    }

    #[test]
    fn max_num_seqs_caps_the_running_batch() {
        let mut p = params();
        p.max_num_seqs = 2;
        let mut e = Engine::new(p);
        for tag in 0..5 {
            e.add(0, seq(tag, 16, 3)).unwrap();
        }
        // The scheduler admits at step boundaries: look after the first step.
        let mut out = Vec::new();
        e.advance(e.next_wakeup().unwrap(), &mut out);
        let s = e.stats();
        assert_eq!((s.running, s.waiting), (2, 3));
        out.extend(run(&mut e));
        assert_eq!(out.len(), 15);
        // The third request gets a slot only when the first one has finished.
        let last0 = out
            .iter()
            .filter(|x| x.tag == 0)
            .map(|x| x.due_ns)
            .max()
            .unwrap();
        assert!(first_token_ns(&out, 2) > last0);
    }

    #[test]
    fn queue_time_runs_from_arrival_to_the_step_that_admits() {
        let mut p = params();
        p.max_num_seqs = 2;
        let mut e = Engine::new(p);
        // An idle engine admits at once; the others arrive during its first step.
        e.add(0, seq(0, 16, 3)).unwrap();
        // (Its 16-token prefill takes 160 µs.)
        let arrival = 50_000;
        for tag in 1..5 {
            e.add(arrival, seq(tag, 16, 3)).unwrap();
        }
        assert_eq!(
            (e.stats().admitted_total, e.stats().queue_time_ns_total),
            (1, 0)
        );
        let out = run(&mut e);
        // Each prompt fits one step, so a request was admitted at the start of the step that
        // wrote its first token: the previous step's end, where every token of it is due.
        let mut ends: Vec<u64> = out.iter().map(|x| x.due_ns).collect();
        ends.sort_unstable();
        ends.dedup();
        let admitted_at = |tag| {
            let first = first_token_ns(&out, tag);
            ends.iter()
                .copied()
                .filter(|&t| t < first)
                .max()
                .unwrap_or(0)
        };
        let waits: u64 = (1..5).map(|tag| admitted_at(tag) - arrival).sum();
        let s = e.stats();
        assert_eq!((s.admitted_total, s.queue_time_ns_total), (5, waits));
        // Request 2 waited for request 0's last token (the running limit), request 1 only for
        // the end of the first step.
        assert!(
            admitted_at(2)
                >= out
                    .iter()
                    .filter(|x| x.tag == 0)
                    .map(|x| x.due_ns)
                    .max()
                    .unwrap()
        );
        assert_eq!(admitted_at(1), first_token_ns(&out, 0));
        // Every emission carries its sequence's queued and scheduled times (vLLM's per-request
        // metrics are made of them): the same admission times, read off the tokens.
        for x in &out {
            let queued = if x.tag == 0 { 0 } else { arrival };
            let scheduled = if x.tag == 0 { 0 } else { admitted_at(x.tag) };
            assert_eq!((x.queued_ns, x.scheduled_ns), (queued, scheduled), "{x:?}");
        }
    }

    #[test]
    fn kv_admission_queues_what_does_not_fit() {
        let mut e = Engine::new(params()); // 64 blocks
                                           // Each needs (400 + 112) / 16 = 32 blocks: two fit, the third waits.
        for tag in 0..3 {
            e.add(0, seq(tag, 400, 112)).unwrap();
        }
        let mut out = Vec::new();
        e.advance(e.next_wakeup().unwrap(), &mut out);
        let s = e.stats();
        assert_eq!((s.running, s.waiting, s.used_blocks), (2, 1, 64));
        assert_eq!(s.kv_usage(), 1.0);
        out.extend(run(&mut e));
        assert_eq!(out.iter().filter(|x| x.tag == 2).count(), 112);
        assert!(matches!(
            e.add(0, seq(7, 1000, 100)),
            Err(AdmitError::LargerThanCache { .. })
        ));
    }

    #[test]
    fn chunked_prefill_interleaves_with_decode() {
        let mut e = Engine::new(params());
        e.add(0, seq(1, 16, 40)).unwrap();
        let mut out = Vec::new();
        e.advance(MS / 2, &mut out);
        // A long prompt arrives while 1 is decoding: its 600 tokens go in chunks of 255
        // (budget 256 minus the decoder's one), so sequence 1 keeps emitting meanwhile.
        e.add(MS / 2, seq(2, 600, 2)).unwrap();
        out.extend(run(&mut e));
        let t2 = first_token_ns(&out, 2);
        let during = out.iter().filter(|x| x.tag == 1 && x.due_ns < t2).count();
        assert!(during >= 3, "decode stalled during prefill: {during}");
    }

    #[test]
    fn prefill_rate_falls_with_context() {
        // The seed curve: 31.5K tok/s at 8K, 11K at 64K, 6.4K at 128K, 3.5K at 256K.
        let c = PrefillCurve {
            rate_tok_s: 42_600.0,
            half_ctx: 22_600.0,
        };
        for (len, want) in [
            (8192.0, 31_500.0),
            (65536.0, 11_000.0),
            (131072.0, 6_300.0),
            (262144.0, 3_400.0),
        ] {
            let got = len / c.seconds(len);
            assert!((got - want).abs() / want < 0.05, "{len}: {got} vs {want}");
            assert!((c.rate_at(len) - got).abs() < 1e-6);
        }
        // The engine's TTFT for an uncached prompt equals the curve (chunking is additive).
        let mut p = params();
        p.kv_tokens = 1 << 20;
        p.prefill = c;
        p.max_num_batched_tokens = 2048;
        let mut e = Engine::new(p);
        e.add(0, seq(1, 8192, 1)).unwrap();
        let out = run(&mut e);
        let want = (c.seconds(8192.0) * 1e9) as i64;
        assert!(
            (out[0].due_ns as i64 - want).abs() < 10,
            "{} vs {want}",
            out[0].due_ns
        );
    }

    #[test]
    fn decode_step_fits_the_seed_report() {
        let d = DecodeCost {
            base_us: 6080.0,
            per_seq_us: 50.0,
            per_ktok_total_us: 7.03,
            per_ktok_max_us: 26.3,
        };
        let k = 1000;
        for (batch, ctx, want_ms) in [(1, 128 * k, 10.4), (2, 128 * k, 11.3), (1, 251 * k, 14.5)] {
            let ms = d.step_us(batch, ctx * batch as u64, ctx) / 1000.0;
            assert!((ms - want_ms).abs() < 0.1, "{batch}x{ctx}: {ms} ms");
        }
    }

    #[test]
    fn prefix_cache_hits_misses_and_salt() {
        let mut p = params();
        p.kv_tokens = 16 * 256;
        let mut e = Engine::new(p);
        e.add(0, seq(1, 1000, 1)).unwrap();
        let cold = run(&mut e)[0].due_ns;
        e.add(cold, seq(2, 1000, 1)).unwrap();
        let warm = run(&mut e)[0];
        // 1000 tokens = 62 full blocks; all of them hit (62 * 16 = 992 < 999).
        assert_eq!(warm.cached_tokens, 992);
        assert!(
            warm.due_ns - cold < cold / 10,
            "warm {} cold {cold}",
            warm.due_ns - cold
        );
        let mut salted = seq(3, 1000, 1);
        salted.salt = Some("nonce".into());
        let t = warm.due_ns;
        e.add(t, salted).unwrap();
        assert_eq!(run(&mut e)[0].cached_tokens, 0);
        // A changed first block misses everything after it.
        let mut changed = seq(4, 1000, 1);
        changed.prompt[0] = 9;
        e.add(t, changed).unwrap();
        assert_eq!(run(&mut e)[0].cached_tokens, 0);
        let s = e.stats();
        assert_eq!(s.prefix_cache_queries_total, 4000);
        assert_eq!(s.prefix_cache_hits_total, 992);
    }

    #[test]
    fn block_aligned_full_hit_recomputes_the_last_block() {
        let mut e = Engine::new(params());
        e.add(0, seq(1, 64, 1)).unwrap();
        run(&mut e);
        e.add(0, seq(2, 64, 1)).unwrap();
        assert_eq!(run(&mut e)[0].cached_tokens, 48);
    }

    #[test]
    fn lru_evicts_the_oldest_cached_prompt() {
        let mut p = params();
        p.kv_tokens = 16 * 10;
        let mut e = Engine::new(p);
        let prompt = |base: u32| -> NewSeq {
            let mut s = seq(base as u64, 33, 1);
            s.prompt = (0..33).map(|i| base + i).collect();
            s
        };
        // A and B each leave 2 cached blocks; the big prompt then needs 8 of the 10 blocks:
        // the 6 free ones go first, then the 2 least recently used (A's, since B was touched).
        for b in [1000, 2000] {
            e.add(0, prompt(b)).unwrap();
            run(&mut e);
        }
        e.add(0, prompt(2000)).unwrap(); // touch B: A is now least recent
        assert_eq!(run(&mut e)[0].cached_tokens, 32);
        let mut big = seq(50, 16 * 8 - 1, 1);
        big.prompt = (0..127).map(|i| 5000 + i).collect();
        e.add(0, big).unwrap();
        run(&mut e);
        e.add(0, prompt(2000)).unwrap();
        assert_eq!(run(&mut e)[0].cached_tokens, 32, "B survived");
        e.add(0, prompt(1000)).unwrap();
        assert_eq!(run(&mut e)[0].cached_tokens, 0, "A was evicted");
    }

    #[test]
    fn eos_stops_early_unless_ignored() {
        let mut p = params();
        p.kv_tokens = 1 << 16;
        let mut e = Engine::new(p);
        let mut s = seq(1, 16, 1000);
        s.ignore_eos = false;
        e.add(0, s).unwrap();
        let out = run(&mut e);
        let last = out.last().unwrap();
        assert_eq!(last.finish, Some(Finish::Stop));
        assert!(out.len() >= 64 && out.len() < 1000);
        // min_tokens pushes the end of sequence later (the EOS point is at most 1023).
        let mut s = seq(2, 16, 2000);
        s.ignore_eos = false;
        s.min_tokens = 990;
        e.add(0, s).unwrap();
        let out = run(&mut e);
        assert!((990..=1023).contains(&out.len()), "{}", out.len());
        assert_eq!(out.last().unwrap().finish, Some(Finish::Stop));
    }

    #[test]
    fn abort_frees_blocks() {
        let mut e = Engine::new(params());
        e.add(0, seq(1, 400, 112)).unwrap();
        assert_eq!(e.stats().used_blocks, 32);
        e.abort(1);
        assert_eq!(e.stats().used_blocks, 0);
        let mut out = Vec::new();
        e.advance(u64::MAX, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn loop_after_reaches_the_stream() {
        let mut e = Engine::new(params());
        let mut s = seq(1, 16, 200);
        s.loop_after = Some(50);
        e.add(0, s).unwrap();
        let toks: Vec<u32> = run(&mut e).iter().map(|x| x.token).collect();
        let p = super::super::text::LOOP_PERIOD;
        assert!((50 + p..200).all(|i| toks[i] == toks[i - p]));
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// (arrival gap µs, prompt length, max_tokens, salt choice, prompt family) per request.
    fn workload() -> impl Strategy<Value = Vec<(u64, usize, u32, u8, u8)>> {
        prop::collection::vec((0u64..3000, 1usize..300, 1u32..60, 0u8..3, 0u8..4), 1..25)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever arrives: every request gets exactly its tokens in order, time never goes
        /// backwards, the batch and the cache stay within bounds, and all blocks come back.
        #[test]
        fn engine_invariants(reqs in workload(), seqs in 1u32..6, kv_blocks in 24u64..80) {
            let p = EngineParams {
                kv_tokens: 16 * kv_blocks,
                block_size: 16,
                max_num_seqs: seqs,
                max_num_batched_tokens: 128,
                prefill: PrefillCurve { rate_tok_s: 200_000.0, half_ctx: 5_000.0 },
                decode: DecodeCost { base_us: 500.0, per_seq_us: 50.0, per_ktok_total_us: 3.0, per_ktok_max_us: 5.0 },
                time_scale: 1.0,
            };
            let mut e = Engine::new(p);
            let mut now = 0u64;
            let mut out = Vec::new();
            let mut expected = HashMap::new();
            for (tag, &(gap, len, max, salt, family)) in reqs.iter().enumerate() {
                now += gap * 1000;
                e.advance(now, &mut out);
                let s = NewSeq {
                    tag: tag as u64,
                    prompt: (0..len as u32).map(|i| 300 + family as u32 * 1000 + i).collect(),
                    salt: (salt > 0).then(|| format!("salt{salt}")),
                    max_tokens: max,
                    min_tokens: 0,
                    ignore_eos: true,
                    seed: tag as u64,
                    loop_after: None,
                    vision_us: 0.0,
                };
                match e.add(now, s) {
                    Ok(()) => { expected.insert(tag as u64, max); }
                    Err(AdmitError::LargerThanCache { .. }) => prop_assert!((len as u64 + max as u64).div_ceil(16) > kv_blocks),
                    Err(other) => prop_assert!(false, "{other}"),
                }
                let st = e.stats();
                prop_assert!(st.running <= seqs);
                prop_assert!(st.used_blocks <= st.num_blocks);
            }
            while let Some(t) = e.next_wakeup() {
                e.advance(t, &mut out);
                let st = e.stats();
                prop_assert!(st.running <= seqs && st.used_blocks <= st.num_blocks);
            }
            for w in out.windows(2) {
                prop_assert!(w[1].due_ns >= w[0].due_ns);
            }
            for (&tag, &max) in &expected {
                let idx: Vec<u32> = out.iter().filter(|x| x.tag == tag).map(|x| x.index).collect();
                prop_assert_eq!(idx, (0..max).collect::<Vec<_>>());
                let last = out.iter().rfind(|x| x.tag == tag).unwrap();
                prop_assert_eq!(last.finish, Some(Finish::Length));
            }
            let st = e.stats();
            prop_assert_eq!((st.running, st.waiting, st.used_blocks), (0, 0, 0));
            prop_assert!(st.prefix_cache_hits_total <= st.prefix_cache_queries_total);
        }
    }
}
