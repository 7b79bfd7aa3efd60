//! The LLM call cache: SQLite (WAL, busy timeout), one row per call, written as soon as the
//! answer arrives, so a run killed at any moment loses at most the calls in flight and a rerun
//! is free. Safe under concurrent writers, in one process and across processes.
//!
//! The key is a SHA-256 over a canonical JSON of model id, messages and sampling parameters
//! (temperature, top_p, max_tokens, seed, stop, json_schema, grammar). The accounting label
//! `stage` and the server's base URL are not part of it.

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError, Usage};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How the cache is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// Answer from the cache when possible, record every new call.
    #[default]
    ReadWrite,
    /// Answer only from the cache; a miss is [`LlmError::ReplayMiss`].
    Replay,
}

/// Write `v` as JSON with object keys sorted at every level (independent of serde_json's
/// `preserve_order` feature), no whitespace.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                if let Some(x) = map.get(*k) {
                    write_canonical(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The cache key of `request` sent to model `model_id`: hex SHA-256 of a canonical JSON.
pub fn cache_key(model_id: &str, request: &ChatRequest) -> String {
    let material = json!({
        "v": 1,
        "model": model_id,
        "messages": request.messages,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_tokens": request.max_tokens,
        "seed": request.seed,
        "stop": request.stop,
        "json_schema": request.json_schema,
        "grammar": request.grammar,
    });
    hex::encode(Sha256::digest(canonical_json(&material).as_bytes()))
}

/// A cached call.
#[derive(Debug, Clone)]
pub struct CacheEntry {
    pub key: String,
    pub model: String,
    pub request: Value,
    pub response: ChatResponse,
    pub created_at: u64,
}

/// Per-model totals of `maslens cache stats`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ModelStats {
    pub model: String,
    pub entries: u64,
    /// Tokens summed over the model's entries.
    #[serde(flatten)]
    pub usage: Usage,
}

/// What `maslens cache stats` prints.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CacheStats {
    pub path: PathBuf,
    pub entries: u64,
    /// Requests exported to a batch file and not imported yet.
    pub pending: u64,
    pub bytes: u64,
    pub by_model: Vec<ModelStats>,
}

/// Hit / miss / write counters of this process.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct CacheCounters {
    pub hits: u64,
    pub misses: u64,
    pub writes: u64,
}

/// The SQLite cache file.
pub struct Cache {
    path: PathBuf,
    conn: Mutex<Connection>,
    hits: AtomicU64,
    misses: AtomicU64,
    writes: AtomicU64,
}

fn db_err(path: &Path) -> impl Fn(rusqlite::Error) -> LlmError + '_ {
    move |e| LlmError::Cache(format!("{}: {e}", path.display()))
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Cache {
    /// Open (creating it and its directory if needed) the cache at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Cache, LlmError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    LlmError::Cache(format!("cannot create {}: {e}", dir.display()))
                })?;
            }
        }
        let err = db_err(&path);
        let conn = Connection::open(&path).map_err(&err)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(&err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(&err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(&err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS calls (
                key TEXT PRIMARY KEY,
                model TEXT NOT NULL,
                request TEXT NOT NULL,
                response TEXT NOT NULL,
                prompt_tokens INTEGER NOT NULL,
                cached_tokens INTEGER NOT NULL,
                completion_tokens INTEGER NOT NULL,
                latency_ms INTEGER NOT NULL,
                created_at INTEGER NOT NULL
            );
            CREATE INDEX IF NOT EXISTS calls_model ON calls(model);
            CREATE TABLE IF NOT EXISTS pending (
                key TEXT PRIMARY KEY,
                model TEXT NOT NULL,
                request TEXT NOT NULL,
                created_at INTEGER NOT NULL
            );",
        )
        .map_err(&err)?;
        drop(err);
        Ok(Cache {
            path,
            conn: Mutex::new(conn),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        })
    }

    /// `$MASLENS_HOME/cache.sqlite` (`MASLENS_HOME` defaults to `~/.cache/maslens`).
    pub fn default_path() -> PathBuf {
        crate::maslens_home().join("cache.sqlite")
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        match self.conn.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Look a key up (counts a hit or a miss).
    pub fn get(&self, key: &str) -> Result<Option<ChatResponse>, LlmError> {
        self.fetch(key, true)
    }

    fn fetch(&self, key: &str, count_miss: bool) -> Result<Option<ChatResponse>, LlmError> {
        let found: Option<String> = self
            .conn()
            .prepare_cached("SELECT response FROM calls WHERE key = ?1")
            .and_then(|mut st| st.query_row([key], |r| r.get(0)).optional())
            .map_err(db_err(&self.path))?;
        match found {
            Some(text) => {
                let mut resp: ChatResponse = serde_json::from_str(&text).map_err(|e| {
                    LlmError::Cache(format!(
                        "{}: entry {key}: unreadable response: {e}",
                        self.path.display()
                    ))
                })?;
                resp.from_cache = true;
                self.hits.fetch_add(1, Ordering::Relaxed);
                Ok(Some(resp))
            }
            None => {
                if count_miss {
                    self.misses.fetch_add(1, Ordering::Relaxed);
                }
                Ok(None)
            }
        }
    }

    /// Store a call (replacing any row with the same key) and drop it from `pending`.
    pub fn put(
        &self,
        key: &str,
        model: &str,
        request: &Value,
        response: &ChatResponse,
    ) -> Result<(), LlmError> {
        let resp_text =
            serde_json::to_string(response).map_err(|e| LlmError::Cache(e.to_string()))?;
        let req_text = request.to_string();
        let u = response.usage;
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db_err(&self.path))?;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO calls (key, model, request, response, prompt_tokens, cached_tokens,
             completion_tokens, latency_ms, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .and_then(|mut st| {
            st.execute(params![
                key,
                model,
                req_text,
                resp_text,
                u.prompt_tokens as i64,
                u.cached_tokens as i64,
                u.completion_tokens as i64,
                response.latency_ms as i64,
                now_secs() as i64
            ])
        })
        .map_err(db_err(&self.path))?;
        tx.prepare_cached("DELETE FROM pending WHERE key = ?1")
            .and_then(|mut st| st.execute([key]))
            .map_err(db_err(&self.path))?;
        tx.commit().map_err(db_err(&self.path))?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Remember a request exported to a batch file (model id and request for `batch import`).
    pub fn put_pending(&self, key: &str, model: &str, request: &Value) -> Result<(), LlmError> {
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO pending (key, model, request, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![key, model, request.to_string(), now_secs() as i64],
            )
            .map_err(db_err(&self.path))?;
        Ok(())
    }

    /// The model id and request of a pending (exported) key.
    pub fn pending(&self, key: &str) -> Result<Option<(String, Value)>, LlmError> {
        let row: Option<(String, String)> = self
            .conn()
            .query_row(
                "SELECT model, request FROM pending WHERE key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db_err(&self.path))?;
        Ok(row.map(|(m, r)| (m, serde_json::from_str(&r).unwrap_or(Value::Null))))
    }

    /// Read an entry without touching the counters.
    pub fn entry(&self, key: &str) -> Result<Option<CacheEntry>, LlmError> {
        let row: Option<(String, String, String, i64)> = self
            .conn()
            .query_row(
                "SELECT model, request, response, created_at FROM calls WHERE key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
            .map_err(db_err(&self.path))?;
        let Some((model, req, resp, created)) = row else {
            return Ok(None);
        };
        let response = serde_json::from_str(&resp).map_err(|e| {
            LlmError::Cache(format!(
                "{}: entry {key}: unreadable response: {e}",
                self.path.display()
            ))
        })?;
        Ok(Some(CacheEntry {
            key: key.to_string(),
            model,
            request: serde_json::from_str(&req).unwrap_or(Value::Null),
            response,
            created_at: created.max(0) as u64,
        }))
    }

    /// Number of stored calls.
    pub fn len(&self) -> Result<u64, LlmError> {
        let n: i64 = self
            .conn()
            .query_row("SELECT COUNT(*) FROM calls", [], |r| r.get(0))
            .map_err(db_err(&self.path))?;
        Ok(n.max(0) as u64)
    }

    pub fn is_empty(&self) -> Result<bool, LlmError> {
        Ok(self.len()? == 0)
    }

    /// All stored keys.
    pub fn keys(&self) -> Result<Vec<String>, LlmError> {
        let conn = self.conn();
        let mut st = conn
            .prepare("SELECT key FROM calls ORDER BY key")
            .map_err(db_err(&self.path))?;
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(db_err(&self.path))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(db_err(&self.path))
    }

    /// Entries, pending requests and token totals per model.
    pub fn stats(&self) -> Result<CacheStats, LlmError> {
        let err = db_err(&self.path);
        let conn = self.conn();
        let entries: i64 = conn
            .query_row("SELECT COUNT(*) FROM calls", [], |r| r.get(0))
            .map_err(&err)?;
        let pending: i64 = conn
            .query_row("SELECT COUNT(*) FROM pending", [], |r| r.get(0))
            .map_err(&err)?;
        let mut st = conn
            .prepare(
                "SELECT model, COUNT(*), SUM(prompt_tokens), SUM(cached_tokens), SUM(completion_tokens)
                 FROM calls GROUP BY model ORDER BY model",
            )
            .map_err(&err)?;
        let by_model = st
            .query_map([], |r| {
                Ok(ModelStats {
                    model: r.get(0)?,
                    entries: r.get::<_, i64>(1)?.max(0) as u64,
                    usage: Usage {
                        prompt_tokens: r.get::<_, Option<i64>>(2)?.unwrap_or(0).max(0) as u64,
                        cached_tokens: r.get::<_, Option<i64>>(3)?.unwrap_or(0).max(0) as u64,
                        completion_tokens: r.get::<_, Option<i64>>(4)?.unwrap_or(0).max(0) as u64,
                    },
                })
            })
            .map_err(&err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(&err)?;
        let bytes = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        Ok(CacheStats {
            path: self.path.clone(),
            entries: entries.max(0) as u64,
            pending: pending.max(0) as u64,
            bytes,
            by_model,
        })
    }

    /// Delete the entries of one model (all when `None`); returns how many were deleted.
    pub fn clear(&self, model: Option<&str>) -> Result<u64, LlmError> {
        let err = db_err(&self.path);
        let conn = self.conn();
        let n = match model {
            Some(m) => {
                let n = conn
                    .execute("DELETE FROM calls WHERE model = ?1", [m])
                    .map_err(&err)?;
                conn.execute("DELETE FROM pending WHERE model = ?1", [m])
                    .map_err(&err)?;
                n
            }
            None => {
                let n = conn.execute("DELETE FROM calls", []).map_err(&err)?;
                conn.execute("DELETE FROM pending", []).map_err(&err)?;
                n
            }
        };
        Ok(n as u64)
    }

    /// Hit / miss / write counters of this process.
    pub fn counters(&self) -> CacheCounters {
        CacheCounters {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
        }
    }
}

/// A model behind the cache: hits are answered from SQLite, misses go to `inner` and are written
/// as soon as they arrive. Concurrent identical requests go to the backend once (single-flight).
pub struct CachedModel {
    inner: Arc<dyn ChatModel>,
    cache: Arc<Cache>,
    policy: CachePolicy,
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl CachedModel {
    pub fn new(inner: Arc<dyn ChatModel>, cache: Arc<Cache>, policy: CachePolicy) -> Self {
        CachedModel {
            inner,
            cache,
            policy,
            inflight: Mutex::new(HashMap::new()),
        }
    }

    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    async fn lookup(&self, key: &str, count_miss: bool) -> Result<Option<ChatResponse>, LlmError> {
        let cache = self.cache.clone();
        let key = key.to_string();
        tokio::task::spawn_blocking(move || cache.fetch(&key, count_miss))
            .await
            .map_err(|e| LlmError::Cache(format!("cache lookup task failed: {e}")))?
    }

    fn flight(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = match self.inflight.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        map.entry(key.to_string()).or_default().clone()
    }

    fn land(&self, key: &str) {
        let mut map = match self.inflight.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        map.remove(key);
    }
}

#[async_trait::async_trait]
impl crate::wrap::ModelWrapper for CachedModel {
    fn inner(&self) -> &dyn ChatModel {
        &*self.inner
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let key = cache_key(self.inner.id(), request);
        match self.lookup(&key, true).await {
            Ok(Some(hit)) => return Ok(hit),
            Ok(None) => {}
            // Replay can only answer from the cache: an unreadable entry is an error there.
            Err(e) if self.policy == CachePolicy::Replay => return Err(e),
            // Read-write: an unreadable entry (or a locked database) is a miss; the fresh
            // answer overwrites the entry.
            Err(e) => tracing::warn!("cache lookup failed, calling the backend: {e}"),
        }
        if self.policy == CachePolicy::Replay {
            return Err(LlmError::ReplayMiss {
                key,
                model: self.inner.id().to_string(),
            });
        }
        let flight = self.flight(&key);
        let _guard = flight.lock().await;
        // Another task may have answered the same request while we waited.
        if let Ok(Some(hit)) = self.lookup(&key, false).await {
            self.land(&key);
            return Ok(hit);
        }
        let result = self.inner.complete(request).await;
        if let Ok(resp) = &result {
            let cache = self.cache.clone();
            let (k, model, resp) = (key.clone(), self.inner.id().to_string(), resp.clone());
            let req = serde_json::to_value(request).unwrap_or(Value::Null);
            let stored = tokio::task::spawn_blocking(move || cache.put(&k, &model, &req, &resp))
                .await
                .map_err(|e| LlmError::Cache(format!("cache write task failed: {e}")))
                .and_then(|r| r);
            if let Err(e) = stored {
                tracing::error!("could not store a response in the cache: {e}");
            }
        }
        self.land(&key);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedModel;
    use crate::Message;

    #[test]
    fn key_ignores_stage_and_key_order_but_not_params() {
        let base = ChatRequest::new(vec![Message::user("q")])
            .json_schema(serde_json::from_str(r#"{"type":"object","required":["a"]}"#).unwrap());
        let k = cache_key("m", &base);
        assert_eq!(k.len(), 64);
        assert_eq!(k, cache_key("m", &base.clone().stage("judge")));
        let reordered = ChatRequest {
            json_schema: Some(
                serde_json::from_str(r#"{"required":["a"],"type":"object"}"#).unwrap(),
            ),
            ..base.clone()
        };
        assert_eq!(k, cache_key("m", &reordered));
        assert_ne!(k, cache_key("m2", &base));
        assert_ne!(k, cache_key("m", &base.clone().temperature(0.5)));
        assert_ne!(k, cache_key("m", &base.clone().max_tokens(7)));
        assert_ne!(
            k,
            cache_key(
                "m",
                &ChatRequest {
                    seed: Some(1),
                    ..base.clone()
                }
            )
        );
        assert_ne!(
            k,
            cache_key(
                "m",
                &ChatRequest {
                    stop: vec!["x".into()],
                    ..base.clone()
                }
            )
        );
        assert_ne!(
            k,
            cache_key(
                "m",
                &ChatRequest {
                    grammar: Some("root ::= \"a\"".into()),
                    ..base.clone()
                }
            )
        );
        assert_ne!(
            k,
            cache_key(
                "m",
                &ChatRequest {
                    top_p: Some(0.9),
                    ..base
                }
            )
        );
    }

    #[tokio::test]
    async fn read_write_then_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/cache.sqlite");
        let cache = Arc::new(Cache::open(&path).unwrap());
        let fixture = Arc::new(ScriptedModel::new("fixture").then("one").then("two"));
        let m = CachedModel::new(fixture.clone(), cache.clone(), CachePolicy::ReadWrite);
        let q1 = ChatRequest::new(vec![Message::user("q1")]);
        let q2 = ChatRequest::new(vec![Message::user("q2")]);
        assert_eq!(m.complete(&q1).await.unwrap().text, "one");
        let again = m.complete(&q1).await.unwrap();
        assert_eq!(again.text, "one");
        assert!(again.from_cache);
        assert_eq!(fixture.n_calls(), 1);
        drop(m);
        // Another handle on the same file (as another process would) in replay mode.
        let cache2 = Arc::new(Cache::open(&path).unwrap());
        let replay = CachedModel::new(fixture.clone(), cache2.clone(), CachePolicy::Replay);
        assert_eq!(replay.complete(&q1).await.unwrap().text, "one");
        assert!(matches!(
            replay.complete(&q2).await,
            Err(LlmError::ReplayMiss { .. })
        ));
        assert_eq!(fixture.n_calls(), 1);
        assert_eq!(
            cache2.counters(),
            CacheCounters {
                hits: 1,
                misses: 1,
                writes: 0
            }
        );
        let stats = cache2.stats().unwrap();
        assert_eq!((stats.entries, stats.by_model.len()), (1, 1));
        assert_eq!(stats.by_model[0].model, "fixture");
        assert_eq!(cache2.clear(Some("other")).unwrap(), 0);
        assert_eq!(cache2.clear(Some("fixture")).unwrap(), 1);
        assert!(cache2.is_empty().unwrap());
    }

    /// A slow backend that counts calls, to check single-flight.
    struct Slow(AtomicU64);
    #[async_trait::async_trait]
    impl ChatModel for Slow {
        fn id(&self) -> &str {
            "slow"
        }
        async fn complete(&self, r: &ChatRequest) -> Result<ChatResponse, LlmError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(ChatResponse {
                text: r.messages[0].content.clone(),
                finish_reason: "stop".into(),
                usage: Default::default(),
                latency_ms: 50,
                from_cache: false,
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn identical_concurrent_requests_reach_the_backend_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(Cache::open(dir.path().join("c.sqlite")).unwrap());
        let slow = Arc::new(Slow(AtomicU64::new(0)));
        let m = Arc::new(CachedModel::new(
            slow.clone(),
            cache.clone(),
            CachePolicy::ReadWrite,
        ));
        let mut tasks = Vec::new();
        for i in 0..20 {
            let m = m.clone();
            tasks.push(tokio::spawn(async move {
                let q = ChatRequest::new(vec![Message::user(format!("q{}", i % 2))]);
                m.complete(&q).await.unwrap().text
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap(), format!("q{}", i % 2));
        }
        assert_eq!(slow.0.load(Ordering::SeqCst), 2);
        assert_eq!(cache.len().unwrap(), 2);
    }

    #[test]
    fn concurrent_writers_on_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        Cache::open(&path).unwrap();
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let c = Cache::open(&path).unwrap();
                    for i in 0..50 {
                        let resp = ChatResponse {
                            text: format!("{t}-{i}"),
                            finish_reason: "stop".into(),
                            usage: Default::default(),
                            latency_ms: 1,
                            from_cache: false,
                        };
                        c.put(&format!("k{t}-{i}"), "m", &Value::Null, &resp)
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let c = Cache::open(&path).unwrap();
        assert_eq!(c.len().unwrap(), 200);
        assert_eq!(c.entry("k3-49").unwrap().unwrap().response.text, "3-49");
    }

    #[tokio::test]
    async fn unreadable_entry_is_a_miss_in_read_write_and_an_error_in_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        let cache = Arc::new(Cache::open(&path).unwrap());
        let q = ChatRequest::new(vec![Message::user("q")]);
        let key = cache_key("fixture", &q);
        cache
            .conn()
            .execute(
                "INSERT INTO calls VALUES (?1, 'fixture', '{}', 'not json', 0, 0, 0, 0, 0)",
                [&key],
            )
            .unwrap();
        let replay = CachedModel::new(
            Arc::new(ScriptedModel::new("fixture")),
            cache.clone(),
            CachePolicy::Replay,
        );
        let e = replay.complete(&q).await.unwrap_err().to_string();
        assert!(e.contains("unreadable response") && e.contains(&key), "{e}");
        let fixture = Arc::new(ScriptedModel::new("fixture").then("fresh"));
        let rw = CachedModel::new(fixture.clone(), cache.clone(), CachePolicy::ReadWrite);
        assert_eq!(rw.complete(&q).await.unwrap().text, "fresh");
        assert_eq!(rw.complete(&q).await.unwrap().text, "fresh");
        assert_eq!(fixture.n_calls(), 1, "the bad entry was overwritten");
    }
}
