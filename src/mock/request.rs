//! A generation request after validation, whichever endpoint it came through: the OpenAI
//! ones (`http`) and the engines' native ones (`native`) each parse their body into a
//! [`GenRequest`], which the handlers run on the engine. Plain data.

/// A generation request, validated; every field as vLLM reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct GenRequest {
    /// One token list per choice; each non-empty.
    pub prompts: Vec<Vec<u32>>,
    /// `None`: up to `max_model_len`.
    pub max_tokens: Option<u32>,
    pub min_tokens: u32,
    pub stream: bool,
    pub include_usage: bool,
    pub continuous: bool,
    pub return_token_ids: bool,
    pub ignore_eos: bool,
    pub salt: Option<String>,
    pub user_seed: u64,
    /// TGI `parameters.details`: the last event carries the finish reason and token count.
    pub details: bool,
    /// The chat messages' `image_url` parts, in order (their tokens are not in `prompts` until
    /// [`super::image::add_image_tokens`] puts them there).
    pub images: Vec<super::image::Seen>,
}
