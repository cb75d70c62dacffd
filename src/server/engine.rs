//! Which server software answers: the engine vocabulary that detection (`probe`), the
//! `/metrics` sampler and the `/tokenize` dialects share. Pure data, no IO.

/// The server software, as far as its endpoints tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    Vllm,
    Sglang,
    Tgi,
    LlamaCpp,
    Ollama,
    /// An OpenAI-compatible server we could not name.
    OpenAi,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
            EngineKind::Tgi => "tgi",
            EngineKind::LlamaCpp => "llama.cpp",
            EngineKind::Ollama => "ollama",
            EngineKind::OpenAi => "openai",
        }
    }

    pub fn repository(self) -> Option<&'static str> {
        match self {
            EngineKind::Vllm => Some("github.com/vllm-project/vllm"),
            EngineKind::Sglang => Some("github.com/sgl-project/sglang"),
            EngineKind::Tgi => Some("github.com/huggingface/text-generation-inference"),
            EngineKind::LlamaCpp => Some("github.com/ggml-org/llama.cpp"),
            EngineKind::Ollama => Some("github.com/ollama/ollama"),
            EngineKind::OpenAi => None,
        }
    }
}
