//! How long building the matrix's largest prompt takes: ≈1.1 MB of prose (≈256K tokens),
//! the chat prompt around it, and a 256K token-id prompt. The target is well under a second.

use criterion::{criterion_group, criterion_main, Criterion};
use llmspeed::workload::prose::{generate, token_ids, PromptBuilder, PromptKind};
use std::hint::black_box;

const BYTES_256K_TOKENS: usize = 1_100_000;

fn prompts(c: &mut Criterion) {
    let mut g = c.benchmark_group("prompts");
    g.sample_size(10);
    g.bench_function("prose_256k_tokens", |b| {
        b.iter(|| black_box(generate(black_box(1), BYTES_256K_TOKENS)))
    });
    g.bench_function("chat_prompt_200k_words", |b| {
        b.iter(|| {
            let mut builder = PromptBuilder::new("bench", 262_143, black_box(1), PromptKind::Chat);
            black_box(builder.build(200_000))
        })
    });
    g.bench_function("token_ids_256k", |b| {
        b.iter(|| black_box(token_ids(262_143, black_box(1), 1000..150_000)))
    });
    g.finish();
}

criterion_group!(benches, prompts);
criterion_main!(benches);
