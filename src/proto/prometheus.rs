//! Parses the Prometheus text exposition format (`GET /metrics`) into flat samples, for the
//! server probe, live sampling during a run and the simulated server's tests.
//!
//! Not on the per-token path: allocating a `String` per name and label is fine here. It must
//! never guess: a line it cannot read is an error naming the line number, so a probe never
//! reports a number taken from a half-understood page. Comments (`# HELP`, `# TYPE`) are
//! skipped; histogram and summary series come out as plain samples (`_bucket`, `_sum`, `_count`).

use std::fmt;

/// One series value: `name{labels} value [timestamp]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    /// In page order, unescaped.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.as_str())
    }
}

/// A line that is not valid exposition text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromError {
    /// 1-based.
    pub line: usize,
    pub reason: &'static str,
}

impl fmt::Display for PromError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "metrics line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for PromError {}

/// Parses a whole page. Lines end in LF or CRLF; blank lines and comments are skipped.
pub fn parse(text: &str) -> Result<Vec<Sample>, PromError> {
    let mut out = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let trimmed = line.trim_matches(|c| c == ' ' || c == '\t');
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let sample = parse_line(trimmed).map_err(|reason| PromError {
            line: i + 1,
            reason,
        })?;
        out.push(sample);
    }
    Ok(out)
}

/// Sum of `name` over all label sets (vLLM exposes one series per `engine`); `None` when the page
/// has no such series.
pub fn sum(samples: &[Sample], name: &str) -> Option<f64> {
    find(samples, name).map(|s| s.value).reduce(|a, b| a + b)
}

/// Every series called `name`.
pub fn find<'a>(samples: &'a [Sample], name: &str) -> impl Iterator<Item = &'a Sample> {
    let name = name.to_owned();
    samples.iter().filter(move |s| s.name == name)
}

fn is_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

fn skip_blanks(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    i
}

/// `line` has no line ending and no surrounding blanks.
fn parse_line(line: &str) -> Result<Sample, &'static str> {
    let b = line.as_bytes();
    if !is_name_start(b[0]) {
        return Err("expected a metric name");
    }
    let mut i = 1;
    while i < b.len() && is_name_char(b[i]) {
        i += 1;
    }
    let name = line[..i].to_owned();
    let mut labels = Vec::new();
    let j = skip_blanks(b, i);
    if b.get(j) == Some(&b'{') {
        i = parse_labels(line, j + 1, &mut labels)?;
    }
    let rest = &line[i..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return Err("expected a blank before the value");
    }
    let mut fields = rest.split([' ', '\t']).filter(|f| !f.is_empty());
    let value = fields.next().ok_or("missing value")?;
    let value = parse_value(value).ok_or("value is not a number")?;
    if let Some(ts) = fields.next() {
        if ts.parse::<i64>().is_err() {
            return Err("timestamp is not an integer");
        }
    }
    if fields.next().is_some() {
        return Err("unexpected text after the timestamp");
    }
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// Go's `ParseFloat` forms that the format allows: decimals, exponents, `NaN`, `+Inf`, `-Inf`.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => {
            // Rust also takes "inf"/"infinity"/"nan" in any case; the format does not.
            if s.bytes()
                .any(|c| c.is_ascii_alphabetic() && c != b'e' && c != b'E')
            {
                return None;
            }
            s.parse().ok()
        }
    }
}

/// Parses `name="value",...}` starting after `{`; returns the index after `}`.
fn parse_labels(
    line: &str,
    mut i: usize,
    labels: &mut Vec<(String, String)>,
) -> Result<usize, &'static str> {
    let b = line.as_bytes();
    loop {
        i = skip_blanks(b, i);
        match b.get(i) {
            None => return Err("unterminated label set"),
            Some(b'}') => return Ok(i + 1),
            Some(&c) if is_name_start(c) && c != b':' => {}
            Some(_) => return Err("expected a label name"),
        }
        let start = i;
        while i < b.len() && is_name_char(b[i]) && b[i] != b':' {
            i += 1;
        }
        let lname = line[start..i].to_owned();
        i = skip_blanks(b, i);
        if b.get(i) != Some(&b'=') {
            return Err("expected '=' after a label name");
        }
        i = skip_blanks(b, i + 1);
        if b.get(i) != Some(&b'"') {
            return Err("expected '\"' to open a label value");
        }
        i += 1;
        let mut value = String::new();
        let mut run = i;
        loop {
            match b.get(i) {
                None => return Err("unterminated label value"),
                Some(b'"') => {
                    value.push_str(&line[run..i]);
                    i += 1;
                    break;
                }
                Some(b'\\') => {
                    value.push_str(&line[run..i]);
                    match b.get(i + 1) {
                        Some(b'\\') => value.push('\\'),
                        Some(b'"') => value.push('"'),
                        Some(b'n') => value.push('\n'),
                        _ => return Err("invalid escape in a label value"),
                    }
                    i += 2;
                    run = i;
                }
                Some(_) => i += 1,
            }
        }
        labels.push((lname, value));
        i = skip_blanks(b, i);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => return Ok(i + 1),
            _ => return Err("expected ',' or '}' after a label value"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }

    /// Compares NaN as equal to NaN so pages with `NaN` can be checked.
    fn check(input: &str, expected: Result<Vec<Sample>, PromError>) {
        let got = parse(input);
        match (&got, &expected) {
            (Ok(g), Ok(e)) => {
                assert_eq!(g.len(), e.len(), "sample count for {input:?}: {g:#?}");
                for (g, e) in g.iter().zip(e) {
                    assert_eq!(g.name, e.name);
                    assert_eq!(g.labels, e.labels);
                    assert!(
                        g.value == e.value || (g.value.is_nan() && e.value.is_nan()),
                        "{}: {} != {}",
                        g.name,
                        g.value,
                        e.value
                    );
                }
            }
            _ => assert_eq!(got, expected, "{input:?}"),
        }
    }

    fn err(line: usize, reason: &'static str) -> Result<Vec<Sample>, PromError> {
        Err(PromError { line, reason })
    }

    const VLLM: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0421
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 123456.0
vllm:prompt_tokens_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0e3
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 98765.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5000.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4000.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",kv_cache_max_concurrency="14.43",kv_cache_size_tokens="1891232",num_cpu_blocks="None",num_gpu_blocks="118202",prefix_caching_hash_algo="sha256"} 1.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 15.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 15.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.25
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
process_start_time_seconds 1.76e+09
"#;

    #[test]
    fn vllm_page() {
        let got = parse(VLLM).expect("vLLM page parses");
        assert_eq!(got.len(), 21);
        assert_eq!(sum(&got, "vllm:num_requests_running"), Some(7.0));
        assert_eq!(sum(&got, "vllm:num_requests_waiting"), Some(1.0));
        assert_eq!(sum(&got, "vllm:prompt_tokens_total"), Some(124456.0));
        assert_eq!(sum(&got, "vllm:gpu_cache_usage_perc"), None);
        assert_eq!(sum(&got, "process_start_time_seconds"), Some(1.76e9));
        let info = find(&got, "vllm:cache_config_info")
            .next()
            .expect("cache info");
        assert_eq!(info.label("kv_cache_size_tokens"), Some("1891232"));
        assert_eq!(info.label("num_gpu_blocks"), Some("118202"));
        assert_eq!(info.label("block_size"), Some("16"));
        assert_eq!(info.label("missing"), None);
        assert_eq!(info.value, 1.0);
        let inf = find(&got, "vllm:time_to_first_token_seconds_bucket")
            .find(|s| s.label("le") == Some("+Inf"))
            .expect("+Inf bucket");
        assert_eq!(inf.value, 15.0);
        assert_eq!(find(&got, "vllm:request_success_total").count(), 2);
    }

    #[test]
    fn sglang_page() {
        let page = "# HELP sglang:num_running_reqs The number of running requests.\r\n\
# TYPE sglang:num_running_reqs gauge\r\n\
sglang:num_running_reqs{model_name=\"Qwen/Qwen3-8B\"} 32.0\r\n\
sglang:num_queue_reqs{model_name=\"Qwen/Qwen3-8B\"} 0.0\r\n\
sglang:token_usage{model_name=\"Qwen/Qwen3-8B\"} 0.61\r\n\
sglang:max_total_num_tokens{model_name=\"Qwen/Qwen3-8B\"} 1048576.0\r\n\
sglang:generation_tokens_total{model_name=\"Qwen/Qwen3-8B\"} 4.2e+06\r\n\
\r\n";
        let m = [("model_name", "Qwen/Qwen3-8B")];
        check(
            page,
            Ok(vec![
                s("sglang:num_running_reqs", &m, 32.0),
                s("sglang:num_queue_reqs", &m, 0.0),
                s("sglang:token_usage", &m, 0.61),
                s("sglang:max_total_num_tokens", &m, 1048576.0),
                s("sglang:generation_tokens_total", &m, 4.2e6),
            ]),
        );
    }

    #[test]
    fn llamacpp_page() {
        let page = "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n\
# TYPE llamacpp:prompt_tokens_total counter\n\
llamacpp:prompt_tokens_total 3024\n\
# TYPE llamacpp:tokens_predicted_total counter\n\
llamacpp:tokens_predicted_total 512\n\
# TYPE llamacpp:requests_processing gauge\n\
llamacpp:requests_processing 4\n\
llamacpp:requests_deferred 2\n\
llamacpp:predicted_tokens_seconds 41.7\n";
        check(
            page,
            Ok(vec![
                s("llamacpp:prompt_tokens_total", &[], 3024.0),
                s("llamacpp:tokens_predicted_total", &[], 512.0),
                s("llamacpp:requests_processing", &[], 4.0),
                s("llamacpp:requests_deferred", &[], 2.0),
                s("llamacpp:predicted_tokens_seconds", &[], 41.7),
            ]),
        );
    }

    #[test]
    fn values_labels_and_timestamps() {
        check(
            "a NaN\nb +Inf\nc -Inf 1700000000000\nd 1e-3 -5\n\n  e{} 2\nf { x = \"1\" , } 3\n",
            Ok(vec![
                s("a", &[], f64::NAN),
                s("b", &[], f64::INFINITY),
                s("c", &[], f64::NEG_INFINITY),
                s("d", &[], 1e-3),
                s("e", &[], 2.0),
                s("f", &[("x", "1")], 3.0),
            ]),
        );
        check(
            r#"tgi_queue_size{path="C:\\models\\x",q="say \"hi\"",nl="a\nb",u="é"} 0"#,
            Ok(vec![s(
                "tgi_queue_size",
                &[
                    ("path", r"C:\models\x"),
                    ("q", "say \"hi\""),
                    ("nl", "a\nb"),
                    ("u", "é"),
                ],
                0.0,
            )]),
        );
        check("", Ok(vec![]));
        check("# only a comment\n#\n", Ok(vec![]));
    }

    fn escape_label(v: &str) -> String {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    }

    proptest::proptest! {
        /// Any page we render from samples parses back to the same samples, whatever the
        /// comments, blank lines, line endings, timestamps and label contents.
        #[test]
        fn rendered_pages_round_trip(
            samples in proptest::collection::vec((
                "[a-zA-Z_:][a-zA-Z0-9_:]{0,12}",
                proptest::collection::vec(("[a-zA-Z_][a-zA-Z0-9_]{0,6}", "\\PC{0,8}|[\\\\\"\n]{0,4}"), 0..4),
                proptest::num::f64::NORMAL | proptest::num::f64::ZERO,
                proptest::option::of(proptest::num::i64::ANY),
            ), 0..8),
            crlf in proptest::bool::ANY,
            comments in proptest::bool::ANY,
        ) {
            let eol = if crlf { "\r\n" } else { "\n" };
            let mut page = String::new();
            for (name, labels, value, ts) in &samples {
                if comments {
                    page.push_str(&format!("# HELP {name} a help text{eol}# TYPE {name} gauge{eol}{eol}"));
                }
                page.push_str(name);
                if !labels.is_empty() {
                    let ls: Vec<String> = labels
                        .iter()
                        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                        .collect();
                    page.push_str(&format!("{{{}}}", ls.join(",")));
                }
                page.push_str(&format!(" {value:?}"));
                if let Some(ts) = ts {
                    page.push_str(&format!(" {ts}"));
                }
                page.push_str(eol);
            }
            let want: Vec<Sample> = samples
                .iter()
                .map(|(name, labels, value, _)| Sample {
                    name: name.clone(),
                    labels: labels.clone(),
                    value: *value,
                })
                .collect();
            proptest::prop_assert_eq!(parse(&page), Ok(want), "{}", page);
        }
    }

    #[test]
    fn malformed_lines_name_the_line() {
        check("ok 1\n9bad 1\n", err(2, "expected a metric name"));
        check("a\n", err(1, "missing value"));
        check("a x\n", err(1, "value is not a number"));
        check("a inf\n", err(1, "value is not a number"));
        check("a 1 2 3\n", err(1, "unexpected text after the timestamp"));
        check("a 1 1.5\n", err(1, "timestamp is not an integer"));
        check(
            "a{b=\"1\" 2\n",
            err(1, "expected ',' or '}' after a label value"),
        );
        check("a{b=\"1 2\n", err(1, "unterminated label value"));
        check("a{b=1} 2\n", err(1, "expected '\"' to open a label value"));
        check("a{b} 2\n", err(1, "expected '=' after a label name"));
        check("a{=\"x\"} 2\n", err(1, "expected a label name"));
        check(
            "a{b=\"\\t\"} 2\n",
            err(1, "invalid escape in a label value"),
        );
        check(
            "a{b=\"x\"",
            err(1, "expected ',' or '}' after a label value"),
        );
        check("a{", err(1, "unterminated label set"));
        check("a{b=\"x\"}2\n", err(1, "expected a blank before the value"));
        check("\n\n# c\nx 1\nx{} y\n", err(5, "value is not a number"));
    }
}
