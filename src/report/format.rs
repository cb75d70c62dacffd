//! Number formatting shared by the human-facing outputs, matching the seed report: `31.5K`,
//! `6,473.0`, `1,747 ms`, `10.4 ms`, `30.0 s`, `2,869`, and `—` for a missing figure.

/// `1234567` -> `1,234,567`.
pub fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Shown where a figure is missing.
pub const MISSING: &str = "—";

/// A throughput: `31.5K` from 10,000 up, else one decimal with grouped thousands.
pub fn rate(x: f64) -> String {
    if !x.is_finite() {
        return MISSING.to_string();
    }
    if x >= 10_000.0 {
        format!("{:.1}K", x / 1000.0)
    } else {
        one_decimal(x)
    }
}

/// One decimal with grouped thousands: `6,473.0`, `95.7`.
pub fn one_decimal(x: f64) -> String {
    if !x.is_finite() {
        return MISSING.to_string();
    }
    let tenths = (x.abs() * 10.0).round() as u64;
    let sign = if x < 0.0 && tenths > 0 { "-" } else { "" };
    format!("{sign}{}.{}", group_digits(tenths / 10), tenths % 10)
}

/// Milliseconds: whole from 100 ms (`1,747 ms`), one decimal below (`10.4 ms`).
pub fn ms(x: f64) -> String {
    if !x.is_finite() {
        return MISSING.to_string();
    }
    if x >= 100.0 {
        format!("{} ms", group_digits(x.round() as u64))
    } else {
        format!("{} ms", one_decimal(x))
    }
}

/// Seconds with one decimal: `30.0 s`.
pub fn seconds(x: f64) -> String {
    if !x.is_finite() {
        return MISSING.to_string();
    }
    format!("{} s", one_decimal(x))
}

/// What the report says the hardware is: what the user told (`--gpu`, `--vram-gb`, the type,
/// `--hardware`), else what was measured (the GPUs nvidia-smi listed on the client), else that
/// none was seen. Never the operating system's name: that is not hardware.
pub fn hardware_text(h: &crate::report::Hardware) -> String {
    hardware_name(h)
        .unwrap_or_else(|| "no GPU seen on the client; pass --gpu for the server's".into())
}

/// The hardware as told, else as measured ([`hardware_text`]); `None` when neither.
pub fn hardware_name(h: &crate::report::Hardware) -> Option<String> {
    let told: Vec<String> = [
        h.kind.clone(),
        h.gpu.clone(),
        h.vram_gb.map(|v| format!("{} GB", one_decimal(v))),
        h.description.clone(),
    ]
    .into_iter()
    .flatten()
    .filter(|s| !s.trim().is_empty())
    .collect();
    if !told.is_empty() {
        return Some(told.join(" · "));
    }
    if h.gpus.is_empty() {
        return None;
    }
    let gpus: Vec<String> = h
        .gpus
        .iter()
        .map(|g| match g.memory_total_mib {
            Some(m) => format!("{} ({} GiB)", g.name, one_decimal(m / 1024.0)),
            None => g.name.clone(),
        })
        .collect();
    let by = h.gpu_source.as_deref().unwrap_or("the GPU tool");
    Some(format!(
        "{} (listed by {by} on the client)",
        gpus.join("; ")
    ))
}

/// An optional figure through a formatter, `—` when missing.
pub fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| MISSING.to_string(), f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_the_seed() {
        assert_eq!(rate(31_512.0), "31.5K");
        assert_eq!(rate(6_473.0), "6,473.0");
        assert_eq!(rate(95.66), "95.7");
        assert_eq!(rate(9_999.96), "10,000.0");
        assert_eq!(ms(1_747.2), "1,747 ms");
        assert_eq!(ms(261.4), "261 ms");
        assert_eq!(ms(10.44), "10.4 ms");
        assert_eq!(ms(99.96), "100.0 ms");
        assert_eq!(seconds(30.0), "30.0 s");
        assert_eq!(seconds(8.84), "8.8 s");
        assert_eq!(one_decimal(-2.5), "-2.5");
        assert_eq!(one_decimal(-0.01), "0.0");
        assert_eq!(opt(None::<f64>, rate), "—");
        assert_eq!(opt(Some(2_869u64), group_digits), "2,869");
        assert_eq!(rate(f64::NAN), "—");
    }
}
