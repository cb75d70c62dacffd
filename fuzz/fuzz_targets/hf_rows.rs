//! A Hugging Face dataset's rows turned into samples (`bench serve --dataset-name hf`) never
//! panic, whatever the rows hold: each vLLM class's rule and the column mapping give samples,
//! exactly `--num-prompts` of them, or an error.
//!
//! Input layout: byte 0 picks the class, byte 1 the number of prompts (0..8); the rest is a JSON
//! list of rows (lossy UTF-8; anything else reads as no rows).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::workload::datasets::hf::{self, Class, HfSettings};
use llmspeed::workload::datasets::{DatasetConfig, DatasetKind, RenderChat, Tokens};
use llmspeed::workload::rows::{self, Row};
use serde_json::Value;

/// Counts words; renders messages as `role: content` lines (a template that may fail).
struct Words(Box<RenderChat<'static>>);

impl Tokens for Words {
    fn count(&mut self, text: &str) -> Result<u64, String> {
        Ok(text.split_whitespace().count() as u64)
    }
    fn render(&mut self) -> Option<&mut RenderChat<'_>> {
        Some(&mut *self.0)
    }
}

fuzz_target!(|data: &[u8]| {
    let [which, n, rest @ ..] = data else {
        return;
    };
    let class = match which % 14 {
        0 => Class::Conversation,
        1 => Class::InstructCoder,
        2 => Class::MtBench,
        3 => Class::HumanEval,
        4 => Class::Gsm8k,
        5 => Class::Aimo,
        6 => Class::NextEdit,
        7 => Class::Blazedit,
        8 => Class::MlPerf,
        9 => Class::Bfcl,
        11 => Class::VisionArena {
            id: "lmarena-ai/VisionArena-Chat".into(),
        },
        12 => Class::MmConversation,
        13 => Class::MmStar,
        _ => Class::Mapped {
            prompt: "prompt".into(),
            output: Some("output".into()),
        },
    };
    let rows: Vec<Row> = serde_json::from_str::<Vec<Value>>(&String::from_utf8_lossy(rest))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| match r {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .collect();
    let num_prompts = usize::from(n % 8);
    let cfg = DatasetConfig {
        kind: DatasetKind::Hf,
        num_prompts,
        hf: HfSettings::default(),
        ..Default::default()
    };
    let mut tokens = Words(Box::new(|m: &Value, _tools: Option<&Value>| {
        let list = m.as_array().ok_or("not a list")?;
        Ok(list
            .iter()
            .map(|x| format!("{}: {}\n", x["role"], x["content"]))
            .collect())
    }));
    if let Ok(s) = hf::samples(&cfg, &class, rows::from_vec(rows), &mut tokens) {
        assert_eq!(s.len(), num_prompts);
    }
});
