use std::path::PathBuf;

/// Everything that can go wrong reading a tokenizer or a chat template, or rendering one.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// `tokenizer.ggml.model` is absent or `none`: the file carries no vocabulary.
    #[error(
        "{path}: the file has no vocabulary (tokenizer.ggml.model is {model}); \
         tokenizing needs a GGUF with tokenizer.ggml.tokens"
    )]
    NoVocabulary { path: PathBuf, model: String },
    /// A tokenizer model other than gpt2-style byte-level BPE.
    #[error("{path}: tokenizer.ggml.model = {model:?} is not supported (tally reads \"gpt2\")")]
    UnsupportedModel { path: PathBuf, model: String },
    /// A pre-tokenizer tally does not implement.
    #[error(
        "{path}: tokenizer.ggml.pre = {pre:?} is not supported (tally reads \"qwen35\" and \"qwen2\")"
    )]
    UnsupportedPre { path: PathBuf, pre: String },
    /// A required key is missing or has the wrong type.
    #[error("{path}: metadata {key}: {reason}")]
    Metadata {
        path: PathBuf,
        key: &'static str,
        reason: String,
    },
    /// `tokenizer.chat_template` is absent.
    #[error(
        "{path}: the file has no chat template (metadata key tokenizer.chat_template is absent); \
         give one explicitly (--template FILE)"
    )]
    NoTemplate { path: PathBuf },
    /// The template does not parse.
    #[error("chat template does not parse: {0}")]
    TemplateSyntax(String),
    /// Rendering failed (including the template's own `raise_exception`).
    #[error("chat template failed to render: {0}")]
    TemplateRender(String),
}
