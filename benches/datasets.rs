//! Random prompt generation speed: the `random` dataset at 8K tokens per prompt, as specs,
//! materialised token ids, and complete `/v1/completions` request bodies. peers.md: a Python
//! tool took 737 s for 100,000 such prompts.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use llmspeed::bench::vllm::body::BodyBuilder;
use llmspeed::workload::datasets::{random, DatasetConfig};
use serde_json::{json, Map};
use std::hint::black_box;

const PROMPTS: usize = 1000;
const LEN: u32 = 8192;

fn cfg() -> DatasetConfig {
    DatasetConfig {
        num_prompts: PROMPTS,
        random_input_len: LEN,
        random_output_len: 128,
        ..Default::default()
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("random_8k");
    g.throughput(Throughput::Elements(PROMPTS as u64));
    g.bench_function("specs", |b| b.iter(|| black_box(random(&cfg()).unwrap())));
    let samples = random(&cfg()).unwrap();
    g.bench_function("token_ids", |b| {
        let mut ids = Vec::with_capacity(LEN as usize);
        b.iter(|| {
            for s in &samples {
                ids.clear();
                s.write_ids(&mut ids);
                black_box(&ids);
            }
        })
    });
    let mut extra = Map::new();
    extra.insert("temperature".into(), json!(0.0));
    let builder = BodyBuilder {
        model: "m".into(),
        dialect: llmspeed::net::Dialect::OpenAi,
        chat: false,
        ignore_eos: true,
        continuous_usage: true,
        extra,
    };
    g.bench_function("request_bodies", |b| {
        let mut ids = Vec::with_capacity(LEN as usize);
        b.iter_batched(
            || (),
            |_| {
                for s in &samples {
                    black_box(builder.body(s, &mut ids).unwrap());
                }
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
