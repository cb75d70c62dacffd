//! Multi-turn rows ([`Plan::turns`](crate::bench::engine::Plan::turns), SGLang's
//! `--gsp-num-turns`): a row's turns go one after another in the concurrency slot the row took,
//! each round a request of its own whose `messages` are the row's earlier turns with the answers
//! the server actually gave (an empty answer after a failed round: the row goes on), then the
//! round's turn.
//!
//! Owns turning the run's prompts into rows ([`make_rows`], pure), each round's messages
//! ([`messages`], pure) and sending a row's later rounds ([`Row::later_rounds`]); the first round
//! is the row's request as the runner sends any other. Nothing here runs per token.

use crate::bench::engine::conversation::prose;
use crate::bench::engine::plan::Bodies;
use crate::net::{Cancel, Client, NoopObserver, StreamRequest};
use crate::timeline::{ErrorKind, RequestError, Timeline};
use crate::workload::request_id::RequestIds;
use crate::workload::sample::{PromptSource, Sample};
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;

/// Makes each sample a row of `turns` turns: the first its own text prompt, each later one a
/// question of prose, seeded by the row and the turn, of about the length the dataset drew for
/// it (`lens[row][turn - 2]`, SGLang's draws) or else `question_len` tokens. Only text prompts
/// can be a conversation's turns.
pub fn make_rows(
    samples: &mut [Sample],
    turns: u32,
    question_len: u32,
    lens: Option<&[Vec<u32>]>,
    seed: u64,
) -> Result<(), String> {
    for (i, s) in samples.iter_mut().enumerate() {
        let PromptSource::Text(first) = &s.prompt else {
            return Err("multi-turn rows need text prompts, not token ids".into());
        };
        let mut all = Vec::with_capacity(turns as usize);
        all.push(first.clone());
        for t in 1..turns {
            let row_seed = seed ^ ((i as u64) << 20) ^ u64::from(t);
            let len = lens
                .and_then(|l| l.get(i)?.get(t as usize - 1).copied())
                .unwrap_or(question_len);
            all.push(prose(row_seed, len));
        }
        s.prompt = PromptSource::Turns(all.into());
    }
    Ok(())
}

/// The `messages` of the round that sends `turns[answers.len()]`: every earlier turn followed by
/// the answer it got, then that turn.
pub fn messages(turns: &[String], answers: &[String]) -> Value {
    let mut m = Vec::with_capacity(2 * answers.len() + 1);
    for (k, turn) in turns.iter().take(answers.len() + 1).enumerate() {
        m.push(json!({"role": "user", "content": turn}));
        if let Some(a) = answers.get(k) {
            m.push(json!({"role": "assistant", "content": a}));
        }
    }
    Value::Array(m)
}

/// The later rounds of `row` after its first round's timeline `first`; none for a sample that
/// is one request (`row` `None`).
pub async fn after(
    row: Option<&Row>,
    client: &Client,
    first: &Timeline,
    cancel: &Cancel,
) -> Vec<Timeline> {
    match row {
        Some(row) => row.later_rounds(client, first, cancel).await,
        None => Vec::new(),
    }
}

/// What a row's task needs to send its later rounds.
pub struct Row {
    pub bodies: Arc<dyn Bodies>,
    pub model: String,
    /// The row's first request: each later round keeps its path, dialect, header and text
    /// keeping, with its own body and id.
    pub first: StreamRequest,
    /// Names round r of row `index` (`None`: warm-ups, which carry no id).
    pub ids: Option<(RequestIds, usize)>,
    pub sample: Sample,
}

impl Row {
    /// Rounds 1.. after the first round's timeline, one after another; a stop ends the row
    /// (the rounds not sent are not in the result).
    pub async fn later_rounds(
        &self,
        client: &Client,
        first: &Timeline,
        cancel: &Cancel,
    ) -> Vec<Timeline> {
        let PromptSource::Turns(turns) = &self.sample.prompt else {
            return Vec::new();
        };
        let mut answers = vec![answer(first)];
        let mut out = Vec::with_capacity(turns.len().saturating_sub(1));
        for r in 1..turns.len() {
            if cancel.is_cancelled() {
                break;
            }
            let start = client.clock().raw();
            let tl = match self.request(r, &messages(turns, &answers)) {
                Ok(req) => client.stream(&req, start, &mut NoopObserver, cancel).await,
                Err(e) => {
                    let mut t = Timeline::new(start, 0, false);
                    t.outcome = Err(RequestError::new(ErrorKind::Prompt, e));
                    t
                }
            };
            answers.push(answer(&tl));
            out.push(tl);
        }
        out
    }

    fn request(&self, round: usize, messages: &Value) -> Result<StreamRequest, String> {
        let body = self
            .bodies
            .round_body(&self.sample, &self.model, messages)?;
        Ok(StreamRequest {
            body: Bytes::from(body),
            request_id: self.ids.as_ref().map(|(ids, i)| ids.turn(*i, round)),
            ..self.first.clone()
        })
    }
}

/// The answer a round got: its text (empty when it failed).
fn answer(t: &Timeline) -> String {
    t.content_text.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Sample {
        Sample {
            prompt: PromptSource::Text(s.into()),
            prompt_len: 4,
            output_len: 3,
            group: Some(1),
        }
    }

    #[test]
    fn each_round_carries_the_earlier_turns_and_their_answers() {
        let turns: Vec<String> = ["sys\n\nq0", "q1", "q2"].map(String::from).into();
        assert_eq!(
            messages(&turns, &[]),
            json!([{"role": "user", "content": "sys\n\nq0"}])
        );
        assert_eq!(
            messages(&turns, &["a0".into(), String::new()]),
            json!([
                {"role": "user", "content": "sys\n\nq0"},
                {"role": "assistant", "content": "a0"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "q2"},
            ])
        );
    }

    #[test]
    fn rows_take_the_lengths_the_dataset_drew_for_each_later_turn() {
        let mut a = vec![text("first"), text("second")];
        // Row 0's turns 2 and 3 drew 26 and 4 tokens; row 1 has none drawn: --gsp-question-len.
        let lens = vec![vec![26, 4]];
        make_rows(&mut a, 3, 12, Some(&lens), 42).unwrap();
        let words = |s: &Sample, t: usize| match &s.prompt {
            PromptSource::Turns(t_) => t_[t].split_whitespace().count(),
            other => panic!("{other:?}"),
        };
        // 1.3 tokens a word: 26 -> 20 words, 4 -> 3, 12 -> 9.
        assert_eq!((words(&a[0], 1), words(&a[0], 2)), (20, 3));
        assert_eq!((words(&a[1], 1), words(&a[1], 2)), (9, 9));
    }

    #[test]
    fn rows_keep_the_first_prompt_and_add_seeded_questions() {
        let mut a = vec![text("first"), text("second")];
        make_rows(&mut a, 3, 12, None, 42).unwrap();
        let mut b = vec![text("first"), text("second")];
        make_rows(&mut b, 3, 12, None, 42).unwrap();
        assert_eq!(a, b, "seeded");
        let PromptSource::Turns(t0) = &a[0].prompt else {
            panic!("{:?}", a[0].prompt)
        };
        let PromptSource::Turns(t1) = &a[1].prompt else {
            panic!("{:?}", a[1].prompt)
        };
        assert_eq!(
            (t0.len(), t0[0].as_str(), t1[0].as_str()),
            (3, "first", "second")
        );
        // Questions of about 12 tokens (1.3 a word): 9 words; each row and turn its own.
        assert_eq!(t0[1].split_whitespace().count(), 9, "{}", t0[1]);
        assert!(t0[1] != t0[2] && t0[1] != t1[1], "{t0:?} {t1:?}");
        assert_eq!(
            (a[0].prompt_len, a[0].output_len, a[0].group),
            (4, 3, Some(1))
        );

        let mut ids = vec![Sample {
            prompt: PromptSource::Synthetic {
                prefix: Arc::from(vec![]),
                start: 0,
                len: 4,
                ids: crate::workload::sample::IdRange { lo: 0, span: 10 },
            },
            ..text("")
        }];
        assert!(make_rows(&mut ids, 2, 4, None, 1)
            .unwrap_err()
            .contains("text prompts"));
    }
}
