//! Checks before a store is used, so a bad store fails at once with its reason instead of after
//! 30 s of pool retries ("pool timed out"): a SQLite file that cannot be read or written, that is
//! not a SQLite database, or whose schema pages are corrupt. And the pool's guard against a
//! connection whose transaction state went wrong (a failed commit), which is closed instead of
//! being handed out again.

use std::io::Read;
use std::path::Path;

use sqlx::{AnyConnection, Connection, Executor};

use crate::{Result, StoreError};

/// Stores up to this size get a full `PRAGMA quick_check` at start.
const QUICK_CHECK_MAX_BYTES: u64 = 512 << 20;

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

fn file_err(path: &Path, message: impl Into<String>) -> StoreError {
    StoreError::File {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// An existing SQLite store file must be a readable, writable SQLite database (a missing or
/// empty one is created by SQLite).
pub(crate) fn check_sqlite_file(path: &Path) -> Result<()> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(file_err(path, format!("cannot read it: {e}"))),
    };
    if !meta.is_file() {
        return Err(file_err(path, "not a file"));
    }
    if meta.len() == 0 {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| file_err(path, format!("cannot open it for reading and writing: {e}")))?;
    let mut head = [0u8; 16];
    f.read_exact(&mut head)
        .map_err(|e| file_err(path, format!("cannot read its header: {e}")))?;
    if &head != SQLITE_HEADER {
        return Err(file_err(path, "not a SQLite database (wrong file header)"));
    }
    Ok(())
}

/// One connection, no retries: the schema must be readable (a corrupt file fails here).
pub(crate) async fn check_connect(url: &str) -> Result<()> {
    let open_err = |source| StoreError::Open {
        url: crate::redact(url),
        source,
    };
    let mut conn = AnyConnection::connect(url).await.map_err(open_err)?;
    if url.starts_with("postgres") {
        conn.execute("SELECT 1").await.map_err(open_err)?;
    } else {
        // Reading the schema fails at once for "file is not a database"; a full quick check
        // (every page) runs on stores up to QUICK_CHECK_MAX_BYTES, so start-up stays fast.
        let path = crate::sqlite_file(url).unwrap_or_default();
        conn.execute("SELECT COUNT(*) FROM sqlite_master")
            .await
            .map_err(open_err)?;
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if size <= QUICK_CHECK_MAX_BYTES {
            let ok: String = sqlx::query_scalar("PRAGMA quick_check(1)")
                .fetch_one(&mut conn)
                .await
                .map_err(open_err)?;
            if ok != "ok" {
                return Err(file_err(&path, format!("corrupt: {ok}")));
            }
        }
    }
    conn.close().await.map_err(open_err)?;
    Ok(())
}

/// Whether a pooled connection may be handed out: not one left inside a transaction (a commit
/// that failed, "database or disk is full", leaves sqlx's transaction depth behind SQLite's; the
/// next `BEGIN` would fail forever with "begin_with at non-zero transaction depth").
pub(crate) fn fit_for_use(conn: &AnyConnection) -> bool {
    let broken = conn.is_in_transaction();
    if broken {
        tracing::warn!("a store connection was left inside a transaction; it is replaced");
    }
    !broken
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::test_support::stores;
    use crate::{default_url, Store};

    /// Issue 35: a bad store file fails at once with its reason (was: 30 s of retries, then
    /// "pool timed out").
    #[tokio::test]
    async fn a_bad_store_file_fails_fast_with_its_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("maslens.db");
        let open = |url: String| async move {
            let t = Instant::now();
            let e = Store::open(&url).await.expect_err("must be refused");
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
            e.to_string()
        };
        std::fs::write(&path, b"this is not a database, just some text\n").expect("write");
        let e = open(default_url(dir.path())).await;
        assert!(e.contains("not a SQLite database"), "{e}");
        std::fs::remove_file(&path).expect("rm");
        std::fs::create_dir(&path).expect("mkdir");
        let e = open(default_url(dir.path())).await;
        assert!(e.contains("not a file"), "{e}");
        std::fs::remove_dir(&path).expect("rmdir");
        // A real store whose pages are overwritten: corrupt.
        let store = Store::open(&default_url(dir.path())).await.expect("open");
        store.close().await;
        let mut bytes = std::fs::read(&path).expect("read");
        assert!(bytes.len() > 8192, "{}", bytes.len());
        for b in &mut bytes[4096..8192] {
            *b = 0xA5;
        }
        std::fs::write(&path, bytes).expect("write");
        let e = open(default_url(dir.path())).await;
        assert!(e.contains("corrupt") || e.contains("malformed"), "{e}");
    }

    fn span(i: u64) -> maslens_otlp::span::SpanRecord {
        maslens_otlp::span::SpanRecord {
            trace_id: format!("{i:032x}"),
            span_id: format!("{:016x}", i + 1),
            parent_span_id: None,
            name: "chat".into(),
            start_ns: i,
            end_ns: i + 1,
            error: None,
            attributes: serde_json::Map::new(),
            events: vec![],
            service: None,
        }
    }

    /// Issue 35: a transaction ended behind sqlx's back (what a failed commit, "database or disk
    /// is full", leaves) no longer makes every later write fail with "begin_with at non-zero
    /// transaction depth": the connection is replaced.
    #[tokio::test]
    async fn the_store_recovers_from_connections_left_inside_a_transaction() {
        for (store, _dir) in stores().await {
            // Every pooled connection: a transaction that the database ended but sqlx did not.
            let mut txs = Vec::new();
            for _ in 0..8 {
                if let Ok(Ok(tx)) =
                    tokio::time::timeout(Duration::from_millis(500), store.pool().begin()).await
                {
                    txs.push(tx);
                }
            }
            assert!(!txs.is_empty());
            for tx in &mut txs {
                sqlx::query("COMMIT")
                    .execute(&mut **tx)
                    .await
                    .expect("commit");
            }
            drop(txs);
            for i in 0..8 {
                store
                    .ingest(&[span(i)])
                    .await
                    .expect("ingest after a broken transaction");
            }
        }
    }
}
