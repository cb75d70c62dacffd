//! Per-token cost of the repetition detector: 1 MB of varied prose pushed in 4–30 byte pieces,
//! the way decoded tokens arrive. Criterion reports time per element, one element = one piece.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use llmspeed::analysis::repetition::{RepetitionConfig, RepetitionDetector};
use rand::{rngs::StdRng, Rng, SeedableRng};

const WORDS: &[&str] = &[
    "the",
    "server",
    "answered",
    "with",
    "a",
    "long",
    "and",
    "careful",
    "explanation",
    "of",
    "how",
    "paged",
    "attention",
    "keeps",
    "blocks",
    "in",
    "memory,",
    "then",
    "compared",
    "it",
    "to",
    "earlier",
    "designs.",
    "Latency",
    "throughput",
    "scheduling",
    "café",
    "naïve",
    "東京",
    "🙂",
    "batching",
    "tokens",
    "prefill",
    "decode",
    "while",
    "requests",
    "wait",
    "queue.",
];

/// ~1 MB of prose cut into token-like pieces (4 to 30 bytes, on character boundaries).
fn pieces() -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let mut rng = StdRng::seed_from_u64(7);
    let mut text = String::with_capacity(1 << 20);
    while text.len() < 1 << 20 {
        text.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
        text.push(if rng.gen_ratio(1, 12) { '\n' } else { ' ' });
    }
    let mut ranges = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let mut end = (at + rng.gen_range(4..=30)).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        ranges.push(at..end);
        at = end;
    }
    (text.into_bytes(), ranges)
}

fn bench(c: &mut Criterion) {
    let (text, ranges) = pieces();
    let mut group = c.benchmark_group("repetition");
    group.throughput(Throughput::Elements(ranges.len() as u64));
    group.bench_function("prose_1MB_token_pieces", |b| {
        b.iter_batched_ref(
            || RepetitionDetector::new(RepetitionConfig::default()).expect("default config"),
            |d| {
                for r in &ranges {
                    d.push(&text[r.clone()]);
                }
                assert!(d.finish().is_none(), "varied prose must not loop");
            },
            BatchSize::LargeInput,
        )
    });
    // The costliest text that is never flagged: blank filler passes the cheap recurrence probe,
    // so every check runs the prefix-function pass and scans the blank candidate.
    let blank: Vec<u8> = b" \n".iter().copied().cycle().take(text.len()).collect();
    group.bench_function("blank_1MB_token_pieces", |b| {
        b.iter_batched_ref(
            || RepetitionDetector::new(RepetitionConfig::default()).expect("default config"),
            |d| {
                for r in &ranges {
                    d.push(&blank[r.clone()]);
                }
                assert!(d.finish().is_none(), "blank periods are ignored");
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
