//! Calibration: the longest prompt whose token count, by the caller's counting function, is at
//! most a target. Interpolation on whole words of prose, bisection when it stalls, then a cut
//! inside the next word; every answer is checked (a counter that does not measure the text is
//! an error, never a prompt of the wrong size).

use super::prompt::{Framing, Prompt, PromptBuilder};

/// The largest share of a prompt the framing may take before a smaller one is used: the rest is
/// prose, which calibration sizes.
pub(super) const FRAMING_SHARE: f64 = 0.75;

/// A prompt calibrated to a token count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Calibrated {
    pub prompt: Prompt,
    /// What the counter said for `prompt`: at most the target, and within a few tokens of it
    /// unless the call budget ran out.
    pub tokens: u64,
    /// Words of prose in the body.
    pub prose_words: usize,
    /// Calls made to the counting function.
    pub calls: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError<E> {
    #[error("token counting failed: {0}")]
    Count(E),
    #[error("a prompt of {target} tokens is too small: the framing alone is {overhead} tokens")]
    TooSmall { target: u64, overhead: u64 },
    #[error("the token count did not grow with the text: {before_words} words of prose gave {before_tokens} tokens, {words} words gave {tokens}; the counter does not measure this text")]
    NotGrowing {
        words: usize,
        tokens: u64,
        before_words: usize,
        before_tokens: u64,
    },
    #[error(
        "the counter answered 0 tokens for a prompt of {bytes} bytes: it does not count this text"
    )]
    Zero { bytes: usize },
    #[error("the closest prompt found counts {tokens} tokens, more than 1% under the target of {target} (after {calls} counts)")]
    NotExact {
        target: u64,
        tokens: u64,
        calls: u32,
        /// The closest prompt, for callers that report its true size instead of the target's
        /// (dataset prompts); never to be sent as a prompt of `target` tokens.
        best: Box<Calibrated>,
    },
}

impl PromptBuilder {
    /// Find the longest prompt whose token count is at most `target`, asking `count` at most
    /// `max_calls` times (20 is plenty: interpolation lands within a few words in 3–5 calls,
    /// bisection finishes the rest, and a cut inside the next word closes the last gap).
    ///
    /// Never returns a prompt it cannot vouch for: a count of 0 for a non-empty prompt, a
    /// count that does not grow when the text grows (a counter that ignores the text, or a
    /// dialect the server answers emptily), or a best prompt more than 1% under the target is
    /// an error carrying the counts seen.
    pub fn calibrate<E>(
        &mut self,
        target: u64,
        count: impl FnMut(&Prompt) -> Result<u64, E>,
        max_calls: u32,
    ) -> Result<Calibrated, CalibrateError<E>> {
        let mut counter = Counter {
            count,
            calls: 0,
            max_calls: max_calls.max(2),
        };
        let (p0, overhead) = self.settle_framing(target, &mut counter)?;
        let bracket = self.search_words(target, overhead, p0, &mut counter)?;
        let prose_words = bracket.lo.0;
        let (prompt, tokens) = self.cut_inside_next_word(target, bracket, &mut counter)?;
        // ±1% of the target: anything further is a prompt of another size, not this one.
        let found = Calibrated {
            prompt,
            tokens,
            prose_words,
            calls: counter.calls,
        };
        if (target - tokens) * 100 > target {
            return Err(CalibrateError::NotExact {
                target,
                tokens,
                calls: counter.calls,
                best: Box::new(found),
            });
        }
        Ok(found)
    }

    /// The fullest framing that leaves the prose room (a small context, a small vocabulary
    /// shrink it), with the prompt of no prose and its count: the framing's overhead.
    fn settle_framing<E>(
        &mut self,
        target: u64,
        counter: &mut Counter<impl FnMut(&Prompt) -> Result<u64, E>>,
    ) -> Result<(Prompt, u64), CalibrateError<E>> {
        if self.framing != Framing::Bare {
            self.framing = Framing::Full;
        }
        let (mut p0, mut overhead) = counter.eval(self, 0)?;
        while overhead as f64 > target as f64 * FRAMING_SHARE {
            let Some(smaller) = self.framing.smaller() else {
                break;
            };
            self.framing = smaller;
            (p0, overhead) = counter.eval(self, 0)?;
        }
        if overhead > target {
            return Err(CalibrateError::TooSmall { target, overhead });
        }
        Ok((p0, overhead))
    }

    /// Whole words of prose: interpolate, then bisect, until the prompt of `lo` words is the
    /// target or `lo + 1` words is over it (or the calls run out).
    fn search_words<E>(
        &mut self,
        target: u64,
        overhead: u64,
        p0: Prompt,
        counter: &mut Counter<impl FnMut(&Prompt) -> Result<u64, E>>,
    ) -> Result<Bracket, CalibrateError<E>> {
        let mut b = Bracket {
            lo: (0, overhead, p0),
            hi: None,
            bisect_next: false,
        };
        // Natural English runs ~1.3 tokens per word; start a little under.
        let mut guess = ((target - overhead) as f64 / 1.35) as usize;
        while !b.settled(target) && !counter.spent() {
            let words = b.within(guess);
            let end = self.word_end(words);
            let (p, n) = counter.eval(self, end)?;
            // Four more words of prose are always more tokens; one may merge into a neighbour.
            let lo = &b.lo;
            if n < lo.1 || (n == lo.1 && words >= lo.0 + 4) {
                return Err(CalibrateError::NotGrowing {
                    words,
                    tokens: n,
                    before_words: lo.0,
                    before_tokens: lo.1,
                });
            }
            let width_before = b.hi.map(|(hn, _)| hn - b.lo.0);
            if n <= target {
                b.lo = (words, n, p);
            } else {
                b.hi = Some((words, n));
            }
            guess = b.next_guess(target, overhead, width_before);
        }
        Ok(b)
    }

    /// One word can be several tokens (numbers, punctuation): cut inside the next word,
    /// bisecting on bytes, to land within a token of the target. The best prompt and its count.
    fn cut_inside_next_word<E>(
        &mut self,
        target: u64,
        b: Bracket,
        counter: &mut Counter<impl FnMut(&Prompt) -> Result<u64, E>>,
    ) -> Result<(Prompt, u64), CalibrateError<E>> {
        let prose_words = b.lo.0;
        let (mut prompt, mut tokens) = (b.lo.2, b.lo.1);
        if tokens >= target || b.hi.is_none_or(|(hn, _)| hn != prose_words + 1) {
            return Ok((prompt, tokens));
        }
        let mut lo_b = self.word_end(prose_words);
        let mut hi_b = self.word_end(prose_words + 1);
        while !counter.spent() && tokens < target {
            let text = self.prose.text();
            let mut mid = lo_b + (hi_b - lo_b) / 2;
            while mid > lo_b && !text.is_char_boundary(mid) {
                mid -= 1;
            }
            if mid <= lo_b {
                break;
            }
            let (p, n) = counter.eval(self, mid)?;
            if n <= target {
                // A cut word can count fewer tokens than a shorter cut (BPE merges): keep
                // the best prompt, move on either way.
                if n > tokens {
                    (prompt, tokens) = (p, n);
                }
                lo_b = mid;
            } else {
                hi_b = mid;
            }
        }
        Ok((prompt, tokens))
    }
}

/// The caller's counting function and the calls made to it.
struct Counter<F> {
    count: F,
    calls: u32,
    max_calls: u32,
}

impl<F> Counter<F> {
    fn spent(&self) -> bool {
        self.calls >= self.max_calls
    }

    /// The prompt whose body is the first `end` bytes of prose, and its count; a count of 0
    /// for a prompt with text is an error.
    fn eval<E>(
        &mut self,
        b: &mut PromptBuilder,
        end: usize,
    ) -> Result<(Prompt, u64), CalibrateError<E>>
    where
        F: FnMut(&Prompt) -> Result<u64, E>,
    {
        let p = b.build_bytes(end);
        self.calls += 1;
        let n = (self.count)(&p).map_err(CalibrateError::Count)?;
        if n == 0 && p.text_len() > 0 {
            return Err(CalibrateError::Zero {
                bytes: p.text_len(),
            });
        }
        Ok((p, n))
    }
}

/// The search's bracket in words of prose.
struct Bracket {
    /// The best known prompt at or under the target: (words, tokens, prompt).
    lo: (usize, u64, Prompt),
    /// The smallest known over it: (words, tokens).
    hi: Option<(usize, u64)>,
    /// Halve the bracket next instead of interpolating.
    bisect_next: bool,
}

impl Bracket {
    /// The target is met, or no whole word is left between the bounds.
    fn settled(&self, target: u64) -> bool {
        self.lo.1 == target || self.hi.is_some_and(|(hn, _)| hn <= self.lo.0 + 1)
    }

    /// `guess` moved strictly inside the bracket.
    fn within(&self, guess: usize) -> usize {
        let words = guess.max(self.lo.0 + 1);
        match self.hi {
            Some((hn, _)) => words.min(hn - 1),
            None => words,
        }
    }

    /// The next word count to try.
    fn next_guess(&mut self, target: u64, overhead: u64, width_before: Option<usize>) -> usize {
        let lo = &self.lo;
        match self.hi {
            None => {
                // Extrapolate from the rate so far, aiming a little past the target so the
                // next call brackets it.
                let rate = if lo.0 > 0 && lo.1 > overhead {
                    (lo.1 - overhead) as f64 / lo.0 as f64
                } else {
                    1.0
                };
                lo.0 + ((target - lo.1) as f64 / rate * 1.05).ceil() as usize + 1
            }
            Some((hn, hc)) => {
                let width = hn - lo.0;
                // Interpolation converges fast on near-linear counts; fall back to halving
                // when it stops shrinking the bracket by half.
                if let Some(wb) = width_before {
                    self.bisect_next = width * 2 > wb && !self.bisect_next;
                }
                if self.bisect_next || hc <= lo.1 {
                    lo.0 + width / 2
                } else {
                    let frac = (target - lo.1) as f64 / (hc - lo.1) as f64;
                    lo.0 + ((width as f64 * frac).round() as usize)
                        .clamp(1, width.saturating_sub(1).max(1))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::prose::{prompt_prefix, PromptKind};

    /// A stand-in tokenizer: one token per word, one per punctuation mark, one more per 6
    /// letters of a long word, plus 3 per chat message (a template).
    fn fake_count(p: &Prompt) -> Result<u64, String> {
        let count = |t: &str| -> u64 {
            t.split_whitespace()
                .map(|w| {
                    let letters = w.chars().filter(|c| c.is_alphanumeric()).count() as u64;
                    let punct = w.chars().filter(|c| c.is_ascii_punctuation()).count() as u64;
                    1 + letters / 6 + punct
                })
                .sum()
        };
        Ok(match p {
            Prompt::Chat(m) => m.iter().map(|m| 3 + count(&m.content)).sum(),
            Prompt::Text(t) => 1 + count(t),
        })
    }

    #[test]
    fn calibration_is_exact_within_a_few_tokens_and_bounded() {
        for kind in [PromptKind::Chat, PromptKind::Completion] {
            for target in [300u64, 1000, 8192, 32_768, 262_143] {
                let mut b = PromptBuilder::new("r1", target, 5, kind);
                let mut calls = 0;
                let c = b
                    .calibrate(
                        target,
                        |p| {
                            calls += 1;
                            fake_count(p)
                        },
                        20,
                    )
                    .unwrap();
                assert_eq!(c.calls, calls);
                assert!(c.calls <= 20, "{kind:?} {target}: {} calls", c.calls);
                assert!(
                    c.tokens <= target && target - c.tokens <= 4,
                    "{kind:?} {target}: got {}",
                    c.tokens
                );
                assert_eq!(fake_count(&c.prompt).unwrap(), c.tokens);
                assert_eq!(c.prompt.kind(), kind);
            }
        }
    }

    /// A counter of one token per byte (plus BOS), as a tiny vocabulary of characters counts.
    fn per_byte(p: &Prompt) -> Result<u64, String> {
        Ok(match p {
            Prompt::Chat(m) => m.iter().map(|m| 4 + m.content.len() as u64).sum(),
            Prompt::Text(t) => 1 + t.len() as u64,
        })
    }

    /// The full framing is ~500 bytes: on a byte-level counter, contexts from 64 tokens up
    /// build with a smaller framing that still starts with the run's first line.
    #[test]
    fn small_contexts_shrink_the_framing_down_to_the_first_line() {
        for kind in [PromptKind::Completion, PromptKind::Chat] {
            for (target, want) in [
                (64, Framing::Line),
                (128, Framing::Short),
                (256, Framing::Short),
                (1024, Framing::Full),
            ] {
                let mut b = PromptBuilder::new("12345678", target, 3, kind);
                let c = b
                    .calibrate(target, per_byte, 24)
                    .unwrap_or_else(|e| panic!("{kind:?} {target}: {e}"));
                assert!(c.tokens <= target && c.tokens * 100 >= target * 99, "{c:?}");
                assert_eq!(b.framing(), want, "{kind:?} {target}");
                let first = match &c.prompt {
                    Prompt::Text(t) => t.as_str(),
                    Prompt::Chat(m) => m[0].content.as_str(),
                };
                assert!(
                    first.starts_with(&prompt_prefix("12345678", target, 3)),
                    "{first}"
                );
                assert!(c.prose_words > 0, "{kind:?} {target}: some prose");
            }
        }
        // Below the first line alone, nothing fits.
        let mut b = PromptBuilder::new("12345678", 32, 3, PromptKind::Completion);
        assert!(matches!(
            b.calibrate(32, per_byte, 24),
            Err(CalibrateError::TooSmall { target: 32, .. })
        ));
    }

    #[test]
    fn calibration_errors() {
        let mut b = PromptBuilder::new("r", 10, 1, PromptKind::Chat);
        assert!(matches!(
            b.calibrate(10, fake_count, 20),
            Err(CalibrateError::TooSmall { target: 10, .. })
        ));
        let e = b
            .calibrate(1000, |_| Err::<u64, _>("tokenize returned 500"), 20)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "token counting failed: tokenize returned 500"
        );
        // A counter that ignores the text is an error, never a prompt (it used to return the
        // 50-token framing as the "calibrated" 1000-token prompt).
        let mut calls = 0;
        let e = b
            .calibrate(
                1000,
                |_| {
                    calls += 1;
                    Ok::<u64, String>(50)
                },
                20,
            )
            .unwrap_err();
        assert!(
            matches!(e, CalibrateError::NotGrowing { tokens: 50, .. }),
            "{e}"
        );
        assert!(calls <= 3, "{calls} calls");
    }

    /// llama.cpp answering `{"prompt": …}` with `{"tokens": []}`: every count is 0. This
    /// "calibrated" a 0-token prompt before; now the first count is an error.
    #[test]
    fn a_zero_count_for_text_is_an_error() {
        let mut b = PromptBuilder::new("r", 1000, 1, PromptKind::Completion);
        let mut calls = 0;
        let e = b
            .calibrate(
                1000,
                |_| {
                    calls += 1;
                    Ok::<u64, String>(0)
                },
                24,
            )
            .unwrap_err();
        assert!(
            matches!(e, CalibrateError::Zero { bytes } if bytes > 100),
            "{e}"
        );
        assert_eq!(calls, 1);
        assert!(e.to_string().contains("0 tokens"), "{e}");
    }

    /// A search cut short by its call budget ends more than 1% under the target: an error
    /// with the figures, not a prompt of another size.
    #[test]
    fn a_result_outside_one_percent_is_an_error() {
        let mut b = PromptBuilder::new("r", 8192, 1, PromptKind::Completion);
        let e = b.calibrate(8192, fake_count, 2).unwrap_err();
        let CalibrateError::NotExact {
            target,
            tokens,
            calls,
            ..
        } = e
        else {
            panic!("{e}")
        };
        assert_eq!((target, calls), (8192, 2));
        assert!(tokens * 100 < target * 99, "{tokens}");
    }

    /// A count that moves by several tokens per word (a small vocabulary: two characters per
    /// token, like the 679-token test model) still lands within a token: the last word is cut.
    #[test]
    fn calibration_cuts_inside_a_word_to_land_within_one_token() {
        let coarse = |p: &Prompt| -> Result<u64, ()> {
            let t = match p {
                Prompt::Text(t) => t,
                Prompt::Chat(_) => unreachable!(),
            };
            Ok(t.split_whitespace()
                .map(|w| (w.len() as u64).div_ceil(2))
                .sum())
        };
        for target in [256u64, 300, 1000, 4096] {
            let mut b = PromptBuilder::new("r", target, 2, PromptKind::Completion);
            let c = b.calibrate(target, coarse, 24).unwrap();
            assert!(
                c.tokens <= target && target - c.tokens <= 1,
                "{target}: {}",
                c.tokens
            );
            assert_eq!(coarse(&c.prompt).unwrap(), c.tokens);
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(24))]

            /// Calibration (interpolation + bisection) finds the same prompt as the naive twin:
            /// a linear scan for the longest prose whose count stays within the target.
            #[test]
            fn calibration_matches_a_linear_scan(target in 130u64..1500, seed in 0u64..1000) {
                let mut b = PromptBuilder::new("p", target, seed, PromptKind::Completion);
                let got = b.calibrate(target, fake_count, 20).unwrap();
                // The twin scans with the framing calibration settled on (a small target
                // shrinks it first).
                let mut naive = PromptBuilder::new("p", target, seed, PromptKind::Completion);
                naive.framing = b.framing;
                let mut best = 0;
                for words in 0.. {
                    if fake_count(&naive.build(words)).unwrap() > target {
                        break;
                    }
                    best = words;
                }
                prop_assert_eq!(got.prose_words, best);
                prop_assert!(got.calls <= 20);
            }
        }
    }
}
