//! Model spec strings: how a model is named on the CLI and in config files.
//!
//! - `openai:gpt-4o-mini` (base URL from `--base-url`, `OPENAI_BASE_URL`, else the OpenAI API)
//! - `openai:Qwen2.5-7B-Instruct@http://localhost:8000/v1` (any OpenAI-compatible server)
//! - `local:smollm2-135m`, `local:/path/model.gguf`, `local:/p/m.gguf+/p/adapter.gguf`

use crate::LlmError;

/// Default base URL of the `openai` backend.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A parsed model spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// An OpenAI-compatible `/v1/chat/completions` endpoint.
    OpenAi {
        /// Model name sent in the request body (`gpt-4o-mini`, `Qwen2.5-7B-Instruct`).
        model: String,
        /// Base URL given in the spec after `@`, if any.
        base_url: Option<String>,
    },
    /// The embedded llama.cpp backend; `spec` is everything after `local:`.
    Local { spec: String },
}

impl ModelSpec {
    /// Parse a spec string.
    pub fn parse(spec: &str) -> Result<ModelSpec, LlmError> {
        let bad = |reason: &str| LlmError::Spec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let spec_trim = spec.trim();
        let Some((scheme, rest)) = spec_trim.split_once(':') else {
            return Err(bad(
                "expected `openai:MODEL[@BASE_URL]` or `local:NAME_OR_PATH`",
            ));
        };
        match scheme {
            "openai" => {
                let (model, base_url) = match rest.split_once('@') {
                    Some((m, url)) => {
                        if !(url.starts_with("http://") || url.starts_with("https://")) {
                            return Err(bad("the base URL after `@` must start with http:// or https://"));
                        }
                        (m, Some(url.trim_end_matches('/').to_string()))
                    }
                    None => (rest, None),
                };
                if model.is_empty() {
                    return Err(bad("missing model name after `openai:`"));
                }
                Ok(ModelSpec::OpenAi { model: model.to_string(), base_url })
            }
            "local" => {
                if rest.is_empty() {
                    return Err(bad("missing model name or GGUF path after `local:`"));
                }
                Ok(ModelSpec::Local { spec: rest.to_string() })
            }
            other => Err(bad(&format!(
                "unknown backend {other:?}; expected `openai:MODEL[@BASE_URL]` or `local:NAME_OR_PATH`"
            ))),
        }
    }

    /// The model id used in cache keys, usage reports and price lookups. The base URL is not
    /// part of it: the same model behind another URL shares the cache.
    pub fn id(&self) -> String {
        match self {
            ModelSpec::OpenAi { model, .. } => format!("openai:{model}"),
            ModelSpec::Local { spec } => format!("local:{spec}"),
        }
    }

    /// Whether the model runs on this machine (zero cost).
    pub fn is_local(&self) -> bool {
        matches!(self, ModelSpec::Local { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_documented_forms() {
        assert_eq!(
            ModelSpec::parse("openai:gpt-4o-mini").unwrap(),
            ModelSpec::OpenAi {
                model: "gpt-4o-mini".into(),
                base_url: None
            }
        );
        assert_eq!(
            ModelSpec::parse("openai:Qwen2.5-7B-Instruct@http://localhost:8000/v1/").unwrap(),
            ModelSpec::OpenAi {
                model: "Qwen2.5-7B-Instruct".into(),
                base_url: Some("http://localhost:8000/v1".into())
            }
        );
        assert_eq!(
            ModelSpec::parse("local:/p/m.gguf+/p/adapter.gguf").unwrap(),
            ModelSpec::Local {
                spec: "/p/m.gguf+/p/adapter.gguf".into()
            }
        );
        assert_eq!(
            ModelSpec::parse("local:smollm2-135m").unwrap().id(),
            "local:smollm2-135m"
        );
        assert_eq!(
            ModelSpec::parse("openai:m@http://h:1/v1").unwrap().id(),
            "openai:m",
            "the base URL is not part of the model id"
        );
    }

    #[test]
    fn rejects_bad_specs_with_reason() {
        for bad in [
            "gpt-4o",
            "openai:",
            "local:",
            "azure:x",
            "openai:m@localhost:8000",
        ] {
            let err = ModelSpec::parse(bad).unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
    }
}
