//! The `x-request-id` every request carries: deterministic UUIDs that every server accepts.
//!
//! Some OpenAI-compatible servers validate the header as a UUID and answer `400` with an empty
//! body otherwise (llama-cpp-python's server, through starlette-context's request-id plugin,
//! which parses it with Python's `uuid.UUID`). Our ids are therefore UUIDs of version 8 (RFC
//! 9562's custom layout) whose 122 free bits carry what names the request, so a trace or a log
//! line still joins to the report: [`RequestId::parse`] reads them back.
//!
//! Layout of the 122 payload bits, most significant first: the run tag (32 bits, the first
//! group of the written form, so every id of a run starts alike), the kind (2 bits), then 88
//! bits that depend on the kind. A matrix run's tag is its 8-digit run id read as hex, so
//! `95906640-…` is run `95906640`. Fields wider than their slot wrap (a 2^24-th request of one
//! stream in one cell repeats the first one's id); ids stay well-formed whatever the values.
//!
//! `--request-id-prefix` keeps the user's own form (`{prefix}{i}`), as vLLM's flag does:
//! [`RequestIds`] is that choice.
//!
//! Pure: no clock, no randomness (the caller brings the run tag).

use std::fmt;

/// What one id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestId {
    /// Request `n` of stream `stream` in the matrix cell `context` × `concurrency`;
    /// `attempt` counts the cell's retries (0 first).
    Matrix {
        run: u32,
        attempt: u8,
        context: u64,
        concurrency: u32,
        stream: u32,
        n: u64,
    },
    /// Request `index` of a `bench serve` run (vLLM's request index).
    Bench { run: u32, index: u64 },
    /// Turn `turn` of conversation `conversation` of a `bench serve --multi-turn` run.
    Turn {
        run: u32,
        conversation: u64,
        turn: u64,
    },
}

const KIND_MATRIX: u128 = 1;
const KIND_BENCH: u128 = 2;
const KIND_TURN: u128 = 3;

/// The low `bits` bits of `v`.
fn field(v: u64, bits: u32) -> u128 {
    (v as u128) & ((1u128 << bits) - 1)
}

impl RequestId {
    /// The 122-bit payload.
    fn payload(self) -> u128 {
        let (run, kind, rest) = match self {
            RequestId::Matrix {
                run,
                attempt,
                context,
                concurrency,
                stream,
                n,
            } => (
                run,
                KIND_MATRIX,
                field(attempt as u64, 4) << 84
                    | field(context, 28) << 56
                    | field(concurrency as u64, 16) << 40
                    | field(stream as u64, 16) << 24
                    | field(n, 24),
            ),
            RequestId::Bench { run, index } => (run, KIND_BENCH, index as u128),
            RequestId::Turn {
                run,
                conversation,
                turn,
            } => (
                run,
                KIND_TURN,
                field(conversation, 44) << 44 | field(turn, 44),
            ),
        };
        (run as u128) << 90 | kind << 88 | rest
    }

    /// The id as a UUID's 128 bits: version 8, variant `10`.
    pub fn to_u128(self) -> u128 {
        let p = self.payload();
        // 48 bits, the version nibble, 12 bits, the two variant bits, 62 bits.
        (p >> 74) << 80
            | 0x8 << 76
            | ((p >> 62) & 0xfff) << 64
            | 0b10 << 62
            | (p & (u64::MAX >> 2) as u128)
    }

    /// Reads back an id written by [`RequestId`]'s `Display`; `None` for anything else
    /// (another UUID version, a prefixed id, a kind we never write).
    pub fn parse(s: &str) -> Option<RequestId> {
        let v = parse_uuid(s)?;
        if (v >> 76) & 0xf != 0x8 || (v >> 62) & 0b11 != 0b10 {
            return None;
        }
        let p = (v >> 80) << 74 | ((v >> 64) & 0xfff) << 62 | (v & (u64::MAX >> 2) as u128);
        let run = (p >> 90) as u32;
        let rest = p & ((1u128 << 88) - 1);
        let bits = |shift: u32, width: u32| ((rest >> shift) & ((1u128 << width) - 1)) as u64;
        match (p >> 88) & 0b11 {
            KIND_MATRIX => Some(RequestId::Matrix {
                run,
                attempt: bits(84, 4) as u8,
                context: bits(56, 28),
                concurrency: bits(40, 16) as u32,
                stream: bits(24, 16) as u32,
                n: bits(0, 24),
            }),
            // Written from a u64: anything above is not ours.
            KIND_BENCH => u64::try_from(rest)
                .ok()
                .map(|index| RequestId::Bench { run, index }),
            KIND_TURN => Some(RequestId::Turn {
                run,
                conversation: bits(44, 44),
                turn: bits(0, 44),
            }),
            _ => None,
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.to_u128();
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            (v >> 96) as u32,
            (v >> 80) as u16,
            (v >> 64) as u16,
            (v >> 48) as u16,
            (v & 0xffff_ffff_ffff) as u64
        )
    }
}

/// The 128 bits of a UUID in its hyphenated form (`8-4-4-4-12` hex digits, either case).
pub fn parse_uuid(s: &str) -> Option<u128> {
    let b = s.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut v = 0u128;
    for (i, &c) in b.iter().enumerate() {
        if [8, 13, 18, 23].contains(&i) {
            continue;
        }
        v = v << 4 | (c as char).to_digit(16)? as u128;
    }
    Some(v)
}

/// A matrix run's tag: its run id (8 decimal digits) read as hex, so the id's first group shows
/// the same digits; any other string is hashed into 32 bits.
pub fn run_tag(run_id: &str) -> u32 {
    match u32::from_str_radix(run_id, 16) {
        Ok(v) if run_id.len() == 8 => v,
        _ => run_id.bytes().fold(0x811c_9dc5u32, |h, b| {
            (h ^ b as u32).wrapping_mul(0x0100_0193)
        }),
    }
}

/// How `bench serve` names its requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestIds {
    /// `--request-id-prefix`: request `i` is `{prefix}{i}`, conversation `c`'s turn `t` is
    /// `{prefix}conv{c}-turn{t}` (vLLM's forms).
    Prefix(String),
    /// The default: [`RequestId`] UUIDs under this run's tag.
    Uuid { run: u32 },
}

impl RequestIds {
    /// Request `index` of the run.
    pub fn request(&self, index: usize) -> String {
        match self {
            RequestIds::Prefix(p) => format!("{p}{index}"),
            RequestIds::Uuid { run } => RequestId::Bench {
                run: *run,
                index: index as u64,
            }
            .to_string(),
        }
    }

    /// Turn `turn` of conversation `conversation`.
    pub fn turn(&self, conversation: usize, turn: usize) -> String {
        match self {
            RequestIds::Prefix(p) => format!("{p}conv{conversation}-turn{turn}"),
            RequestIds::Uuid { run } => RequestId::Turn {
                run: *run,
                conversation: conversation as u64,
                turn: turn as u64,
            }
            .to_string(),
        }
    }

    /// The user's prefix, or "" for UUIDs (conversation names in multi-turn logs).
    pub fn prefix(&self) -> &str {
        match self {
            RequestIds::Prefix(p) => p,
            RequestIds::Uuid { .. } => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(run: u32, context: u64, concurrency: u32, stream: u32, n: u64) -> RequestId {
        RequestId::Matrix {
            run,
            attempt: 1,
            context,
            concurrency,
            stream,
            n,
        }
    }

    /// Worked by hand: run 0x95906640, kind 1, attempt 1, context 1024, concurrency 4, stream
    /// 3, n 7. The top 48 payload bits are the run, the kind `01` and 14 bits holding the attempt
    /// at bit 10 (`4400`); the version nibble `8`; the next 12 bits hold context bit 10 at bit
    /// 4 (`010`); the variant `10` and 62 bits with 4 << 40 | 3 << 24 | 7. Python's
    /// `uuid.UUID(int=…)` prints the same string and reads version 8, RFC variant.
    #[test]
    fn hand_worked_matrix_id() {
        let id = matrix(0x9590_6640, 1024, 4, 3, 7);
        let s = id.to_string();
        assert_eq!(s, "95906640-4400-8010-8000-040003000007");
        assert_eq!(RequestId::parse(&s), Some(id));
    }

    #[test]
    fn every_kind_round_trips_and_is_a_version_8_uuid() {
        let ids = [
            matrix(run_tag("00000001"), 131_072, 64, 63, 12_345),
            matrix(u32::MAX, (1 << 28) - 1, 65_535, 65_535, (1 << 24) - 1),
            RequestId::Bench {
                run: 7,
                index: u64::MAX,
            },
            RequestId::Bench { run: 0, index: 0 },
            RequestId::Turn {
                run: 9,
                conversation: 3,
                turn: 11,
            },
        ];
        for id in ids {
            let s = id.to_string();
            assert_eq!(s.len(), 36, "{s}");
            // Version nibble and variant as every UUID parser reads them.
            assert_eq!(&s[14..15], "8", "{s}");
            assert!("89ab".contains(&s[19..20]), "{s}");
            assert_eq!(RequestId::parse(&s), Some(id), "{s}");
            assert_eq!(RequestId::parse(&s.to_uppercase()), Some(id), "{s}");
        }
    }

    #[test]
    fn distinct_requests_have_distinct_ids() {
        let mut seen = std::collections::HashSet::new();
        for context in [64, 128, 1024] {
            for c in [1, 2, 16] {
                for s in 0..c {
                    for n in 0..5 {
                        assert!(seen.insert(matrix(42, context, c, s, n).to_string()));
                    }
                }
            }
        }
        let bench = RequestIds::Uuid { run: 42 };
        for i in 0..100 {
            assert!(seen.insert(bench.request(i)));
            assert!(seen.insert(bench.turn(i, 0)));
        }
    }

    #[test]
    fn run_tag_shows_the_run_id_digits() {
        let s = matrix(run_tag("95906640"), 256, 1, 0, 0).to_string();
        assert!(s.starts_with("95906640-"), "{s}");
        assert_ne!(run_tag("run-a"), run_tag("run-b"));
    }

    #[test]
    fn prefix_form_is_the_users_own() {
        let p = RequestIds::Prefix("bench-1-".into());
        assert_eq!(p.request(5), "bench-1-5");
        assert_eq!(p.turn(2, 1), "bench-1-conv2-turn1");
    }

    #[test]
    fn other_strings_are_not_ours() {
        for s in [
            "",
            "95906640-1024-1-0-0",
            "benchmark-serving0",
            // A version 4 UUID.
            "9f1c2f0e-7c1a-4d2b-9a3e-0123456789ab",
            "95906640-4400-8010-8000-04000300000g",
            "95906640-4400-8010-c000-040003000007",
        ] {
            assert_eq!(RequestId::parse(s), None, "{s}");
        }
        assert!(parse_uuid("9f1c2f0e-7c1a-4d2b-9a3e-0123456789ab").is_some());
        assert!(parse_uuid("9f1c2f0e7c1a4d2b9a3e0123456789ab").is_none());
    }
}
