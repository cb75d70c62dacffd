//! What a `bench sglang --shard K/N` run saves so that `llmspeed merge` can recompute SGLang's
//! figures of the whole run exactly: the `llmspeed.shard` block of its record (the run's
//! settings and identity, its window on the wall clock, and every request as SGLang's reading
//! of it, times in integer nanoseconds and the seconds SGLang's formulas take). The split is
//! `bench::engine::shard`; the merge is `bench::sglang::merge`.
//!
//! Pure: never does IO or reads a clock.

use super::metrics::RequestOutput;
use super::record::RunArgs;
use crate::bench::engine::shard::Ran;
use serde_json::{json, Value};

/// Bumped when the block's meaning changes, so `merge` refuses what it cannot read exactly.
pub const FORMAT: u64 = 1;

/// Names the record a block belongs to, so `llmspeed merge` tells it from `bench serve`'s.
pub const RECORD: &str = "sglang.bench_serving";

/// The run's settings, as the record repeats them (owned).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub tag: Option<String>,
    pub backend: String,
    pub dataset_name: String,
    /// `None`: the trace's timestamps (`"trace"`).
    pub request_rate: Option<f64>,
    pub max_concurrency: Option<usize>,
    pub sharegpt_output_len: Option<u32>,
    pub random_input_len: u32,
    pub random_output_len: u32,
    pub random_range_ratio: f64,
    pub num_prompts: usize,
}

impl Settings {
    pub fn of(a: &RunArgs<'_>) -> Settings {
        Settings {
            tag: a.tag.map(str::to_string),
            backend: a.backend.to_string(),
            dataset_name: a.dataset_name.to_string(),
            request_rate: a.request_rate,
            max_concurrency: a.max_concurrency,
            sharegpt_output_len: a.sharegpt_output_len,
            random_input_len: a.random_input_len,
            random_output_len: a.random_output_len,
            random_range_ratio: a.random_range_ratio,
            num_prompts: a.num_prompts,
        }
    }

    pub fn run_args(&self) -> RunArgs<'_> {
        RunArgs {
            tag: self.tag.as_deref(),
            backend: &self.backend,
            dataset_name: &self.dataset_name,
            request_rate: self.request_rate,
            max_concurrency: self.max_concurrency,
            sharegpt_output_len: self.sharegpt_output_len,
            random_input_len: self.random_input_len,
            random_output_len: self.random_output_len,
            random_range_ratio: self.random_range_ratio,
            num_prompts: self.num_prompts,
            image: None,
        }
    }
}

/// One request of a shard: its index in the whole run, SGLang's reading of it, and its
/// generated text's retokenized count.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardRequest {
    pub index: usize,
    /// Its round within its row (`--gsp-num-turns`; 0 otherwise).
    pub round: usize,
    pub output: RequestOutput,
    pub retokenized: u64,
}

/// What a shard measured, as `merge` needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardBlock {
    /// Its `K/N` and its window; the end is the start plus SGLang's duration of the run.
    pub ran: Ran,
    pub seed: u64,
    /// The model the requests named.
    pub model: String,
    pub settings: Settings,
    pub accept_length: Option<f64>,
    /// `--gsp-num-turns` as the run used it (1: a prompt is one request).
    pub turns: u32,
    /// In request order (a row's rounds in order).
    pub requests: Vec<ShardRequest>,
}

/// A float that may be non-finite, as JSON: the number, or `"inf"`/`"nan"`.
fn float(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!(crate::bench::engine::session::py_float(x))
    }
}

fn float_of(v: &Value, key: &str) -> Result<f64, String> {
    match v.get(key) {
        Some(Value::String(s)) if s == "inf" => Ok(f64::INFINITY),
        Some(Value::String(s)) if s == "nan" => Ok(f64::NAN),
        Some(x) => x.as_f64().ok_or_else(|| format!("{key:?} is not a number")),
        None => Err(format!("{key:?} missing")),
    }
}

fn u64_of(v: &Value, key: &str) -> Result<u64, String> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{key:?} missing or not a non-negative integer"))
}

fn str_of<'a>(v: &'a Value, key: &str) -> Result<&'a str, String> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{key:?} missing or not a string"))
}

fn opt_u64(v: &Value, key: &str) -> Result<Option<u64>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => u64_of(v, key).map(Some),
    }
}

impl ShardBlock {
    pub fn to_json(&self) -> Value {
        let s = &self.settings;
        let mut block = json!({
            "format": FORMAT,
            "record": RECORD,
            "seed": self.seed,
            "model": self.model,
            "settings": {
                "tag": s.tag,
                "backend": s.backend,
                "dataset_name": s.dataset_name,
                "request_rate": s.request_rate.map_or(json!("trace"), float),
                "max_concurrency": s.max_concurrency,
                "sharegpt_output_len": s.sharegpt_output_len,
                "random_input_len": s.random_input_len,
                "random_output_len": s.random_output_len,
                "random_range_ratio": float(s.random_range_ratio),
                "num_prompts": s.num_prompts,
            },
            "accept_length": self.accept_length.map(float),
            "turns": self.turns,
            "requests": self.requests.iter().map(|r| json!({
                "index": r.index,
                "round": r.round,
                "success": r.output.success,
                "start_ns": r.output.start_ns,
                "ttft_s": float(r.output.ttft_s),
                "itl_s": r.output.itl_s.iter().map(|&x| float(x)).collect::<Vec<_>>(),
                "latency_s": float(r.output.latency_s),
                "prompt_len": r.output.prompt_len,
                "output_len": r.output.output_len,
                "retokenized": r.retokenized,
                "error": r.output.error,
            })).collect::<Vec<_>>(),
        });
        self.ran.write(&mut block);
        block
    }

    /// Reads a block back; an error names what is missing or malformed.
    pub fn from_json(v: &Value) -> Result<ShardBlock, String> {
        let format = u64_of(v, "format")?;
        if format != FORMAT {
            return Err(format!(
                "format {format}, this llmspeed reads format {FORMAT}"
            ));
        }
        if v.get("record").and_then(Value::as_str) != Some(RECORD) {
            return Err(format!("not a {RECORD} shard block"));
        }
        let s = v.get("settings").ok_or("\"settings\" missing")?;
        let settings = Settings {
            tag: s.get("tag").and_then(Value::as_str).map(str::to_string),
            backend: str_of(s, "backend")?.to_string(),
            dataset_name: str_of(s, "dataset_name")?.to_string(),
            request_rate: match s.get("request_rate") {
                Some(Value::String(t)) if t == "trace" => None,
                _ => Some(float_of(s, "request_rate")?),
            },
            max_concurrency: opt_u64(s, "max_concurrency")?.map(|n| n as usize),
            sharegpt_output_len: opt_u64(s, "sharegpt_output_len")?.map(|n| n as u32),
            random_input_len: u64_of(s, "random_input_len")? as u32,
            random_output_len: u64_of(s, "random_output_len")? as u32,
            random_range_ratio: float_of(s, "random_range_ratio")?,
            num_prompts: u64_of(s, "num_prompts")? as usize,
        };
        let requests = v
            .get("requests")
            .and_then(Value::as_array)
            .ok_or("\"requests\" missing or not a list")?
            .iter()
            .map(request_of)
            .collect::<Result<Vec<_>, String>>()?;
        Ok(ShardBlock {
            ran: Ran::read(v)?,
            seed: u64_of(v, "seed")?,
            model: str_of(v, "model")?.to_string(),
            settings,
            accept_length: match v.get("accept_length") {
                None | Some(Value::Null) => None,
                Some(_) => Some(float_of(v, "accept_length")?),
            },
            // Blocks written before multi-turn rows have neither key: one request a prompt.
            turns: match opt_u64(v, "turns")? {
                None => 1,
                Some(n) => u32::try_from(n)
                    .ok()
                    .filter(|&t| t >= 1)
                    .ok_or_else(|| format!("\"turns\" is {n}, not a number of turns"))?,
            },
            requests,
        })
    }
}

fn request_of(r: &Value) -> Result<ShardRequest, String> {
    let itl_s = r
        .get("itl_s")
        .and_then(Value::as_array)
        .ok_or("a request's \"itl_s\" missing")?
        .iter()
        .map(|x| match x {
            Value::String(s) if s == "inf" => Ok(f64::INFINITY),
            x => x
                .as_f64()
                .ok_or_else(|| "an ITL is not a number".to_string()),
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(ShardRequest {
        index: u64_of(r, "index")? as usize,
        round: opt_u64(r, "round")?.unwrap_or(0) as usize,
        retokenized: u64_of(r, "retokenized")?,
        output: RequestOutput {
            success: r
                .get("success")
                .and_then(Value::as_bool)
                .ok_or("a request's \"success\" missing")?,
            start_ns: u64_of(r, "start_ns")?,
            ttft_s: float_of(r, "ttft_s")?,
            itl_s,
            latency_s: float_of(r, "latency_s")?,
            prompt_len: u64_of(r, "prompt_len")?,
            output_len: u64_of(r, "output_len")?,
            error: str_of(r, "error")?.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::shard::Shard;

    fn block() -> ShardBlock {
        ShardBlock {
            ran: Ran {
                shard: Shard { index: 1, count: 3 },
                start_at_unix_ns: Some(1_796_050_800_000_000_000),
                start_unix_ns: 1_796_050_800_000_123_456,
                end_unix_ns: 1_796_050_801_500_000_000,
            },
            seed: 7,
            model: "m".into(),
            settings: Settings {
                tag: Some("t".into()),
                backend: "sglang".into(),
                dataset_name: "random".into(),
                request_rate: Some(f64::INFINITY),
                max_concurrency: Some(4),
                sharegpt_output_len: None,
                random_input_len: 32,
                random_output_len: 8,
                random_range_ratio: 0.25,
                num_prompts: 9,
            },
            accept_length: None,
            turns: 2,
            requests: vec![
                ShardRequest {
                    index: 1,
                    round: 1,
                    retokenized: 7,
                    output: RequestOutput {
                        success: true,
                        start_ns: 12_345,
                        ttft_s: 0.012_345_678_9,
                        itl_s: vec![0.002, 0.001_999_999_7],
                        latency_s: 0.1 + 0.2,
                        prompt_len: 32,
                        output_len: 8,
                        error: String::new(),
                    },
                },
                ShardRequest {
                    index: 4,
                    round: 0,
                    retokenized: 0,
                    output: RequestOutput {
                        error: "HTTP 500".into(),
                        ..RequestOutput::default()
                    },
                },
            ],
        }
    }

    /// Every value comes back bit for bit through the JSON text, so the merge recomputes
    /// exactly what the shard would have.
    #[test]
    fn a_block_reads_back_exactly() {
        let b = block();
        let text = serde_json::to_string(&b.to_json()).unwrap();
        let back = ShardBlock::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, b);
        let mut trace = b.clone();
        trace.settings.request_rate = None;
        let back = ShardBlock::from_json(&trace.to_json()).unwrap();
        assert_eq!(back.settings.request_rate, None);
        // A block from before multi-turn rows: one request a prompt.
        let mut old = b.to_json();
        old.as_object_mut().unwrap().remove("turns");
        for r in old["requests"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("round");
        }
        let back = ShardBlock::from_json(&old).unwrap();
        assert_eq!(back.turns, 1);
        assert!(back.requests.iter().all(|r| r.round == 0));
    }

    #[test]
    fn other_blocks_are_refused() {
        let mut v = block().to_json();
        v["format"] = json!(2);
        assert!(ShardBlock::from_json(&v).unwrap_err().contains("format 2"));
        let mut v = block().to_json();
        v["record"] = json!("vllm");
        assert!(ShardBlock::from_json(&v).is_err());
        let mut v = block().to_json();
        v["requests"][0]["ttft_s"] = json!("x");
        assert!(ShardBlock::from_json(&v).is_err());
        let mut v = block().to_json();
        v["turns"] = json!(0);
        assert!(ShardBlock::from_json(&v).unwrap_err().contains("turns"));
    }
}
