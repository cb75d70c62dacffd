//! `bench serve --plot-timeline`: one self-contained HTML page, each request a bar from its
//! send to its last token, the prefill part (TTFT) in one colour and every gap between tokens
//! coloured by `--timeline-itl-thresholds` (vLLM's three classes: below the first threshold,
//! between the two, at or above the second). Inline SVG with `<title>` tooltips: no script, no
//! network; the run's header (`report::html::run_header`) above it. Pure: the caller writes the
//! string where vLLM does (`<result>.timeline.html`).

use crate::bench::vllm::result::Detailed;
use crate::report::header::RunHeader;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// One request on the timeline, in seconds from the run's start.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub start_s: f64,
    /// `None`: the request failed (drawn as a grey mark at its start).
    pub ttft_s: Option<f64>,
    pub itls_s: Vec<f64>,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
}

impl Request {
    /// Its last token: the first token plus every gap after it.
    pub fn end_s(&self) -> f64 {
        self.start_s + self.ttft_s.unwrap_or(0.0) + self.itls_s.iter().sum::<f64>()
    }
}

/// The requests of a run, from the per-request lists every run keeps (saved or not).
pub fn requests(d: &Detailed) -> Vec<Request> {
    (0..d.start_times.len())
        .map(|i| {
            let failed = d.errors.get(i).is_some_and(|e| !e.is_empty());
            Request {
                start_s: d.start_times[i],
                ttft_s: (!failed).then(|| d.ttfts.get(i).copied().unwrap_or(0.0)),
                itls_s: d.itls.get(i).cloned().unwrap_or_default(),
                prompt_tokens: d.input_lens.get(i).copied().unwrap_or(0),
                output_tokens: d.output_lens.get(i).copied().unwrap_or(0),
            }
        })
        .collect()
}

/// vLLM's file name: the result file's extension replaced by `.timeline.html`.
pub fn path_for(result: &Path) -> PathBuf {
    result.with_extension("timeline.html")
}

/// The class of a gap: 0 fast, 1 slow, 2 slowest.
fn class(itl_s: f64, thresholds_s: [f64; 2]) -> usize {
    if itl_s < thresholds_s[0] {
        0
    } else if itl_s < thresholds_s[1] {
        1
    } else {
        2
    }
}

const TTFT_COLOUR: &str = "#6b8fd6";
const ITL_COLOURS: [&str; 3] = ["#3aa655", "#f0a030", "#d64545"];
const FAILED_COLOUR: &str = "#999999";

/// Runs of consecutive gaps of one class, as (from_s, to_s, class): a long stream of fast
/// tokens is one rectangle, not thousands.
fn segments(r: &Request, thresholds_s: [f64; 2]) -> Vec<(f64, f64, usize)> {
    let mut out: Vec<(f64, f64, usize)> = Vec::new();
    let mut t = r.start_s + r.ttft_s.unwrap_or(0.0);
    for &g in &r.itls_s {
        let k = class(g, thresholds_s);
        match out.last_mut() {
            Some(last) if last.2 == k => last.1 = t + g,
            _ => out.push((t, t + g, k)),
        }
        t += g;
    }
    out
}

fn ms(x: f64) -> String {
    format!("{:.0}", x)
}

/// The page, opened by the run's header. `thresholds_ms` as given on the command line.
pub fn render(reqs: &[Request], thresholds_ms: [f64; 2], header: &RunHeader) -> String {
    let title = format!("Request timeline · {}", header.title());
    let th_s = [thresholds_ms[0] / 1e3, thresholds_ms[1] / 1e3];
    let span = reqs
        .iter()
        .map(Request::end_s)
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let (left, width, row, top) = (60.0, 1000.0, 8.0, 30.0);
    let height = top + row * reqs.len() as f64 + 10.0;
    let x = |t: f64| left + t / span * width;
    let mut s = String::with_capacity(4096 + reqs.len() * 200);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
<style>{}.legend span{{display:inline-block;margin-right:1.2em}}\
.legend i{{display:inline-block;width:1em;height:.8em;margin-right:.3em}}</style></head><body>\n\
<h1>{}</h1>\n{}\n<p>Each row is one request, from when it was sent to its last token; \
the first part is the time to first token, then each gap between tokens is coloured by \
its inter-token latency. {} requests over {:.2} s.</p>\n<p class=\"legend\">\
<span><i style=\"background:{TTFT_COLOUR}\"></i>TTFT</span>\
<span><i style=\"background:{}\"></i>ITL &lt; {} ms</span>\
<span><i style=\"background:{}\"></i>{} ms &le; ITL &lt; {} ms</span>\
<span><i style=\"background:{}\"></i>ITL &ge; {} ms</span>\
<span><i style=\"background:{FAILED_COLOUR}\"></i>failed</span></p>\n",
        escape(&title),
        crate::report::html::style(),
        escape(&title),
        crate::report::html::run_header(header, "", ""),
        reqs.len(),
        span,
        ITL_COLOURS[0],
        ms(thresholds_ms[0]),
        ITL_COLOURS[1],
        ms(thresholds_ms[0]),
        ms(thresholds_ms[1]),
        ITL_COLOURS[2],
        ms(thresholds_ms[1]),
    );
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{height:.0}\" font-size=\"11\">",
        left + width + 20.0
    );
    // Time axis: five ticks across the run.
    for i in 0..=5 {
        let t = span * i as f64 / 5.0;
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{height:.0}\" stroke=\"#ddd\"/>\
<text x=\"{0:.1}\" y=\"{2}\" text-anchor=\"middle\">{t:.2} s</text>",
            x(t),
            top - 4.0,
            top - 8.0
        );
    }
    for (i, r) in reqs.iter().enumerate() {
        let y = top + row * i as f64;
        let _ = write!(
            s,
            "<g class=\"req\"><title>request {i}: sent at {:.3} s, ",
            r.start_s
        );
        match r.ttft_s {
            Some(t) => {
                let _ = write!(
                    s,
                    "TTFT {:.1} ms, {} prompt tokens, {} output tokens, last token at {:.3} s</title>",
                    t * 1e3,
                    r.prompt_tokens,
                    r.output_tokens,
                    r.end_s()
                );
                let _ = write!(
                    s,
                    "<rect x=\"{:.2}\" y=\"{y:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"{TTFT_COLOUR}\"/>",
                    x(r.start_s),
                    (x(r.start_s + t) - x(r.start_s)).max(0.5),
                    row - 1.0
                );
                for (a, b, k) in segments(r, th_s) {
                    let _ = write!(
                        s,
                        "<rect x=\"{:.2}\" y=\"{y:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"{}\"/>",
                        x(a),
                        (x(b) - x(a)).max(0.5),
                        row - 1.0,
                        ITL_COLOURS[k]
                    );
                }
            }
            None => {
                let _ = write!(
                    s,
                    "failed</title><rect x=\"{:.2}\" y=\"{y:.1}\" width=\"2\" height=\"{:.1}\" fill=\"{FAILED_COLOUR}\"/>",
                    x(r.start_s),
                    row - 1.0
                );
            }
        }
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n</body></html>\n");
    s
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(start: f64, ttft: Option<f64>, itls: &[f64]) -> Request {
        Request {
            start_s: start,
            ttft_s: ttft,
            itls_s: itls.to_vec(),
            prompt_tokens: 10,
            output_tokens: itls.len() as u64 + 1,
        }
    }

    #[test]
    fn gaps_are_classed_by_the_thresholds_and_runs_merged() {
        let th = [0.025, 0.050];
        assert_eq!(class(0.0249, th), 0);
        assert_eq!(
            class(0.025, th),
            1,
            "the first threshold belongs to the middle class"
        );
        assert_eq!(class(0.050, th), 2);
        let r = req(1.0, Some(0.5), &[0.01, 0.01, 0.03, 0.06, 0.01]);
        let seg = segments(&r, th);
        let k: Vec<usize> = seg.iter().map(|s| s.2).collect();
        assert_eq!(k, [0, 1, 2, 0]);
        // The first run covers both fast gaps, from the first token.
        assert!((seg[0].0 - 1.5).abs() < 1e-12 && (seg[0].1 - 1.52).abs() < 1e-12);
        assert!((r.end_s() - 1.62).abs() < 1e-12);
    }

    #[test]
    fn one_bar_per_request_and_nothing_external() {
        let reqs = vec![
            req(0.0, Some(0.1), &[0.01, 0.02]),
            req(0.2, None, &[]),
            req(0.3, Some(0.05), &[0.07]),
        ];
        let header = RunHeader {
            kind: "bench serve".into(),
            model: "run <1>".into(),
            ..RunHeader::default()
        };
        let html = render(&reqs, [25.0, 50.0], &header);
        assert_eq!(html.matches("<g class=\"req\">").count(), 3);
        assert!(html.contains("run &lt;1&gt;"));
        assert!(html.contains("ITL &lt; 25 ms") && html.contains("ITL &ge; 50 ms"));
        assert!(html.contains(&format!("fill=\"{}\"", ITL_COLOURS[2])));
        assert!(html.contains(&format!("fill=\"{FAILED_COLOUR}\"")));
        // The only URL is the SVG namespace, which browsers never fetch.
        assert_eq!(
            html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "")
                .matches("http")
                .count(),
            0
        );
    }

    #[test]
    fn the_file_sits_next_to_the_result() {
        assert_eq!(
            path_for(Path::new("/r/vllm-1qps.json")),
            PathBuf::from("/r/vllm-1qps.timeline.html")
        );
    }
}
