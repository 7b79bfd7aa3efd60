//! Batch files: run a command once in export mode to write the requests it still needs as
//! OpenAI Batch JSONL (`custom_id` = cache key, `POST /v1/chat/completions`), or for an
//! `anthropic:` model as Anthropic Message Batches lines (`{"custom_id", "params"}`), run that
//! file on the OpenAI Batch API, with `vllm run-batch` or on the Message Batches API, import the
//! output into the cache, and rerun the command offline.

use crate::anthropic;
use crate::cache::{cache_key, Cache};
use crate::openai::{chat_body, parse_chat_response, SchemaMode};
use crate::spec::Provider;
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError, Message, Role};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The backend of export mode: records each request it is asked for as one OpenAI Batch line
/// (once per key), or one Message Batches line when the model id is `anthropic:...`, and answers
/// [`LlmError::Deferred`]. Put it under the cache so that cached requests are not exported.
pub struct BatchRecorder {
    id: String,
    anthropic: bool,
    model_name: String,
    schema_mode: SchemaMode,
    path: PathBuf,
    out: Mutex<std::io::BufWriter<std::fs::File>>,
    seen: Mutex<HashSet<String>>,
    cache: Option<Arc<Cache>>,
    meta: Option<Arc<dyn ChatModel>>,
}

impl BatchRecorder {
    /// Create (truncate) `path`. `id` is the model id of the real backend (cache keys must
    /// match), `model_name` the name to put in the request bodies. With a cache, each exported
    /// request is also remembered there as pending, so `batch import` knows its model and request.
    pub fn create(
        path: &Path,
        id: impl Into<String>,
        model_name: impl Into<String>,
        schema_mode: SchemaMode,
        cache: Option<Arc<Cache>>,
    ) -> Result<Self, LlmError> {
        let file = std::fs::File::create(path).map_err(|e| {
            LlmError::Other(format!("cannot create batch file {}: {e}", path.display()))
        })?;
        let id = id.into();
        let anthropic = id.split_once(':').map(|(p, _)| p) == Some(Provider::Anthropic.name());
        Ok(BatchRecorder {
            anthropic,
            id,
            model_name: model_name.into(),
            schema_mode,
            path: path.to_path_buf(),
            out: Mutex::new(std::io::BufWriter::new(file)),
            seen: Mutex::new(HashSet::new()),
            cache,
            meta: None,
        })
    }

    /// Answer `context_size` and `count_tokens` as `real` (the backend a normal run would use)
    /// does, so that methods build the same requests in export mode as in the real run and the
    /// imported answers are cache hits. `real.complete` is never called.
    pub fn with_meta(mut self, real: Arc<dyn ChatModel>) -> Self {
        self.meta = Some(real);
        self
    }

    /// Requests written so far.
    pub fn exported(&self) -> usize {
        self.seen.lock().map(|s| s.len()).unwrap_or(0)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One OpenAI Batch input line.
pub fn batch_line(key: &str, body: Value) -> Value {
    json!({"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body})
}

#[async_trait::async_trait]
impl ChatModel for BatchRecorder {
    fn id(&self) -> &str {
        &self.id
    }

    fn context_size(&self) -> Option<usize> {
        self.meta.as_ref().and_then(|m| m.context_size())
    }

    fn count_tokens(&self, text: &str) -> usize {
        match &self.meta {
            Some(m) => m.count_tokens(text),
            None => crate::estimate_tokens(text),
        }
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let key = cache_key(&self.id, request);
        if self.anthropic && !anthropic::valid_custom_id(&key) {
            return Err(LlmError::Other(format!(
                "cache key {key:?} is not a valid Message Batches custom_id"
            )));
        }
        let fresh = match self.seen.lock() {
            Ok(mut s) => s.insert(key.clone()),
            Err(p) => p.into_inner().insert(key.clone()),
        };
        if fresh {
            let line = if self.anthropic {
                anthropic::batch_line(&key, anthropic::messages_body(&self.model_name, request))
            } else {
                batch_line(&key, chat_body(&self.model_name, request, self.schema_mode))
            };
            let io = |e: std::io::Error| {
                LlmError::Other(format!("writing {}: {e}", self.path.display()))
            };
            {
                let mut out = match self.out.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                writeln!(out, "{}", crate::schema_order::to_string(&line)).map_err(io)?;
                out.flush().map_err(io)?;
            }
            if let Some(cache) = &self.cache {
                let req = serde_json::to_value(request).unwrap_or(Value::Null);
                cache.put_pending(&key, &self.id, &req)?;
            }
        }
        Err(LlmError::Deferred {
            key,
            file: self.path.display().to_string(),
        })
    }
}

/// Turn an OpenAI chat-completions request body into a [`ChatRequest`].
pub fn request_from_openai_body(body: &Value) -> Result<ChatRequest, String> {
    let msgs = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("missing `messages` array")?;
    let mut messages = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("system") | Some("developer") => Role::System,
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            other => return Err(format!("messages[{i}].role: unsupported role {other:?}")),
        };
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .map(|p| {
                    p.get("text")
                        .and_then(Value::as_str)
                        .ok_or(format!("messages[{i}].content: non-text part"))
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(""),
            _ => return Err(format!("messages[{i}].content: expected a string")),
        };
        messages.push(Message { role, content });
    }
    let mut req = ChatRequest::new(messages);
    let num = |k: &str| body.get(k).and_then(Value::as_f64);
    if let Some(t) = num("temperature") {
        req.temperature = t as f32;
    }
    req.top_p = num("top_p").map(|p| p as f32);
    if let Some(n) = body
        .get("max_tokens")
        .or_else(|| body.get("max_completion_tokens"))
    {
        req.max_tokens = n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or("max_tokens: expected an integer")?;
    }
    req.seed = match body.get("seed") {
        None | Some(Value::Null) => None,
        Some(s) => Some(s.as_u64().ok_or("seed: expected a non-negative integer")?),
    };
    req.stop = match body.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        Some(_) => return Err("stop: expected a string or an array".into()),
    };
    req.json_schema = body
        .get("response_format")
        .filter(|rf| rf.get("type").and_then(Value::as_str) == Some("json_schema"))
        .and_then(|rf| rf.get("json_schema"))
        .and_then(|js| js.get("schema"))
        .cloned();
    Ok(req)
}

/// A line of a batch file that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    pub custom_id: Option<String>,
    pub message: String,
}

impl LineError {
    /// `FILE:LINE: [custom_id ID: ]MESSAGE`.
    pub fn located(&self, file: &Path) -> String {
        let id = self
            .custom_id
            .as_deref()
            .map(|id| format!("custom_id {id}: "))
            .unwrap_or_default();
        format!("{}:{}: {id}{}", file.display(), self.line, self.message)
    }
}

/// The first `shown` bad lines of `file`, located, and a count of the rest.
pub fn line_error_report(file: &Path, errors: &[LineError], shown: usize) -> Vec<String> {
    let mut lines: Vec<String> = errors.iter().take(shown).map(|e| e.located(file)).collect();
    if errors.len() > shown {
        lines.push(format!(
            "{}: {} more bad lines",
            file.display(),
            errors.len() - shown
        ));
    }
    lines
}

/// What `batch import` did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ImportReport {
    pub imported: usize,
    /// Keys that were not exported from this cache (no pending entry): imported anyway.
    pub unknown_keys: usize,
    pub errors: Vec<LineError>,
}

impl ImportReport {
    /// The line `batch import` ends with (`cache`: the cache file it wrote).
    pub fn line(&self, cache: &Path) -> String {
        format!(
            "imported {} response(s) into {} ({} not exported from this cache), {} bad line(s)",
            self.imported,
            cache.display(),
            self.unknown_keys,
            self.errors.len()
        )
    }
}

/// Load an OpenAI Batch (or `vllm run-batch`) output file, or Anthropic Message Batches results,
/// into the cache; the format is told per line (`result` is Anthropic's). Lines may come in any
/// order; a bad line (an error, a canceled or expired request) is reported with its number and
/// the rest go on.
pub fn import_output(cache: &Cache, path: &Path) -> Result<ImportReport, LlmError> {
    let file = std::fs::File::open(path).map_err(|e| {
        LlmError::Other(format!("cannot open batch output {}: {e}", path.display()))
    })?;
    let mut report = ImportReport::default();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let n = i + 1;
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                report.errors.push(LineError {
                    line: n,
                    custom_id: None,
                    message: format!("unreadable: {e}"),
                });
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match import_line(cache, &line) {
            Ok(known) => {
                report.imported += 1;
                if !known {
                    report.unknown_keys += 1;
                }
            }
            Err((custom_id, message)) => report.errors.push(LineError {
                line: n,
                custom_id,
                message,
            }),
        }
    }
    Ok(report)
}

fn import_line(cache: &Cache, line: &str) -> Result<bool, (Option<String>, String)> {
    let v: Value = serde_json::from_str(line).map_err(|e| (None, format!("not JSON: {e}")))?;
    let key = v
        .get("custom_id")
        .and_then(Value::as_str)
        .ok_or((None, "missing `custom_id`".to_string()))?
        .to_string();
    let err = |m: String| (Some(key.clone()), m);
    let pending = cache.pending(&key).map_err(|e| err(e.to_string()))?;
    let (response, model) = match v.get("result") {
        Some(result) => anthropic_result(result, pending.as_ref().map(|(_, req)| req)),
        None => openai_output(&v),
    }
    .map_err(err)?;
    let known = pending.is_some();
    let (model, request) = pending.unwrap_or((model, Value::Null));
    cache
        .put(&key, &model, &request, &response)
        .map_err(|e| err(e.to_string()))?;
    Ok(known)
}

/// The answer of an OpenAI Batch output line and the model id its body names.
fn openai_output(v: &Value) -> Result<(ChatResponse, String), String> {
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        return Err(format!("the batch reported an error: {e}"));
    }
    let resp = v.get("response").ok_or("missing `response`")?;
    let status = resp
        .get("status_code")
        .and_then(Value::as_u64)
        .unwrap_or(200);
    // OpenAI and vLLM write `response: {status_code, request_id, body}`; accept a bare
    // chat completion as `response` too.
    let body = match resp.get("body") {
        Some(b) => b,
        None if resp.get("choices").is_some() => resp,
        None => return Err("missing `response.body`".into()),
    };
    if status != 200 {
        return Err(format!("status {status}: {body}"));
    }
    let response = parse_chat_response(body).map_err(|m| format!("response.body: {m}"))?;
    let name = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    Ok((response, format!("openai:{name}")))
}

/// The answer of a Message Batches result (`{"type": "succeeded", "message"}`; errored,
/// canceled and expired ones are errors) and the model id its message names. `request` is the
/// exported request, which tells whether its schema was wrapped; without it the tool input is
/// taken as it is.
fn anthropic_result(
    result: &Value,
    request: Option<&Value>,
) -> Result<(ChatResponse, String), String> {
    match result.get("type").and_then(Value::as_str) {
        Some("succeeded") => {
            let message = result.get("message").ok_or("missing `result.message`")?;
            let wrapped = request
                .and_then(|r| r.get("json_schema"))
                .is_some_and(anthropic::wraps);
            let response = anthropic::parse_messages_response(message, wrapped)
                .map_err(|m| format!("result.message: {m}"))?;
            let name = message
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            Ok((response, format!("anthropic:{name}")))
        }
        Some("errored") => {
            let e = result.get("error").unwrap_or(&Value::Null);
            let what = anthropic::error_summary(e).unwrap_or_else(|| e.to_string());
            Err(format!("the batch reported an error: {what}"))
        }
        Some(t @ ("canceled" | "expired")) => Err(format!("the request was {t} before it ran")),
        other => Err(format!("unknown `result.type` {other:?}")),
    }
}

/// Requests with their 1-based line numbers.
pub type NumberedRequests = Vec<(usize, ChatRequest)>;

/// Read a JSONL of requests for `batch run`: OpenAI Batch lines (`{"custom_id", "body": {...}}`),
/// Anthropic Message Batches lines (`{"custom_id", "params": {...}}`; the API has no seed, so
/// they get [`ChatRequest::new`]'s, and merged turns stay merged: a request exported with another
/// seed or with turns to merge comes back with another cache key) or plain [`ChatRequest`]
/// objects. Bad lines are reported with their number.
pub fn read_requests(path: &Path) -> Result<(NumberedRequests, Vec<LineError>), LlmError> {
    let file = std::fs::File::open(path)
        .map_err(|e| LlmError::Other(format!("cannot open requests {}: {e}", path.display())))?;
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let n = i + 1;
        let parsed = line.map_err(|e| e.to_string()).and_then(|line| {
            if line.trim().is_empty() {
                return Ok(None);
            }
            let v: Value = serde_json::from_str(&line).map_err(|e| format!("not JSON: {e}"))?;
            let req = if let Some(body) = v.get("body") {
                request_from_openai_body(body).map_err(|m| format!("body.{m}"))?
            } else if let Some(params) = v.get("params") {
                anthropic::request_from_params(params).map_err(|m| format!("params.{m}"))?
            } else {
                serde_json::from_value::<ChatRequest>(v).map_err(|e| e.to_string())?
            };
            Ok(Some(req))
        });
        match parsed {
            Ok(Some(r)) => ok.push((n, r)),
            Ok(None) => {}
            Err(message) => errors.push(LineError {
                line: n,
                custom_id: None,
                message,
            }),
        }
    }
    Ok((ok, errors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CachePolicy;
    use crate::cache::CachedModel;

    #[tokio::test]
    async fn export_then_import_then_replay() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(Cache::open(dir.path().join("c.sqlite")).unwrap());
        let file = dir.path().join("batch.jsonl");
        let rec = Arc::new(
            BatchRecorder::create(
                &file,
                "openai:gpt-4o-mini",
                "gpt-4o-mini",
                SchemaMode::Auto,
                Some(cache.clone()),
            )
            .unwrap(),
        );
        let m = CachedModel::new(rec.clone(), cache.clone(), CachePolicy::ReadWrite);
        let reqs: Vec<ChatRequest> = (0..3)
            .map(|i| ChatRequest::new(vec![Message::user(format!("question {i}"))]))
            .collect();
        for r in reqs.iter().chain(reqs.iter()) {
            assert!(matches!(
                m.complete(r).await,
                Err(LlmError::Deferred { .. })
            ));
        }
        assert_eq!(rec.exported(), 3);
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["url"], "/v1/chat/completions");
        assert_eq!(
            lines[0]["custom_id"].as_str().unwrap(),
            cache_key("openai:gpt-4o-mini", &reqs[0])
        );
        assert_eq!(
            request_from_openai_body(&lines[1]["body"]).unwrap(),
            reqs[1]
        );
        assert_eq!(cache.stats().unwrap().pending, 3);

        // An output file in another order, with a failed line and a garbage line.
        let out = dir.path().join("out.jsonl");
        let ok = |k: &Value, t: &str| {
            json!({"id": "x", "custom_id": k, "error": null, "response": {"status_code": 200, "body": {
                "model": "gpt-4o-mini", "choices": [{"message": {"role": "assistant", "content": t},
                "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}}})
        };
        let failed = json!({"custom_id": lines[1]["custom_id"], "response": null,
                            "error": {"code": "server_error", "message": "boom"}});
        let mut bare = ok(&lines[0]["custom_id"], "zero");
        bare["response"] = bare["response"]["body"].clone();
        let body = format!(
            "{}\n{}\nnot json\n\n{}\n",
            ok(&lines[2]["custom_id"], "two"),
            failed,
            bare
        );
        std::fs::write(&out, body).unwrap();
        let rep = import_output(&cache, &out).unwrap();
        assert_eq!(rep.imported, 2);
        assert_eq!(rep.unknown_keys, 0);
        assert_eq!(
            rep.errors.iter().map(|e| e.line).collect::<Vec<_>>(),
            vec![2, 3]
        );
        assert!(rep.errors[0].message.contains("boom"));
        let stats = cache.stats().unwrap();
        assert_eq!((stats.entries, stats.pending), (2, 1));
        assert_eq!(stats.by_model[0].model, "openai:gpt-4o-mini");

        // Rerun offline: imported answers come from the cache, the failed one is a replay miss.
        let replay = CachedModel::new(rec.clone(), cache.clone(), CachePolicy::Replay);
        assert_eq!(replay.complete(&reqs[0]).await.unwrap().text, "zero");
        assert_eq!(replay.complete(&reqs[2]).await.unwrap().text, "two");
        assert!(matches!(
            replay.complete(&reqs[1]).await,
            Err(LlmError::ReplayMiss { .. })
        ));
    }

    #[test]
    fn reads_both_request_forms_and_reports_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        let plain = serde_json::to_string(&ChatRequest::new(vec![Message::user("a")])).unwrap();
        let line = batch_line(
            "k",
            json!({"model": "m", "messages": [{"role": "user", "content": "b"}],
            "max_completion_tokens": 9, "stop": "x"}),
        );
        std::fs::write(&p, format!("{plain}\n{line}\n{{\"body\": {{}}}}\n[1]\n")).unwrap();
        let (ok, errs) = read_requests(&p).unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].1.max_tokens, 9);
        assert_eq!(ok[1].1.stop, vec!["x".to_string()]);
        assert_eq!(errs.iter().map(|e| e.line).collect::<Vec<_>>(), vec![3, 4]);
        assert!(errs[0].message.contains("messages"));
    }
}
