//! The one duration syntax of every command's flags: `30s`, `500ms`, `250us`, `2m`, `1.5s`.
//!
//! A bare number keeps the unit the flag has always documented (seconds for timeouts and
//! windows, milliseconds for `selftest`'s gaps, microseconds for the mock's `*-us` flags), so
//! existing scripts keep working. Each `value_parser` below returns the flag's own type in its
//! own unit, so the commands' configs do not change. Pure: no clock, no IO.

use std::time::Duration;

/// The unit a bare number is read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Micros,
    Millis,
    Secs,
}

impl Unit {
    fn secs(self) -> f64 {
        match self {
            Unit::Micros => 1e-6,
            Unit::Millis => 1e-3,
            Unit::Secs => 1.0,
        }
    }
}

/// Parses `s` into seconds; a number without a unit is in `bare`.
pub fn parse_secs_f64(s: &str, bare: Unit) -> Result<f64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 30s, 500ms, 2m, 1.5s)"))?;
    let scale = match unit.trim() {
        "" => bare.secs(),
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{s}` (ns, us, ms, s, m, h)"
            ))
        }
    };
    let secs = v * scale;
    // `Duration::from_secs_f64` panics past ~584 years; nobody means that, so refuse it.
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("`{s}` is not a valid duration"));
    }
    Ok(secs)
}

/// `value_parser` for flags documented in seconds; returns seconds.
pub fn secs(s: &str) -> Result<f64, String> {
    parse_secs_f64(s, Unit::Secs)
}

/// `value_parser` for whole-second flags (vLLM's `--ready-check-timeout-sec` is an integer);
/// a fraction rounds up, so `1.5s` never waits less than asked.
pub fn whole_secs(s: &str) -> Result<u64, String> {
    parse_secs_f64(s, Unit::Secs).map(|v| v.ceil() as u64)
}

/// `value_parser` for flags documented in milliseconds; returns a `Duration`.
pub fn millis(s: &str) -> Result<Duration, String> {
    parse_secs_f64(s, Unit::Millis).map(Duration::from_secs_f64)
}

/// `value_parser` for flags documented in microseconds; returns microseconds.
pub fn micros(s: &str) -> Result<f64, String> {
    parse_secs_f64(s, Unit::Micros).map(|v| v * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_numbers() {
        let cases = [
            ("30s", Unit::Secs, 30.0),
            ("500ms", Unit::Secs, 0.5),
            ("2m", Unit::Secs, 120.0),
            ("1.5s", Unit::Secs, 1.5),
            ("250us", Unit::Secs, 250e-6),
            ("1h", Unit::Secs, 3600.0),
            (" 3 s ", Unit::Secs, 3.0),
            ("30", Unit::Secs, 30.0),
            ("50", Unit::Millis, 0.05),
            ("10000", Unit::Micros, 0.01),
        ];
        for (s, bare, want) in cases {
            let got = parse_secs_f64(s, bare).unwrap();
            assert!((got - want).abs() < 1e-12, "{s}: {got} != {want}");
        }
        assert_eq!(whole_secs("1.5s").unwrap(), 2);
        assert_eq!(whole_secs("600").unwrap(), 600);
        assert_eq!(millis("1").unwrap(), Duration::from_millis(1));
        assert!((micros("10ms").unwrap() - 10_000.0).abs() < 1e-9);
    }

    #[test]
    fn nonsense_is_refused_with_the_text() {
        for s in ["fast", "", "s", "10 parsecs", "-1s", "1e999", "2000000000s"] {
            let e = parse_secs_f64(s, Unit::Secs).unwrap_err();
            assert!(e.contains(s.trim()) || s.is_empty(), "{s}: {e}");
        }
    }
}
