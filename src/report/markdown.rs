//! `report.md`, laid out like the seed report users already publish: a header (model, GPU,
//! engine, run settings, launch command), the prefill table, the decode grid of total tok/s
//! with statuses, the all-measurements table, notes on loops and failures, and a legend.
//!
//! It prints what the model holds, formatted by `report::format`; it never computes a figure
//! or a verdict. Lines for metadata the run did not have are left out rather than shown empty.

use crate::report::format::{
    group_digits, hardware_text, ms, one_decimal, opt, rate, seconds, MISSING,
};
use crate::report::model::{
    DecodeCell, ErrorMessage, Hardware, MatrixReport, Metadata, PrefillMode, PrefillRow,
    PromptTokens, Settings,
};
use crate::report::status::{CapacityReason, CellStatus};
use std::io::{self, Write};

/// Write the markdown report.
pub fn write(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    header(w, r)?;
    prefill(w, r)?;
    decode_grid(w, r)?;
    slo_section(w, r)?;
    all_measurements(w, r)?;
    notes(w, r)?;
    legend(w, r)
}

/// Table cells must not break the table.
fn cell_text(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn kv_line(w: &mut impl Write, name: &str, value: Option<&str>) -> io::Result<()> {
    match value {
        Some(v) if !v.is_empty() => writeln!(w, "- {name}: {}", v.replace(['\n', '\r'], " ")),
        _ => Ok(()),
    }
}

/// The measured machine panel: the client machine's CPU, memory, OS and kernel, and its GPUs
/// with the tool that listed them (or why none were).
fn machine_lines(w: &mut impl Write, h: &Hardware) -> io::Result<()> {
    if let Some(c) = &h.client {
        let cpu = match (&c.cpu_model, c.cpu_logical) {
            (Some(m), Some(n)) => Some(format!("{m}, {n} logical CPUs")),
            (Some(m), None) => Some(m.clone()),
            (None, Some(n)) => Some(format!("{n} logical CPUs (model not reported)")),
            (None, None) => None,
        };
        let cpu = match (cpu, &c.arch) {
            (Some(s), Some(a)) => Some(format!("{s}, {a}")),
            (s, _) => s,
        };
        kv_line(w, "Client CPU", cpu.as_deref())?;
        kv_line(
            w,
            "Client memory",
            c.memory_gib.map(|g| format!("{g:.1} GiB")).as_deref(),
        )?;
        let os = match (&c.os, &c.kernel) {
            (Some(o), Some(k)) => Some(format!("{o}, kernel {k}")),
            (o, k) => o.clone().or_else(|| k.clone()),
        };
        kv_line(w, "Client OS", os.as_deref())?;
    }
    let gpus: Vec<String> = h
        .gpus
        .iter()
        .map(|g| match g.memory_total_mib {
            Some(m) => format!("{} ({:.0} GiB)", g.name, m / 1024.0),
            None => g.name.clone(),
        })
        .collect();
    match (gpus.is_empty(), &h.gpu_source) {
        (false, Some(src)) => kv_line(w, &format!("Client GPUs ({src})"), Some(&gpus.join("; ")))?,
        (true, Some(src)) => kv_line(w, "Client GPUs", Some(src))?,
        _ => {}
    }
    Ok(())
}

fn model_display(r: &MatrixReport) -> &str {
    let m = &r.metadata.model;
    let full = m.name.as_deref().unwrap_or(&m.id);
    full.rsplit('/').next().unwrap_or(full)
}

/// `8K–251K` from labels in order.
fn span(labels: &[&str]) -> String {
    match labels {
        [] => MISSING.to_string(),
        [one] => one.to_string(),
        [first, .., last] => format!("{first}–{last}"),
    }
}

fn header(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    title(w, r)?;
    let md = &r.metadata;
    hardware_section(w, &md.hardware)?;
    engine_section(w, md)?;
    run_section(w, md)?;
    launch_command(w, md.launch_command.as_deref())
}

/// The title: the model and GPU, one line summing up the run, and whether it stopped early.
fn title(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    let md = &r.metadata;
    writeln!(w, "# Speed test matrix")?;
    writeln!(w)?;
    let gpu = match (&md.hardware.gpu, md.hardware.vram_gb) {
        (Some(g), Some(v)) => Some(format!("{g} {}GB", trim_float(v))),
        (Some(g), None) => Some(g.clone()),
        (None, _) => md.hardware.description.clone(),
    };
    match gpu {
        Some(g) => writeln!(w, "**{} on {}**", model_display(r), g)?,
        None => writeln!(w, "**{}**", model_display(r))?,
    }
    writeln!(w)?;
    writeln!(w, "{}", summary(r).join(" · "))?;
    if let Some(why) = &md.interrupted {
        writeln!(w)?;
        writeln!(
            w,
            "**Partial report:** the run stopped early ({}); cells marked Pending were not run, a cell marked interrupted was measured for less than its window.",
            cell_text(why)
        )?;
    }
    Ok(())
}

/// The engine, its version and quantization, the grid's spans and the prefill contexts.
fn summary(r: &MatrixReport) -> Vec<String> {
    let md = &r.metadata;
    let contexts: Vec<&str> = row_labels(r);
    let conc = &md.settings.concurrency;
    let mut summary: Vec<String> = [
        md.engine.name.clone(),
        md.engine.version.clone(),
        md.engine.quantization.clone(),
    ]
    .into_iter()
    .flatten()
    .collect();
    summary.push(format!(
        "{} contexts ({}) × {} concurrency levels ({})",
        contexts.len(),
        span(&contexts),
        conc.len(),
        match (conc.first(), conc.last()) {
            (Some(a), Some(b)) if a != b => format!("{a}–{b}"),
            (Some(a), _) => a.to_string(),
            _ => MISSING.to_string(),
        }
    ));
    let prefill: Vec<&str> = r.prefill.iter().map(|p| p.context_label.as_str()).collect();
    if !prefill.is_empty() {
        summary.push(format!("prefill at {}", prefill.join(", ")));
    }
    summary
}

/// What the user told of the hardware, then what was measured on the client machine.
fn hardware_section(w: &mut impl Write, h: &Hardware) -> io::Result<()> {
    writeln!(w)?;
    writeln!(w, "## Hardware")?;
    writeln!(w)?;
    kv_line(w, "Type", h.kind.as_deref())?;
    kv_line(w, "GPU", h.gpu.as_deref())?;
    kv_line(
        w,
        "VRAM",
        h.vram_gb
            .map(|v| format!("{} GB", trim_float(v)))
            .as_deref(),
    )?;
    let told = h.kind.is_some() || h.gpu.is_some() || h.vram_gb.is_some();
    match &h.description {
        Some(d) => kv_line(w, "Hardware", Some(d))?,
        // Nothing told: what was measured (or that nothing was), never the OS as hardware.
        None if !told => kv_line(w, "Hardware", Some(&hardware_text(h)))?,
        None => {}
    }
    machine_lines(w, h)
}

/// The engine as told and its limits as probed.
fn engine_section(w: &mut impl Write, md: &Metadata) -> io::Result<()> {
    writeln!(w)?;
    writeln!(w, "## Engine")?;
    writeln!(w)?;
    let e = &md.engine;
    kv_line(w, "Engine", e.name.as_deref())?;
    kv_line(w, "Version", e.version.as_deref())?;
    kv_line(w, "Quantization", e.quantization.as_deref())?;
    kv_line(w, "Backend", e.backend.as_deref())?;
    kv_line(w, "Repository", e.repository.as_deref())?;
    kv_line(w, "Build", e.build.as_deref())?;
    kv_line(w, "Commit", e.commit.as_deref())?;
    let l = &md.server_limits;
    kv_line(
        w,
        "Max model length",
        l.max_model_len
            .map(|m| format!("{} tokens", group_digits(m)))
            .as_deref(),
    )?;
    let kv = match (l.kv_cache_tokens, l.kv_cache_source) {
        (Some(t), Some(s)) => format!("{} tokens ({})", group_digits(t), s.describe()),
        (Some(t), None) => format!("{} tokens", group_digits(t)),
        (None, _) => "unknown (no cell marked Over capacity)".to_string(),
    };
    kv_line(w, "KV cache", Some(&kv))?;
    kv_line(
        w,
        "Running limit",
        l.max_running_requests
            .map(|m| format!("{} requests", group_digits(m)))
            .as_deref(),
    )
}

/// The model, server, tool and the run's settings.
fn run_section(w: &mut impl Write, md: &Metadata) -> io::Result<()> {
    writeln!(w)?;
    writeln!(w, "## Run")?;
    writeln!(w)?;
    let s = &md.settings;
    kv_line(w, "Served model", Some(&md.model.id))?;
    if md.model.name.as_deref() != Some(md.model.id.as_str()) {
        kv_line(w, "Model", md.model.name.as_deref())?;
    }
    kv_line(w, "Revision", md.model.revision.as_deref())?;
    kv_line(w, "Server", md.base_url.as_deref())?;
    kv_line(
        w,
        "Benchmark tool",
        Some(&format!("{} v{}", md.tool, md.tool_version)),
    )?;
    kv_line(w, "Date", Some(&md.date))?;
    kv_line(w, "Decode test", Some("Fixed duration"))?;
    kv_line(w, "Prefill mode", Some(&prefill_mode(s)))?;
    kv_line(w, "Time per measurement", Some(&seconds(s.duration_s)))?;
    kv_line(
        w,
        "Max output",
        Some(&format!(
            "{} tokens{}",
            group_digits(s.max_tokens),
            if s.ignore_eos { " (ignore_eos)" } else { "" }
        )),
    )?;
    kv_line(w, "Prompts", Some(&prompts(s)))?;
    if let Some(i) = &s.images {
        kv_line(w, "Images", Some(&images_text(i)))?;
    }
    if s.prefill_samples > 1 {
        kv_line(
            w,
            "Prefill samples",
            Some(&format!("{} per context (median)", s.prefill_samples)),
        )?;
    }
    kv_line(w, "Notes", md.notes.as_deref())
}

/// What the scouts did, from the settings: not a fixed phrase.
fn prefill_mode(s: &Settings) -> String {
    match s.prefill_mode {
        PrefillMode::DuringDecodeWarmup => format!(
            "max_tokens=1 requests before each context's decode cells, median of {} per context",
            s.prefill_samples
        ),
        PrefillMode::Off => "Not measured".into(),
    }
}

/// `matrix --images`: what every prompt carried and the tokens it took of the context.
pub(crate) fn images_text(i: &crate::report::ImageSettings) -> String {
    let tokens = match i.image_tokens_per_prompt {
        Some(t) => format!(
            "{} prompt tokens of every context, as the server counts them; the text is the rest",
            group_digits(t)
        ),
        None => "their prompt tokens not measured".into(),
    };
    format!(
        "{} × {}x{} JPEG per prompt (new ones for each prefill sample, one set shared by a context's decode cells), {tokens}",
        i.per_prompt, i.width, i.height
    )
}

/// The endpoint, how prompts were sized, and the seed.
fn prompts(s: &Settings) -> String {
    format!(
        "{}, {}, seed {}",
        if s.endpoint == "chat" {
            "chat completions (three turns)"
        } else {
            "completions"
        },
        match s.prompt_tokens {
            PromptTokens::TokenIds => "token ids (exact)",
            PromptTokens::TokenizeEndpoint => "sized with the server's tokenize endpoint",
            PromptTokens::LocalTokenizer => "sized with a local tokenizer",
            PromptTokens::UsageEstimate => "sized from usage.prompt_tokens (approximate)",
        },
        s.seed
    )
}

/// The server's launch command, verbatim, where the user gave it.
fn launch_command(w: &mut impl Write, cmd: Option<&str>) -> io::Result<()> {
    let Some(cmd) = cmd else { return Ok(()) };
    writeln!(w)?;
    writeln!(w, "## Launch command")?;
    writeln!(w)?;
    // A fence longer than any backtick run inside, so the command prints verbatim.
    let longest = cmd.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    writeln!(w, "{fence}")?;
    writeln!(w, "{cmd}")?;
    writeln!(w, "{fence}")
}

/// `96.0` -> `96`, `47.5` -> `47.5`.
fn trim_float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Decode row labels in report order (first appearance).
pub(crate) fn row_labels(r: &MatrixReport) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for c in &r.decode {
        if out.last() != Some(&c.context_label.as_str()) && !out.contains(&c.context_label.as_str())
        {
            out.push(&c.context_label);
        }
    }
    out
}

fn prefill(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    if r.prefill.is_empty() {
        return Ok(());
    }
    writeln!(w)?;
    writeln!(w, "## Prefill")?;
    writeln!(w)?;
    writeln!(
        w,
        "Prompt tok/s by context length (cold prompt, `max_tokens: 1`)."
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "| Context | Prompt tokens | Prefill tok/s | TTFT | Samples | Status |"
    )?;
    writeln!(w, "|---|---:|---:|---:|---:|---|")?;
    for p in &r.prefill {
        writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} |",
            cell_text(&p.context_label),
            opt(p.prompt_tokens, group_digits),
            opt(p.prefill_tok_per_s, rate),
            opt(p.ttft_ms, ms),
            p.samples,
            p.status.label()
        )?;
    }
    images_section(w, r)
}

/// `matrix --images`: per measurement, the images its prompt carried and the prompt tokens
/// the server counted (images included); nothing without images.
fn images_section(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    let Some(i) = &r.metadata.settings.images else {
        return Ok(());
    };
    writeln!(w)?;
    writeln!(w, "## Images")?;
    writeln!(w)?;
    writeln!(w, "{}.", images_text(i))?;
    writeln!(w)?;
    writeln!(
        w,
        "| Measurement | Context | Concurrency | Images | Image tokens | Prompt tokens (server) |"
    )?;
    writeln!(w, "|---|---|---:|---|---:|---:|")?;
    let images = format!("{} × {}x{}", i.per_prompt, i.width, i.height);
    for p in &r.prefill {
        writeln!(
            w,
            "| Prefill (new images) | {} | 1 | {images} | {} | {} |",
            cell_text(&p.context_label),
            opt(p.image_tokens, group_digits),
            opt(p.server_prompt_tokens, group_digits),
        )?;
    }
    for c in &r.decode {
        writeln!(
            w,
            "| Decode (shared images) | {} | {} | {images} | {} | {} |",
            cell_text(&c.context_label),
            c.concurrency,
            opt(i.image_tokens_per_prompt, group_digits),
            opt(c.server_prompt_tokens, group_digits),
        )?;
    }
    Ok(())
}

/// The figures a grid cell shows: `95.7 · 446 ms TTFT`.
fn figures(c: &DecodeCell) -> Option<String> {
    let tps = c.output_tok_per_s?;
    Some(match c.ttft_ms_p50 {
        Some(t) => format!("{} · {} TTFT", rate(tps), ms(t)),
        None => rate(tps),
    })
}

fn grid_text(c: &DecodeCell) -> String {
    let text = status_text(c);
    match c.measured_s.filter(|_| c.interrupted) {
        Some(s) => format!("{text} (interrupted after {})", seconds(s)),
        None => text,
    }
}

fn status_text(c: &DecodeCell) -> String {
    match (&c.status, figures(c)) {
        (CellStatus::Valid, Some(f)) => f,
        (CellStatus::Looped, Some(f)) => format!("Looped ({f})"),
        (CellStatus::Queued, Some(f)) => format!("Queued ({f})"),
        (CellStatus::ClientBound, Some(f)) => format!("Client-bound ({f})"),
        (CellStatus::Failed(errors), _) => {
            let kinds: Vec<String> = errors.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
            if kinds.is_empty() {
                "Failed".to_string()
            } else {
                format!("Failed: {}", kinds.join(", "))
            }
        }
        (s, _) => s.label().to_string(),
    }
}

fn decode_grid(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    if r.decode.is_empty() {
        return Ok(());
    }
    let rows = row_labels(r);
    let mut cols: Vec<u64> = r.decode.iter().map(|c| c.concurrency).collect();
    cols.sort_unstable();
    cols.dedup();
    writeln!(w)?;
    writeln!(w, "## Sustained decode")?;
    writeln!(w)?;
    writeln!(
        w,
        "Total tok/s · rows are context length, columns are simultaneous requests."
    )?;
    writeln!(w)?;
    write!(w, "| Context |")?;
    for c in &cols {
        write!(w, " {c} |")?;
    }
    writeln!(w)?;
    write!(w, "|---|")?;
    for _ in &cols {
        write!(w, "---|")?;
    }
    writeln!(w)?;
    for label in rows {
        write!(w, "| {} |", cell_text(label))?;
        for &col in &cols {
            let text = r
                .decode
                .iter()
                .find(|c| c.context_label == label && c.concurrency == col)
                .map_or_else(|| MISSING.to_string(), grid_text);
            write!(w, " {} |", cell_text(&text))?;
        }
        writeln!(w)?;
    }
    writeln!(w)?;
    writeln!(
        w,
        "TTFT in the grid is the median over requests sent inside the measurement window whose first token also arrived inside it; the cells' prompt is in the server's prefix cache, so it mostly excludes prefill. Cold prefill is in the Prefill table."
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "Pictures: [decode.svg](decode.svg) (this grid as a heatmap) · [prefill.svg](prefill.svg) (prefill tok/s and TTFT per context)."
    )
}

/// `matrix --slo`: per context row, the largest concurrency within the objectives.
fn slo_section(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    let Some(t) = &r.slo else {
        return Ok(());
    };
    let opt_u = |v: Option<u64>| v.map_or_else(|| MISSING.to_string(), |v| v.to_string());
    writeln!(w)?;
    writeln!(w, "## Capacity under the SLO")?;
    writeln!(w)?;
    writeln!(
        w,
        "Objectives: {} · confidence {}% · each decode cell judged from its own samples (capacity's rule: pass, fail or not yet from a confidence interval); the answer is at the grid's resolution.",
        cell_text(&t.objectives.join(", ")),
        trim_float(t.confidence * 100.0)
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "| Context | Largest concurrency within | Smallest failing | Failed objective | Reading |"
    )?;
    writeln!(w, "|---|---|---|---|---|")?;
    for row in &t.rows {
        writeln!(
            w,
            "| {} | {} | {} | {} | {} |",
            cell_text(&row.context_label),
            opt_u(row.largest_concurrency),
            opt_u(row.smallest_failing_concurrency),
            cell_text(row.failed_objective.as_deref().unwrap_or(MISSING)),
            cell_text(&row.note)
        )?;
    }
    writeln!(w)?;
    writeln!(
        w,
        "A TTFT objective is read from the decode cells, whose prompt is in the server's prefix cache: it holds queueing and admission under that load, not a fresh prompt's prefill. `llmspeed capacity` finds the answer to one stream for a workload of fresh prompts."
    )
}

fn prefill_line(p: &PrefillRow) -> String {
    format!(
        "| Prefill | {} | 1 | {} | {} | {m} | {} | {m} | {m} | {} | {m} | {m} |",
        cell_text(&p.context_label),
        p.status.label(),
        opt(p.prefill_tok_per_s, rate),
        opt(p.ttft_ms, ms),
        p.samples,
        m = MISSING
    )
}

fn decode_line(c: &DecodeCell) -> String {
    format!(
        "| Sustained decode | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        cell_text(&c.context_label),
        c.concurrency,
        if c.interrupted {
            format!("{} (interrupted)", c.status.label())
        } else {
            c.status.label().to_string()
        },
        opt(c.output_tok_per_s, rate),
        opt(c.per_request_tok_per_s, one_decimal),
        opt(c.ttft_ms_p50, ms),
        opt(c.tbt_ms_p50, ms),
        opt(c.avg_active_requests, one_decimal),
        opt(c.completed_requests, group_digits),
        opt(c.output_tokens, group_digits),
        opt(c.measured_s, seconds),
    )
}

fn all_measurements(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    writeln!(w)?;
    writeln!(w, "## All measurements")?;
    writeln!(w)?;
    writeln!(
        w,
        "Latencies are medians. Total tok/s is output across all simultaneous requests; for prefill rows it is prompt tok/s."
    )?;
    writeln!(w)?;
    writeln!(w, "| Phase | Context | Requests at once | Status | Total tok/s | Per request tok/s | TTFT | Time between tokens | Average active requests | Completed requests | Output tokens | Measured for |")?;
    writeln!(
        w,
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    for p in &r.prefill {
        writeln!(w, "{}", prefill_line(p))?;
    }
    for c in &r.decode {
        writeln!(w, "{}", decode_line(c))?;
    }
    Ok(())
}

fn notes(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    let mut lines: Vec<String> = Vec::new();
    let mut checks: Vec<(String, Vec<String>)> = Vec::new();
    for p in &r.prefill {
        if matches!(p.status, CellStatus::Failed(_)) {
            let at = format!("Prefill {}", p.context_label);
            lines.push(format!("{at}: failed{}", first_messages(&p.error_messages)));
        }
    }
    for c in &r.decode {
        let at = format!("{} × {}", c.context_label, c.concurrency);
        if let Some(l) = &c.loop_info {
            lines.push(format!(
                "{at}: {} stream{} looped in {} (period {} characters, {} repeats): “{}”",
                l.streams,
                if l.streams == 1 { "" } else { "s" },
                l.channel.as_str(),
                group_digits(l.period_chars),
                group_digits(l.repeats),
                cell_text(&l.excerpt)
            ));
        }
        if let CellStatus::Failed(errors) = &c.status {
            let kinds: Vec<String> = errors.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
            let counts = if kinds.is_empty() {
                String::new()
            } else {
                format!(" requests: {}", kinds.join(", "))
            };
            lines.push(format!(
                "{at}: failed{counts}{}",
                first_messages(&c.error_messages)
            ));
        } else if !c.errors.is_empty() {
            let kinds: Vec<String> = c
                .errors
                .iter()
                .map(|e| format!("{} ×{}", e.kind, e.count))
                .collect();
            lines.push(format!(
                "{at}: some requests failed ({}); figures are from the rest{}",
                kinds.join(", "),
                first_messages(&c.error_messages)
            ));
        }
        for n in &c.notes {
            lines.push(format!("{at}: {}", cell_text(n)));
        }
        for r in c.client_lag.iter().flat_map(|l| &l.client_bound_reasons) {
            lines.push(format!("{at}: Client-bound: {}.", cell_text(r)));
        }
        if let Some(why) = &c.token_count_check {
            // One reason is usually the engine's, shared by every cell: said once.
            match checks.iter_mut().find(|(w, _)| w == why) {
                Some((_, cells)) => cells.push(at.clone()),
                None => checks.push((why.clone(), vec![at.clone()])),
            }
        }
        if let (Some(d), Some(s)) = (c.token_count_diff, c.server_output_tokens) {
            if d != 0 {
                lines.push(format!(
                    "{at}: client counted {} output tokens, server {} ({:+})",
                    group_digits(s.saturating_add_signed(d)),
                    group_digits(s),
                    d
                ));
            }
        }
        if let CellStatus::OverCapacity(CapacityReason::RunningLimit { max_running }) = c.status {
            lines.push(format!(
                "{at}: not run, the server runs at most {max_running} requests at once"
            ));
        }
    }
    for (why, cells) in checks {
        lines.push(format!(
            "{}: client–server token check {}",
            cells.join(", "),
            cell_text(&why)
        ));
    }
    if lines.is_empty() {
        return Ok(());
    }
    writeln!(w)?;
    writeln!(w, "## Notes")?;
    writeln!(w)?;
    for l in lines {
        writeln!(w, "- {l}")?;
    }
    Ok(())
}

/// `; first messages: http_status (HTTP 400): …` (one per kind), or nothing.
fn first_messages(m: &[ErrorMessage]) -> String {
    if m.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = m.iter().map(|e| cell_text(&e.display())).collect();
    format!("; first message per kind: {}", parts.join(" · "))
}

fn legend(w: &mut impl Write, r: &MatrixReport) -> io::Result<()> {
    writeln!(w)?;
    writeln!(w, "## Legend")?;
    writeln!(w)?;
    writeln!(w, "- **Valid**: all requests ran at once for the whole window; the cell shows total output tok/s and median TTFT.")?;
    writeln!(w, "- **Looped**: at least one stream kept repeating the same text; its figures are kept, in brackets, but describe a model stuck in a loop.")?;
    writeln!(w, "- **Over capacity**: not run, because this many requests at this context (each with its full output) would exceed the server's KV cache, or its limit on running requests.")?;
    writeln!(
        w,
        "- **Failed**: requests failed, or no stream produced a token before the readiness gate gave up (timeout_first_token), or the prompt could not be built; the error kinds, counts and the first server message per kind are in the notes."
    )?;
    writeln!(w, "- **Queued**: the server never ran this many at once: it reported waiting requests during the window, or some streams never produced a token, or never all at one instant (llama.cpp queues requests beyond its slots silently); figures are kept, in brackets.")?;
    writeln!(w, "- **TTFT** in a decode cell: median over the requests sent inside the window whose first token also came inside it (— when every request outlasted the window); time between tokens uses only token events inside the window.")?;
    writeln!(w, "- **Skipped**: not run, because the context plus the output does not fit the model's maximum length.")?;
    writeln!(
        w,
        "- **Pending**: planned but not run (the run stopped early)."
    )?;
    if !r.methodology.is_empty() {
        writeln!(w)?;
        writeln!(w, "## Method")?;
        writeln!(w)?;
        for m in &r.methodology {
            writeln!(w, "- {}", cell_text(m))?;
        }
    }
    Ok(())
}
