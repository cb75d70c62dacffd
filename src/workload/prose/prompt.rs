//! The prompts built around the prose: a unique first line (the run, context and seed), the
//! framing (an introduction, the prose as a reference document, a request for a long answer)
//! in chat or completions shape, and the framing's smaller forms for small contexts.

use super::text::Prose;

/// Chat or completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PromptKind {
    /// Three turns on `/v1/chat/completions`.
    Chat,
    /// One text on `/v1/completions`.
    Completion,
}

impl PromptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptKind::Chat => "chat",
            PromptKind::Completion => "completion",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "system" => Some(Role::System),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

/// A prompt ready to be put into a request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    Chat(Vec<ChatMessage>),
    Text(String),
}

impl Prompt {
    pub fn kind(&self) -> PromptKind {
        match self {
            Prompt::Chat(_) => PromptKind::Chat,
            Prompt::Text(_) => PromptKind::Completion,
        }
    }

    /// Total bytes of text (for sizing request buffers).
    pub fn text_len(&self) -> usize {
        match self {
            Prompt::Chat(m) => m.iter().map(|m| m.content.len()).sum(),
            Prompt::Text(t) => t.len(),
        }
    }
}

const INTRO: &str =
    "The reference document below is the only source for the task that follows. Read all of it.";
const ACK: &str =
    "Understood. I have read the whole reference document and will rely on it alone. \
    What would you like me to write?";
const SHORT_REQUEST: &str = "Continue:";
const REQUEST: &str = "Write a very long, detailed article based on the reference document above. \
    Go through its places, people, trades and events one by one, explain how they connect and why \
    they matter, quote specific details, and add a section of open questions at the end. \
    Do not summarise briefly and do not stop early: keep writing until every part is covered.";

/// Builds the prompts of one (run, context, seed): a unique first line so the first request is
/// a genuine prefix-cache miss, a reference document of prose, and a request for a long answer.
pub struct PromptBuilder {
    kind: PromptKind,
    prefix: String,
    pub(super) prose: Prose,
    pub(super) framing: Framing,
}

/// What surrounds the prose. [`PromptBuilder::calibrate`] starts from the fullest and shrinks
/// it while it would take more than [`FRAMING_SHARE`](super::calibrate::FRAMING_SHARE) of the target, so small contexts build on
/// any vocabulary (a 679-token vocabulary spells the full framing in ~350 tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// The first line, an introduction, the prose, and a request for a long article.
    Full,
    /// The first line, the prose and a one-line request.
    Short,
    /// The first line (the run id) and the prose.
    Line,
    /// The prose alone ([`PromptBuilder::bare`]).
    Bare,
}

impl Framing {
    /// The next smaller framing that keeps the first line; `None` from `Line` (the run id must
    /// stay: it makes each run's prompts new to the server) and from `Bare`.
    pub(super) fn smaller(self) -> Option<Framing> {
        match self {
            Framing::Full => Some(Framing::Short),
            Framing::Short => Some(Framing::Line),
            Framing::Line | Framing::Bare => None,
        }
    }
}

/// The first line of every prompt: unique per run so the first request of a run is a genuine
/// prefix-cache miss.
pub fn prompt_prefix(run_id: &str, context_tokens: u64, seed: u64) -> String {
    format!("[llmspeed run {run_id} context {context_tokens} seed {seed}]")
}

impl Prompt {
    /// Replace the first line's `old` prefix with `new` (a cached prompt stored under a
    /// placeholder run id gets this run's id). `false`, and nothing changed, when the prompt
    /// does not start with `old`.
    pub fn replace_prefix(&mut self, old: &str, new: &str) -> bool {
        let first = match self {
            Prompt::Chat(m) => match m.first_mut() {
                Some(m) => &mut m.content,
                None => return false,
            },
            Prompt::Text(t) => t,
        };
        if !first.starts_with(old) {
            return false;
        }
        first.replace_range(..old.len(), new);
        true
    }
}

impl PromptBuilder {
    /// `run_id` and `context_tokens` go into the first line; `seed` picks the prose.
    pub fn new(run_id: &str, context_tokens: u64, seed: u64, kind: PromptKind) -> Self {
        Self {
            kind,
            prefix: prompt_prefix(run_id, context_tokens, seed),
            prose: Prose::new(seed),
            framing: Framing::Full,
        }
    }

    /// Completion prompts of prose alone, no first line or framing: dataset prompts of a
    /// measured size where token ids cannot be sent (`bench serve` on chat, or a server whose
    /// vocabulary is unknown). Different seeds differ from the first word.
    pub fn bare(seed: u64) -> Self {
        Self {
            kind: PromptKind::Completion,
            prefix: String::new(),
            prose: Prose::new(seed),
            framing: Framing::Bare,
        }
    }

    /// The prompt with the first `words` words of prose as its body.
    pub fn build(&mut self, words: usize) -> Prompt {
        self.prose.extend_to_words(words);
        let end = self.prose.prefix_words(words).len();
        self.build_bytes(end)
    }

    /// Byte offset just past word `words` (the prose must hold that many words).
    pub(super) fn word_end(&mut self, words: usize) -> usize {
        self.prose.extend_to_words(words);
        self.prose.prefix_words(words).len()
    }

    /// The prompt whose body is the first `end` bytes of prose (a character boundary): the
    /// last word may be cut, which sizes a prompt finer than one word.
    pub(super) fn build_bytes(&mut self, end: usize) -> Prompt {
        let body = &self.prose.text()[..end];
        let prefix = &self.prefix;
        match (self.framing, self.kind) {
            (Framing::Bare, _) => Prompt::Text(body.to_string()),
            (Framing::Line, PromptKind::Completion) => Prompt::Text(format!("{prefix}\n{body}")),
            (Framing::Line, PromptKind::Chat) => Prompt::Chat(vec![ChatMessage {
                role: Role::User,
                content: format!("{prefix}\n{body}"),
            }]),
            (Framing::Short, PromptKind::Completion) => {
                Prompt::Text(format!("{prefix}\n{body}\n\n{SHORT_REQUEST}\n"))
            }
            (Framing::Short, PromptKind::Chat) => Prompt::Chat(vec![ChatMessage {
                role: Role::User,
                content: format!("{prefix}\n{body}\n\n{SHORT_REQUEST}"),
            }]),
            (Framing::Full, PromptKind::Chat) => Prompt::Chat(vec![
                ChatMessage {
                    role: Role::User,
                    content: format!("{}\n{INTRO}\n\n{body}", self.prefix),
                },
                ChatMessage {
                    role: Role::Assistant,
                    content: ACK.to_string(),
                },
                ChatMessage {
                    role: Role::User,
                    content: REQUEST.to_string(),
                },
            ]),
            (Framing::Full, PromptKind::Completion) => Prompt::Text(format!(
                "{prefix}\n{INTRO}\n\n{body}\n\n{REQUEST}\n\nArticle:\n"
            )),
        }
    }

    /// The framing the prompts are built with.
    pub fn framing(&self) -> Framing {
        self.framing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_prefix_swaps_the_run_id_and_nothing_else() {
        for kind in [PromptKind::Chat, PromptKind::Completion] {
            let mut cached = PromptBuilder::new("xxxxxxxx", 4096, 3, kind).build(200);
            let fresh = PromptBuilder::new("0badc0de", 4096, 3, kind).build(200);
            assert_ne!(cached, fresh);
            let (old, new) = (
                prompt_prefix("xxxxxxxx", 4096, 3),
                prompt_prefix("0badc0de", 4096, 3),
            );
            assert!(cached.replace_prefix(&old, &new));
            assert_eq!(cached, fresh);
            // A prompt of another context or seed is left alone.
            assert!(!cached.replace_prefix(&prompt_prefix("0badc0de", 4096, 4), &old));
            assert_eq!(cached, fresh);
        }
    }

    #[test]
    fn chat_prompt_shape() {
        let mut b = PromptBuilder::new("run-42", 8192, 3, PromptKind::Chat);
        let Prompt::Chat(m) = b.build(200) else {
            panic!("chat expected")
        };
        let roles: Vec<Role> = m.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
        assert!(m[0]
            .content
            .starts_with("[llmspeed run run-42 context 8192 seed 3]\n"));
        assert!(m[2].content.contains("very long, detailed article"));
        // A different context differs at the very first line: a prefix-cache miss.
        let mut b2 = PromptBuilder::new("run-42", 16384, 3, PromptKind::Completion);
        let Prompt::Text(t) = b2.build(200) else {
            panic!("text expected")
        };
        assert!(t.starts_with("[llmspeed run run-42 context 16384 seed 3]\n"));
        assert!(t.ends_with("Article:\n"));
    }
}
