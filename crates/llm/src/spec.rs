//! Model spec strings: how a model is named on the CLI and in config files.
//!
//! Two spellings, the same meaning: `provider:MODEL` and the `provider/MODEL` form that LiteLLM,
//! DSPy and inspect_ai use. An `@BASE_URL` suffix points any provider at another server.
//!
//! | spec | provider | base URL (default) | API key variable |
//! |---|---|---|---|
//! | `openai:gpt-4o-mini`, `openai/gpt-4o-mini` | OpenAI | `OPENAI_BASE_URL`, else the OpenAI API | `OPENAI_API_KEY` |
//! | `openai:NAME@http://host:8000/v1` | any OpenAI-compatible server | the URL | `OPENAI_API_KEY` (optional) |
//! | `gemini/gemini-2.0-flash` | Gemini, through its OpenAI-compatible endpoint | `https://generativelanguage.googleapis.com/v1beta/openai` | `GEMINI_API_KEY` |
//! | `anthropic/claude-3-5-haiku-latest` | Anthropic, native Messages API ([`crate::anthropic`]) | `ANTHROPIC_BASE_URL` (`/v1` added when missing), else `https://api.anthropic.com/v1` | `ANTHROPIC_API_KEY` |
//! | `ollama/llama3.2` | Ollama | `OLLAMA_HOST` (`host:port`), else `http://localhost:11434/v1` | none |
//! | `vllm/Qwen/Qwen2.5-7B-Instruct` | vLLM | `VLLM_BASE_URL`, else `http://localhost:8000/v1` | `VLLM_API_KEY` (optional) |
//! | `local:smollm2-135m`, `local/smollm2-135m`, `local:/path/model.gguf`, `local:/p/m.gguf+/p/adapter.gguf` | embedded llama.cpp | | |
//!
//! `--base-url` and `--api-key-env` (or `api_key_env` in the config) override the table.

use crate::LlmError;

/// Default base URL of the `openai` backend.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A provider reached over HTTP: the OpenAI chat-completions protocol, or for
/// [`Provider::Anthropic`] the Messages API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Gemini,
    Anthropic,
    Ollama,
    Vllm,
}

impl Provider {
    /// Every provider, in the order the docs list them.
    pub const ALL: [Provider; 5] = [
        Provider::OpenAi,
        Provider::Gemini,
        Provider::Anthropic,
        Provider::Ollama,
        Provider::Vllm,
    ];

    /// The name in specs and model ids.
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Gemini => "gemini",
            Provider::Anthropic => "anthropic",
            Provider::Ollama => "ollama",
            Provider::Vllm => "vllm",
        }
    }

    fn from_name(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The base URL when neither the spec, `--base-url` nor the provider's variable gives one.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::OpenAi => OPENAI_DEFAULT_BASE_URL,
            Provider::Gemini => "https://generativelanguage.googleapis.com/v1beta/openai",
            Provider::Anthropic => "https://api.anthropic.com/v1",
            Provider::Ollama => "http://localhost:11434/v1",
            Provider::Vllm => "http://localhost:8000/v1",
        }
    }

    /// The environment variable that may hold the base URL, and how its value becomes one.
    pub fn base_url_env(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some("OPENAI_BASE_URL"),
            Provider::Ollama => Some("OLLAMA_HOST"),
            Provider::Vllm => Some("VLLM_BASE_URL"),
            // The variable the Anthropic SDKs read; its value is the host, without `/v1`.
            Provider::Anthropic => Some("ANTHROPIC_BASE_URL"),
            Provider::Gemini => None,
        }
    }

    /// A base URL from the provider's variable: `OLLAMA_HOST` is `host:port` (Ollama's own
    /// convention), the others are URLs; `/v1` is added to Ollama's and to `ANTHROPIC_BASE_URL`
    /// (the Anthropic SDKs' convention is the host alone) when missing.
    pub fn base_url_from_env_value(self, value: &str) -> Option<String> {
        let value = value.trim().trim_end_matches('/');
        if value.is_empty() {
            return None;
        }
        Some(match self {
            Provider::Ollama if !value.contains("://") => format!("http://{value}/v1"),
            Provider::Ollama | Provider::Anthropic if !value.ends_with("/v1") => {
                format!("{value}/v1")
            }
            _ => value.to_string(),
        })
    }

    /// The variable the API key is read from; `None` for servers that need none.
    pub fn key_env(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some("OPENAI_API_KEY"),
            Provider::Gemini => Some("GEMINI_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            Provider::Ollama => None,
            Provider::Vllm => Some("VLLM_API_KEY"),
        }
    }
}

/// A model id (or price-table key) without its provider prefix: `gpt-4o-mini` for
/// `openai:gpt-4o-mini`, `gemini-2.0-flash` for `gemini:gemini-2.0-flash`; other text as it is.
pub fn without_provider(id: &str) -> &str {
    Provider::ALL
        .iter()
        .find_map(|p| id.strip_prefix(p.name()).and_then(|r| r.strip_prefix(':')))
        .unwrap_or(id)
}

/// A parsed model spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// An HTTP provider: an OpenAI-compatible `/v1/chat/completions` endpoint, or Anthropic's
    /// Messages API (`provider: Anthropic`).
    OpenAi {
        /// Who serves it: decides the default base URL, the key variable and the model id.
        provider: Provider,
        /// Model name sent in the request body (`gpt-4o-mini`, `Qwen2.5-7B-Instruct`).
        model: String,
        /// Base URL given in the spec after `@`, if any.
        base_url: Option<String>,
    },
    /// The embedded llama.cpp backend; `spec` is everything after `local:`.
    Local { spec: String },
}

const EXPECTED: &str =
    "expected `PROVIDER:MODEL` or `PROVIDER/MODEL` with PROVIDER one of openai, \
     gemini, anthropic, ollama, vllm (optionally `@BASE_URL`), or `local:NAME_OR_PATH`";

impl ModelSpec {
    /// Parse a spec string (the forms in the module docs).
    pub fn parse(spec: &str) -> Result<ModelSpec, LlmError> {
        let bad = |reason: &str| LlmError::Spec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let spec_trim = spec.trim();
        // The separator is whichever of `:` and `/` comes first: `local:/p/m.gguf`,
        // `openai:org/model`, `vllm/Qwen/Qwen2.5-7B`, `ollama/llama3.2:3b`.
        let sep = spec_trim.find([':', '/']);
        let Some(sep) = sep else {
            return Err(bad(EXPECTED));
        };
        let (scheme, rest) = (&spec_trim[..sep], &spec_trim[sep + 1..]);
        if scheme == "local" {
            if rest.is_empty() {
                return Err(bad("missing model name or GGUF path after `local:`"));
            }
            return Ok(ModelSpec::Local {
                spec: rest.to_string(),
            });
        }
        let Some(provider) = Provider::from_name(scheme) else {
            return Err(bad(&format!("unknown provider {scheme:?}; {EXPECTED}")));
        };
        let (model, base_url) = match rest.rsplit_once('@') {
            Some((m, url)) if url.starts_with("http://") || url.starts_with("https://") => {
                (m, Some(url.trim_end_matches('/').to_string()))
            }
            Some(_) => {
                return Err(bad(
                    "the base URL after `@` must start with http:// or https://",
                ))
            }
            None => (rest, None),
        };
        if model.is_empty() {
            return Err(bad(&format!(
                "missing model name after `{scheme}{}`",
                &spec_trim[sep..=sep]
            )));
        }
        Ok(ModelSpec::OpenAi {
            provider,
            model: model.to_string(),
            base_url,
        })
    }

    /// The model id used in cache keys, usage reports and price lookups: `provider:MODEL`,
    /// whichever spelling named it. The base URL is not part of it: the same model behind
    /// another URL shares the cache.
    pub fn id(&self) -> String {
        match self {
            ModelSpec::OpenAi {
                provider, model, ..
            } => format!("{}:{model}", provider.name()),
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
                provider: Provider::OpenAi,
                model: "gpt-4o-mini".into(),
                base_url: None
            }
        );
        assert_eq!(
            ModelSpec::parse("openai:Qwen2.5-7B-Instruct@http://localhost:8000/v1/").unwrap(),
            ModelSpec::OpenAi {
                provider: Provider::OpenAi,
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
            "azure/x",
            "openai:m@localhost:8000",
            "gemini/",
            "vllm/m@ftp://h",
        ] {
            let err = ModelSpec::parse(bad).unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
    }

    /// The table of the module docs (and docs/llm.md): each form -> provider, model, base URL
    /// and key variable, with no environment variable set.
    #[test]
    fn each_form_names_provider_model_base_url_and_key_variable() {
        let rows: &[(&str, &str, &str, &str, Option<&str>)] = &[
            (
                "openai:gpt-4o-mini",
                "openai",
                "gpt-4o-mini",
                OPENAI_DEFAULT_BASE_URL,
                Some("OPENAI_API_KEY"),
            ),
            (
                "openai/gpt-4o-mini",
                "openai",
                "gpt-4o-mini",
                OPENAI_DEFAULT_BASE_URL,
                Some("OPENAI_API_KEY"),
            ),
            (
                "openai:Qwen/Qwen2.5-7B@http://h:8000/v1/",
                "openai",
                "Qwen/Qwen2.5-7B",
                "http://h:8000/v1",
                Some("OPENAI_API_KEY"),
            ),
            (
                "gemini/gemini-2.0-flash",
                "gemini",
                "gemini-2.0-flash",
                "https://generativelanguage.googleapis.com/v1beta/openai",
                Some("GEMINI_API_KEY"),
            ),
            (
                "gemini:gemini-2.0-flash",
                "gemini",
                "gemini-2.0-flash",
                "https://generativelanguage.googleapis.com/v1beta/openai",
                Some("GEMINI_API_KEY"),
            ),
            (
                "anthropic/claude-3-5-haiku-latest",
                "anthropic",
                "claude-3-5-haiku-latest",
                "https://api.anthropic.com/v1",
                Some("ANTHROPIC_API_KEY"),
            ),
            (
                "ollama/llama3.2:3b",
                "ollama",
                "llama3.2:3b",
                "http://localhost:11434/v1",
                None,
            ),
            (
                "vllm/Qwen/Qwen2.5-7B-Instruct",
                "vllm",
                "Qwen/Qwen2.5-7B-Instruct",
                "http://localhost:8000/v1",
                Some("VLLM_API_KEY"),
            ),
            (
                "vllm/m@https://gpu.example/v1",
                "vllm",
                "m",
                "https://gpu.example/v1",
                Some("VLLM_API_KEY"),
            ),
        ];
        for (spec, provider, model, base, key) in rows {
            let ModelSpec::OpenAi {
                provider: p,
                model: m,
                base_url,
            } = ModelSpec::parse(spec).unwrap()
            else {
                panic!("{spec}: not an HTTP provider");
            };
            assert_eq!((p.name(), m.as_str()), (*provider, *model), "{spec}");
            let base_url = base_url.unwrap_or_else(|| p.default_base_url().to_string());
            assert_eq!(base_url, *base, "{spec}");
            assert_eq!(p.key_env(), *key, "{spec}");
            assert_eq!(
                ModelSpec::parse(spec).unwrap().id(),
                format!("{provider}:{model}")
            );
        }
        for spec in ["local:smollm2-135m", "local/smollm2-135m"] {
            assert_eq!(
                ModelSpec::parse(spec).unwrap(),
                ModelSpec::Local {
                    spec: "smollm2-135m".into()
                },
                "{spec}"
            );
        }
        assert_eq!(
            ModelSpec::parse("local:/p/m.gguf").unwrap(),
            ModelSpec::Local {
                spec: "/p/m.gguf".into()
            }
        );
    }

    #[test]
    fn provider_variables_become_base_urls() {
        let o = Provider::Ollama;
        assert_eq!(
            o.base_url_from_env_value("127.0.0.1:11500").as_deref(),
            Some("http://127.0.0.1:11500/v1")
        );
        assert_eq!(
            o.base_url_from_env_value("http://box:11434/").as_deref(),
            Some("http://box:11434/v1")
        );
        assert_eq!(
            Provider::Vllm
                .base_url_from_env_value("http://g:9/v1")
                .as_deref(),
            Some("http://g:9/v1")
        );
        assert_eq!(Provider::OpenAi.base_url_from_env_value("  "), None);
        let a = Provider::Anthropic;
        assert_eq!(a.base_url_env(), Some("ANTHROPIC_BASE_URL"));
        for value in ["https://proxy.example", "https://proxy.example/v1/"] {
            assert_eq!(
                a.base_url_from_env_value(value).as_deref(),
                Some("https://proxy.example/v1"),
                "{value}"
            );
        }
    }
}
