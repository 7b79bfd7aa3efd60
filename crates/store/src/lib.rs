//! maslens-store: where `maslens serve` and `--db` keep their work. SQLite by default
//! (`$MASLENS_HOME/maslens.db`, WAL), PostgreSQL with a `postgres://` URL; one query layer for
//! both (the sqlx `Any` driver: portable SQL, `$N` placeholders, TEXT / BIGINT / DOUBLE PRECISION
//! columns) and versioned migrations embedded in the binary (`migrations/`).
//!
//! What it holds:
//! - **spans** received over OTLP, once each (idempotent on trace id + span id), and **runs**: the
//!   maslens trace assembled from a run's spans ([`ingest`]), or a trace imported from a file;
//! - **diagnoses** with their method, model, prompt versions, parameters, usage and time, the
//!   implicit-failure **events** of scans, **credit tables** and **eval reports** ([`diagnosis`]);
//! - the diagnosis **queue**, claimed with row locks on PostgreSQL so that several servers share
//!   it, with **batches** of jobs queued together ([`jobs`]), and the **outbox** of write-backs
//!   ([`outbox`]);
//! - for the run list: every trace's steps under a **full-text index** and its agents as rows,
//!   rewritten with the trace ([`search`]), and keyset indexes for paging ([`runs`]).
//!
//! Durability: a span is acknowledged only after the transaction that stored it committed, so a
//! killed server loses no acknowledged span; queued jobs and pending write-backs are rows, so they
//! resume after a restart.

pub mod diagnosis;
pub mod failures;
pub mod ingest;
pub mod jobs;
pub mod outbox;
mod preflight;
pub mod runs;
pub mod search;
pub mod testing;
pub mod text;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, Executor, SqlSafeStr};

pub use diagnosis::{new_id, Diagnosis, FollowUp, ImplicitEvent, NewDiagnosis, Provenance};
pub use failures::{FailedRun, FailedRunFilter};
pub use ingest::IngestOutcome;
pub use jobs::{BatchProgress, Job, JobState, NewJob, UndiagnosedRun};
pub use runs::{RunFilter, RunSummary, StoredRun};
pub use search::{Facets, StepMatch};

/// The store's versioned migrations, in order: `(version, description, SQLite SQL, PostgreSQL
/// SQL)`. A migration whose SQL differs per backend has two files; a database only ever sees one
/// backend, so the checksum sqlx records stays that of the one it ran. An applied migration must
/// never change (its checksum is recorded); a schema change is a new file.
const MIGRATIONS: &[(i64, &str, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../migrations/0001_init.sql"),
        include_str!("../migrations/0001_init.sql"),
    ),
    (
        2,
        "search",
        include_str!("../migrations/0002_search_sqlite.sql"),
        include_str!("../migrations/0002_search_postgres.sql"),
    ),
    (
        3,
        "run error",
        include_str!("../migrations/0003_run_error.sql"),
        include_str!("../migrations/0003_run_error.sql"),
    ),
    (
        4,
        "job lanes",
        include_str!("../migrations/0004_job_lanes.sql"),
        include_str!("../migrations/0004_job_lanes.sql"),
    ),
    (
        5,
        "run warnings",
        include_str!("../migrations/0005_run_warnings.sql"),
        include_str!("../migrations/0005_run_warnings.sql"),
    ),
    (
        6,
        "improve reports",
        include_str!("../migrations/0006_improve_reports.sql"),
        include_str!("../migrations/0006_improve_reports.sql"),
    ),
];

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {url}: {source}")]
    Open {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("store file {path}: {message}")]
    File { path: String, message: String },
    #[error("store migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("store query ({what}): {source}")]
    Query {
        what: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("store record {what}: {message}")]
    Corrupt { what: String, message: String },
    #[error("run {0} exists from another source (received over OTLP); choose another id")]
    Clash(String),
    #[error("not in the store: {0}")]
    NotFound(String),
    /// A request the store cannot carry out as asked (an unknown filter value).
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// An error that says nothing about the data: the database was unreachable, busy, locked, out
    /// of disk or memory, or shutting down. The same write can succeed later, so the pipeline
    /// leaves a run it hit to be tried again instead of marking the run failed.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Open { source, .. } | StoreError::Query { source, .. } => {
                transient_sqlx(source)
            }
            _ => false,
        }
    }
}

fn transient_sqlx(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| transient_code(&c)),
        _ => false,
    }
}

/// PostgreSQL SQLSTATEs (always five characters) and SQLite result codes (numbers of at most
/// four digits; the primary code is the low byte of an extended one) of errors that pass.
fn transient_code(code: &str) -> bool {
    if code.len() == 5 {
        // Connection exceptions, insufficient resources (disk full, out of memory), operator
        // intervention (shutdown), system errors, serialization failures and deadlocks, lock
        // not available.
        return ["08", "53", "57", "58"].iter().any(|c| code.starts_with(c))
            || matches!(code, "40001" | "40P01" | "55P03");
    }
    // BUSY, LOCKED, NOMEM, IOERR, FULL, CANTOPEN, PROTOCOL.
    code.parse::<i64>()
        .is_ok_and(|n| matches!(n & 0xff, 5 | 6 | 7 | 10 | 13 | 14 | 15))
}

pub(crate) fn q(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Query { what, source }
}

/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A connection pool to one store.
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// The SQLite file this store opened, to notice it deleted or replaced under a running server.
    file: Option<Arc<FileIdentity>>,
}

/// A file as it was when opened: its path and (on Unix) its device and inode.
#[derive(Debug)]
struct FileIdentity {
    path: std::path::PathBuf,
    id: Option<(u64, u64)>,
}

fn file_id(path: &Path) -> std::io::Result<Option<(u64, u64)>> {
    let meta = std::fs::metadata(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Ok(Some((meta.dev(), meta.ino())))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        Ok(None)
    }
}

/// The default SQLite database under a maslens home directory.
pub fn default_url(home: &Path) -> String {
    sqlite_url(&home.join("maslens.db"))
}

/// A `sqlite://` URL for a file path (created when missing).
pub fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// The file of a `sqlite:` URL (`None` for in-memory databases).
fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or("");
    (!path.is_empty() && !path.starts_with(":memory:")).then(|| std::path::PathBuf::from(path))
}

/// `--db` values: a `postgres://` / `postgresql://` / `sqlite:` URL, or a file path (SQLite).
pub fn url_from_arg(arg: &str) -> String {
    if arg.starts_with("postgres://")
        || arg.starts_with("postgresql://")
        || arg.starts_with("sqlite:")
    {
        arg.to_string()
    } else {
        sqlite_url(Path::new(arg))
    }
}

/// Nanoseconds since the Unix epoch, as stored.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A u64 time or count as a BIGINT (saturating).
pub(crate) fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A trace as stored (`runs.trace_json`) and its content hash (`runs.trace_hash`): the one
/// definition imports, assembly and callers that compare a trace with the stored one share.
pub fn trace_json(trace: &maslens_trace::Trace) -> Result<(String, String)> {
    let json = serde_json::to_string(trace).map_err(|e| StoreError::Corrupt {
        what: format!("trace {}", trace.id),
        message: e.to_string(),
    })?;
    let hash = sha256(json.as_bytes());
    Ok((json, hash))
}

/// The content hash the store gives `trace` (see [`trace_json`]).
pub fn trace_hash(trace: &maslens_trace::Trace) -> Result<String> {
    trace_json(trace).map(|(_, h)| h)
}

/// Hex SHA-256 of bytes (trace content hashes, ids).
pub(crate) fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

impl Store {
    /// Open (and migrate) the store at `url`: `sqlite://PATH?mode=rwc`, `sqlite::memory:`, or
    /// `postgres://...`.
    pub async fn open(url: &str) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("postgres") {
            Backend::Postgres
        } else {
            Backend::Sqlite
        };
        let open_err = |source| StoreError::Open {
            url: redact(url),
            source,
        };
        if backend == Backend::Sqlite {
            if let Some(path) = sqlite_file(url) {
                preflight::check_sqlite_file(&path)?;
            }
            // A new store's folder is made like its file (`--db ~/.cache/maslens/maslens.db` on a
            // fresh machine); if that fails, connecting reports it.
            if let Some(parent) = sqlite_file(url).and_then(|p| p.parent().map(Path::to_path_buf)) {
                if !parent.as_os_str().is_empty() {
                    let _ = std::fs::create_dir_all(parent);
                }
            }
        }
        // One connection without retries first: a store that cannot be opened says why at once.
        preflight::check_connect(url).await?;
        let pool = AnyPoolOptions::new()
            // A connection left inside a transaction (a failed commit) is closed, not reused.
            .before_acquire(|conn, _| Box::pin(async move { Ok(preflight::fit_for_use(conn)) }))
            // SQLite has one writer at a time; a few connections let reads go on beside it.
            .max_connections(if backend == Backend::Sqlite { 4 } else { 8 })
            .acquire_timeout(Duration::from_secs(30))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    match backend {
                        Backend::Sqlite => {
                            // NORMAL under WAL: a committed transaction survives a killed process.
                            conn.execute("PRAGMA synchronous = NORMAL").await?;
                            conn.execute("PRAGMA busy_timeout = 10000").await?;
                        }
                        Backend::Postgres => {
                            // The store's queries are short index walks (a list page stops after
                            // 50 rows); a parallel plan only adds worker start-up, measured at
                            // 10 ms -> 50-100 ms for a text-filtered page of 100,000 runs.
                            conn.execute("SET max_parallel_workers_per_gather = 0")
                                .await?;
                        }
                    }
                    Ok(())
                })
            })
            .connect(url)
            .await
            .map_err(open_err)?;
        if backend == Backend::Sqlite && !url.contains(":memory:") {
            pool.execute("PRAGMA journal_mode = WAL")
                .await
                .map_err(open_err)?;
        }
        let file = match (backend, sqlite_file(url)) {
            (Backend::Sqlite, Some(path)) => Some(Arc::new(FileIdentity {
                id: file_id(&path).ok().flatten(),
                path,
            })),
            _ => None,
        };
        let store = Store {
            pool,
            backend,
            file,
        };
        store.migrate().await?;
        store.backfill_search().await?;
        Ok(store)
    }

    /// An error when the SQLite file this store opened was deleted or replaced since: writes would
    /// go to a file no path names and be lost at exit, so they are refused until a restart.
    pub fn check_file(&self) -> Result<()> {
        let Some(f) = &self.file else {
            return Ok(());
        };
        let now = file_id(&f.path);
        let gone = match &now {
            Err(_) => true,
            Ok(id) => f.id.is_some() && *id != f.id,
        };
        if !gone {
            return Ok(());
        }
        Err(StoreError::File {
            path: f.path.display().to_string(),
            message: "deleted or replaced while in use: nothing more is written (it would be lost \
                      at exit); restore the file or restart maslens serve"
                .into(),
        })
    }

    /// Apply the migrations not yet applied (several processes may race: sqlx takes a lock).
    async fn migrate(&self) -> Result<()> {
        Migrator::with_migrations(migrations(self.backend))
            .run(&self.pool)
            .await?;
        Ok(())
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Close every connection (tests reopen the same file).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A write transaction. On SQLite it takes the write lock at once (`BEGIN IMMEDIATE`), so two
    /// writers wait for each other instead of failing when a read lock would have to be upgraded.
    pub(crate) async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let tx = match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        };
        tx.map_err(q("begin"))
    }
}

/// The migrations of [`MIGRATIONS`] as `backend` runs them.
fn migrations(backend: Backend) -> Vec<Migration> {
    MIGRATIONS
        .iter()
        .map(|(version, description, sqlite, postgres)| {
            let sql = match backend {
                Backend::Sqlite => sqlite,
                Backend::Postgres => postgres,
            };
            Migration::new(
                *version,
                (*description).into(),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect()
}

/// A URL without its password, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Read a column, naming it in the error.
pub(crate) fn col<'r, T>(row: &'r AnyRow, name: &'static str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
{
    use sqlx::Row;
    row.try_get(name).map_err(|e| StoreError::Corrupt {
        what: format!("column {name}"),
        message: e.to_string(),
    })
}

/// Parse a JSON column, naming it and the row in the error.
pub(crate) fn json_col<T: serde::de::DeserializeOwned>(
    text: &str,
    what: impl FnOnce() -> String,
) -> Result<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what: what(),
        message: e.to_string(),
    })
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A fresh SQLite store in a temporary directory; with `MASLENS_TEST_PG_URL` set, tests that
    /// call [`stores`] also run on that PostgreSQL database (a fresh schema per test).
    pub async fn sqlite() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&default_url(dir.path()))
            .await
            .expect("open sqlite store");
        (store, dir)
    }

    /// Every back end available to tests: SQLite always, PostgreSQL when `MASLENS_TEST_PG_URL`
    /// names a server (each call gets a new, empty database on it).
    pub async fn stores() -> Vec<(Store, Option<tempfile::TempDir>)> {
        let (s, dir) = sqlite().await;
        let mut out = vec![(s, Some(dir))];
        if let Ok(url) = std::env::var("MASLENS_TEST_PG_URL") {
            out.push((pg_fresh(&url).await, None));
        }
        out
    }

    /// Like [`stores`], as URLs (for tests that open, close and reopen a store).
    pub async fn store_urls() -> Vec<(String, Option<tempfile::TempDir>)> {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut out = vec![(default_url(dir.path()), Some(dir))];
        if let Ok(url) = std::env::var("MASLENS_TEST_PG_URL") {
            let db = crate::testing::fresh_postgres(&url)
                .await
                .expect("create a test database on MASLENS_TEST_PG_URL");
            out.push((db, None));
        }
        out
    }

    /// A new database on the PostgreSQL server of `url` (named uniquely), opened as a store.
    pub async fn pg_fresh(url: &str) -> Store {
        let db = crate::testing::fresh_postgres(url)
            .await
            .expect("create a test database on MASLENS_TEST_PG_URL");
        Store::open(&db).await.expect("open postgres store")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            url_from_arg("/tmp/x.db"),
            "sqlite:///tmp/x.db?mode=rwc".to_string()
        );
        assert_eq!(url_from_arg("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            sqlite_file("sqlite:///tmp/a/x.db?mode=rwc"),
            Some("/tmp/a/x.db".into())
        );
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("postgres://u@h/db"), None);
    }

    #[tokio::test]
    async fn a_new_store_gets_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new/deeper/maslens.db");
        Store::open(&url_from_arg(&path.display().to_string()))
            .await
            .unwrap();
        assert!(path.is_file());
    }

    #[tokio::test]
    async fn opens_migrates_and_reopens() {
        for (store, dir) in test_support::stores().await {
            // Migrating twice is a no-op; a reopened SQLite file keeps its WAL mode.
            store.migrate().await.expect("second migrate");
            if let Some(dir) = dir {
                store.close().await;
                let again = Store::open(&default_url(dir.path())).await.expect("reopen");
                let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                    .fetch_one(again.pool())
                    .await
                    .expect("journal mode");
                assert_eq!(mode, "wal");
            }
        }
    }

    #[tokio::test]
    async fn changed_migration_is_refused() {
        let (store, _dir) = test_support::sqlite().await;
        let edited = Migration::new(
            1,
            "init".into(),
            MigrationType::Simple,
            "SELECT 1".into_sql_str(),
            false,
        );
        let mut all = migrations(Backend::Sqlite);
        all[0] = edited;
        let err = Migrator::with_migrations(all)
            .run(store.pool())
            .await
            .expect_err("an edited applied migration must be refused");
        assert!(err.to_string().contains("migration 1"), "{err}");
    }

    /// Errors of the database's state pass (a run they hit is tried again); errors of the data
    /// do not (the run is marked failed).
    #[test]
    fn transient_errors_are_the_databases_state_not_the_data() {
        // SQLite: FULL, BUSY, IOERR_WRITE (extended), LOCKED_SHAREDCACHE (extended).
        for code in ["13", "5", "778", "262"] {
            assert!(transient_code(code), "{code}");
        }
        // SQLite: CONSTRAINT_UNIQUE, TOOBIG, MISMATCH, ERROR.
        for code in ["2067", "18", "20", "1"] {
            assert!(!transient_code(code), "{code}");
        }
        // PostgreSQL: disk full, connection failure, admin shutdown, deadlock.
        for code in ["53100", "08006", "57P01", "40P01"] {
            assert!(transient_code(code), "{code}");
        }
        // PostgreSQL: a NUL byte in text, unique violation, value too long.
        for code in ["22021", "23505", "22001"] {
            assert!(!transient_code(code), "{code}");
        }
        let io = StoreError::Query {
            what: "x",
            source: sqlx::Error::Io(std::io::Error::other("reset")),
        };
        assert!(io.is_transient());
        assert!(!StoreError::Invalid("bad filter".into()).is_transient());
    }
}
