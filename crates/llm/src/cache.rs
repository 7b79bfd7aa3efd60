//! The LLM call cache: SQLite (WAL, busy timeout), one row per call, written as soon as the
//! answer arrives, so a run killed at any moment loses at most the calls in flight and a rerun
//! is free. Safe under concurrent writers, in one process and across processes.
//!
//! The key is a SHA-256 over a canonical JSON of model id, messages and sampling parameters
//! (temperature, top_p, max_tokens, seed, stop, json_schema, grammar). The accounting label
//! `stage` and the server's base URL are not part of it.
//!
//! A request is computed once even when several processes share the cache: before calling the
//! backend, a process claims the key with a row in `inflight` (an owner and a lease, renewed
//! while the call runs); another process that misses the same key waits for the answer instead
//! of computing it again, and takes the claim over only when the owner gave up (its call failed)
//! or its lease ran out (it was killed).

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

/// What [`Cache::claim`] found.
#[derive(Debug, Clone)]
pub enum Claim {
    /// The caller holds the claim: compute, then `put` (or `release` on failure).
    Owned,
    /// The answer is stored.
    Answered(ChatResponse),
    /// Another caller holds a live claim.
    Busy { owner: String, expires_in: Duration },
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// WAL, then the tables, in one write transaction taken up front (`BEGIN IMMEDIATE`, so a
/// concurrent opener waits in the busy handler instead of failing a read-to-write upgrade).
fn init_schema(conn: &mut Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    tx.commit()
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// How long an opener waits for another connection's lock: SQLite's busy handler, and the
/// deadline of [`Cache::open`]'s set-up retries.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS calls (
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
    );
    CREATE TABLE IF NOT EXISTS inflight (
        key TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_ms INTEGER NOT NULL
    );";

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
        let mut conn = Connection::open(&path).map_err(&err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(&err)?;
        // Processes that open one new file together race on the journal mode and the schema;
        // SQLite answers some of those lock upgrades with SQLITE_BUSY at once, without the busy
        // handler, so the set-up is retried until the busy timeout's deadline.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(5);
        loop {
            match init_schema(&mut conn) {
                Ok(()) => break,
                Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                    tracing::debug!(
                        "{}: busy while setting up the cache, retrying: {e}",
                        path.display()
                    );
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(e) => return Err(err(e)),
            }
        }
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
        tx.prepare_cached("DELETE FROM inflight WHERE key = ?1")
            .and_then(|mut st| st.execute([key]))
            .map_err(db_err(&self.path))?;
        tx.commit().map_err(db_err(&self.path))?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Claim `key` for `owner` for `lease` (see the module docs): [`Claim::Answered`] when the
    /// answer is stored by now, [`Claim::Owned`] when nobody else holds a live claim (an expired
    /// one is taken over), else [`Claim::Busy`].
    pub fn claim(&self, key: &str, owner: &str, lease: Duration) -> Result<Claim, LlmError> {
        let err = db_err(&self.path);
        let now = now_ms();
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(&err)?;
        let stored: Option<String> = tx
            .prepare_cached("SELECT response FROM calls WHERE key = ?1")
            .and_then(|mut st| st.query_row([key], |r| r.get(0)).optional())
            .map_err(&err)?;
        if let Some(text) = stored {
            drop(tx);
            let mut resp: ChatResponse = serde_json::from_str(&text).map_err(|e| {
                LlmError::Cache(format!(
                    "{}: entry {key}: unreadable response: {e}",
                    self.path.display()
                ))
            })?;
            resp.from_cache = true;
            return Ok(Claim::Answered(resp));
        }
        let taken = tx
            .prepare_cached(
                "INSERT INTO inflight (key, owner, expires_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT(key) DO UPDATE SET owner = excluded.owner, expires_ms = excluded.expires_ms
                 WHERE inflight.expires_ms < ?4 OR inflight.owner = excluded.owner",
            )
            .and_then(|mut st| {
                st.execute(params![key, owner, now + lease.as_millis() as i64, now])
            })
            .map_err(&err)?;
        let claim = if taken == 1 {
            Claim::Owned
        } else {
            let (holder, expires): (String, i64) = tx
                .query_row(
                    "SELECT owner, expires_ms FROM inflight WHERE key = ?1",
                    [key],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .map_err(&err)?;
            Claim::Busy {
                owner: holder,
                expires_in: Duration::from_millis((expires - now).max(0) as u64),
            }
        };
        tx.commit().map_err(&err)?;
        Ok(claim)
    }

    /// Extend `owner`'s claim on `key` by `lease` from now; `false` when it no longer holds it.
    pub fn renew(&self, key: &str, owner: &str, lease: Duration) -> Result<bool, LlmError> {
        let n = self
            .conn()
            .execute(
                "UPDATE inflight SET expires_ms = ?3 WHERE key = ?1 AND owner = ?2",
                params![key, owner, now_ms() + lease.as_millis() as i64],
            )
            .map_err(db_err(&self.path))?;
        Ok(n == 1)
    }

    /// Give up `owner`'s claim on `key` (its call failed or was dropped).
    pub fn release(&self, key: &str, owner: &str) -> Result<(), LlmError> {
        self.conn()
            .execute(
                "DELETE FROM inflight WHERE key = ?1 AND owner = ?2",
                params![key, owner],
            )
            .map_err(db_err(&self.path))?;
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
    /// How long a claim on a key lives without renewal ([`Cache::claim`]).
    lease: Duration,
}

/// Lease of a claim on a key: a process killed mid-call holds its keys at most this long.
pub const CLAIM_LEASE: Duration = Duration::from_secs(20);

/// How often a process waiting for another's answer looks again.
const CLAIM_POLL: Duration = Duration::from_millis(200);

/// A claim held while the backend call runs: renewed in the background, released when dropped
/// unless the answer was stored (which removes it).
struct HeldClaim {
    cache: Arc<Cache>,
    key: String,
    owner: String,
    renewer: tokio::task::JoinHandle<()>,
    /// The answer was stored, which removed the claim.
    stored: bool,
}

impl Drop for HeldClaim {
    fn drop(&mut self) {
        self.renewer.abort();
        if self.stored {
            return;
        }
        if let Err(e) = self.cache.release(&self.key, &self.owner) {
            tracing::warn!("could not release the cache claim on {}: {e}", self.key);
        }
    }
}

/// A claim owner unique to this call: process id, time, and a counter.
fn claim_owner() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        now_ms(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl CachedModel {
    pub fn new(inner: Arc<dyn ChatModel>, cache: Arc<Cache>, policy: CachePolicy) -> Self {
        CachedModel {
            inner,
            cache,
            policy,
            inflight: Mutex::new(HashMap::new()),
            lease: CLAIM_LEASE,
        }
    }

    /// Use another claim lease than [`CLAIM_LEASE`] (tests).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(50));
        self
    }

    /// Wait until this call owns `key` (`None`) or another process stored the answer. An
    /// unusable cache is not a reason to fail the call: it goes to the backend unclaimed.
    async fn claim(&self, key: &str, owner: &str) -> Option<ChatResponse> {
        loop {
            let cache = self.cache.clone();
            let (k, o, lease) = (key.to_string(), owner.to_string(), self.lease);
            let claim = tokio::task::spawn_blocking(move || cache.claim(&k, &o, lease)).await;
            match claim {
                Ok(Ok(Claim::Owned)) => return None,
                Ok(Ok(Claim::Answered(r))) => {
                    self.cache.hits.fetch_add(1, Ordering::Relaxed);
                    return Some(r);
                }
                Ok(Ok(Claim::Busy { owner, expires_in })) => {
                    tracing::debug!(
                        "cache key {key} is being computed by {owner} (lease {expires_in:?} left): waiting"
                    );
                    tokio::time::sleep(CLAIM_POLL.min(expires_in + Duration::from_millis(10)))
                        .await;
                }
                Ok(Err(e)) => {
                    tracing::warn!("cannot claim cache key {key}, calling the backend: {e}");
                    return None;
                }
                Err(e) => {
                    tracing::warn!("cache claim task failed, calling the backend: {e}");
                    return None;
                }
            }
        }
    }

    /// Hold the claim: renewed every third of the lease until dropped.
    fn hold(&self, key: &str, owner: &str) -> HeldClaim {
        let (cache, k, o, lease) = (
            self.cache.clone(),
            key.to_string(),
            owner.to_string(),
            self.lease,
        );
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                let (c, k2, o2) = (cache.clone(), k.clone(), o.clone());
                match tokio::task::spawn_blocking(move || c.renew(&k2, &o2, lease)).await {
                    Ok(Ok(true)) => {}
                    Ok(Ok(false)) => {
                        tracing::warn!("lost the cache claim on {k}: its lease ran out");
                        return;
                    }
                    Ok(Err(e)) => tracing::warn!("cannot renew the cache claim on {k}: {e}"),
                    Err(_) => return,
                }
            }
        });
        HeldClaim {
            cache: self.cache.clone(),
            key: key.to_string(),
            owner: owner.to_string(),
            renewer,
            stored: false,
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
        // Another process may be computing it: wait for its answer rather than compute it twice.
        let owner = claim_owner();
        if let Some(hit) = self.claim(&key, &owner).await {
            self.land(&key);
            return Ok(hit);
        }
        let mut held = self.hold(&key, &owner);
        let result = self.inner.complete(request).await;
        if let Ok(resp) = &result {
            let cache = self.cache.clone();
            let (k, model, resp) = (key.clone(), self.inner.id().to_string(), resp.clone());
            let req = serde_json::to_value(request).unwrap_or(Value::Null);
            let stored = tokio::task::spawn_blocking(move || cache.put(&k, &model, &req, &resp))
                .await
                .map_err(|e| LlmError::Cache(format!("cache write task failed: {e}")))
                .and_then(|r| r);
            match stored {
                Ok(()) => held.stored = true,
                Err(e) => tracing::error!("could not store a response in the cache: {e}"),
            }
        }
        drop(held);
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
                queue: Default::default(),
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

    /// Issue 16 item 11: two processes sharing one cache computed the same request twice (the
    /// single-flight lock is per process). Two cache handles on one file stand for the two
    /// processes here (`llm_batch.rs` runs two `maslens batch run`); each has its own backend.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_processes_on_one_cache_compute_a_request_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        let (slow_a, slow_b) = (
            Arc::new(Slow(AtomicU64::new(0))),
            Arc::new(Slow(AtomicU64::new(0))),
        );
        let a = Arc::new(CachedModel::new(
            slow_a.clone(),
            Arc::new(Cache::open(&path).unwrap()),
            CachePolicy::ReadWrite,
        ));
        let b = Arc::new(CachedModel::new(
            slow_b.clone(),
            Arc::new(Cache::open(&path).unwrap()),
            CachePolicy::ReadWrite,
        ));
        let q = ChatRequest::new(vec![Message::user("shared")]);
        let (ra, rb) = tokio::join!(
            {
                let (a, q) = (a.clone(), q.clone());
                async move { a.complete(&q).await.unwrap() }
            },
            {
                let (b, q) = (b.clone(), q.clone());
                async move { b.complete(&q).await.unwrap() }
            }
        );
        assert_eq!((ra.text.as_str(), rb.text.as_str()), ("shared", "shared"));
        let calls = slow_a.0.load(Ordering::SeqCst) + slow_b.0.load(Ordering::SeqCst);
        assert_eq!(calls, 1, "the second process waited for the first's answer");
        assert!(ra.from_cache != rb.from_cache, "one computed, one read it");
        let c = Cache::open(&path).unwrap();
        let left: i64 = c
            .conn()
            .query_row("SELECT COUNT(*) FROM inflight", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 0, "no claim left behind");
    }

    /// A claim whose owner died (no renewal) is taken over when its lease runs out; a failed call
    /// gives its claim up at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_owners_claim_expires_and_a_failed_call_releases_its_claim() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sqlite");
        let cache = Arc::new(Cache::open(&path).unwrap());
        let q = ChatRequest::new(vec![Message::user("q")]);
        let key = cache_key("fixture", &q);
        assert!(matches!(
            cache
                .claim(&key, "dead-process", Duration::from_millis(600))
                .unwrap(),
            Claim::Owned
        ));
        let fixture = Arc::new(ScriptedModel::new("fixture").then("fresh"));
        let m = CachedModel::new(fixture.clone(), cache.clone(), CachePolicy::ReadWrite)
            .with_lease(Duration::from_millis(600));
        let started = std::time::Instant::now();
        assert_eq!(m.complete(&q).await.unwrap().text, "fresh");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(400) && waited < Duration::from_secs(5),
            "waited {waited:?} for the dead owner's lease"
        );
        assert_eq!(fixture.n_calls(), 1);

        // A failing backend: its claim is gone right after, so nobody waits for it.
        let failing = CachedModel::new(
            Arc::new(ScriptedModel::new("fixture")),
            cache.clone(),
            CachePolicy::ReadWrite,
        );
        let q2 = ChatRequest::new(vec![Message::user("q2")]);
        assert!(failing.complete(&q2).await.is_err());
        assert!(matches!(
            cache
                .claim(&cache_key("fixture", &q2), "next", Duration::from_secs(5))
                .unwrap(),
            Claim::Owned
        ));
    }

    /// A finished response with `text`, as the writers in the tests below store it.
    fn stored(text: String) -> ChatResponse {
        ChatResponse {
            text,
            finish_reason: "stop".into(),
            usage: Default::default(),
            latency_ms: 1,
            from_cache: false,
            queue: Default::default(),
        }
    }

    /// Openers (threads here, each with its own connection, as separate processes would have)
    /// that create one new cache file together all get a usable cache: the set-up race that
    /// made two `batch run`s started together on a new cache fail now and then.
    #[test]
    fn concurrent_first_opens_of_one_new_file() {
        const OPENERS: usize = 4;
        for round in 0..30 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("new.sqlite");
            let barrier = Arc::new(std::sync::Barrier::new(OPENERS));
            let handles: Vec<_> = (0..OPENERS)
                .map(|t| {
                    let (path, barrier) = (path.clone(), barrier.clone());
                    std::thread::spawn(move || -> Result<(), String> {
                        barrier.wait();
                        let c = Cache::open(&path)
                            .map_err(|e| format!("round {round}, opener {t}: {e}"))?;
                        c.put(&format!("k{t}"), "m", &Value::Null, &stored(format!("{t}")))
                            .map_err(|e| format!("round {round}, opener {t}: {e}"))
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap().unwrap();
            }
            assert_eq!(Cache::open(&path).unwrap().len().unwrap(), OPENERS as u64);
        }
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
                        c.put(
                            &format!("k{t}-{i}"),
                            "m",
                            &Value::Null,
                            &stored(format!("{t}-{i}")),
                        )
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
