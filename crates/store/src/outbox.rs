//! The write-back outbox: each diagnosis to send to a target (an OTLP logs endpoint, Arize
//! Phoenix) is a row, retried with backoff until it is delivered or runs out of attempts, so a
//! restart or a target that is down loses nothing.

use crate::{col, now_ns, q, Result, Store};

/// One pending delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: String,
    pub diagnosis_id: String,
    pub target: String,
    pub attempts: i64,
}

impl Store {
    /// Queue a diagnosis for a target (once per diagnosis and target).
    pub async fn outbox_add(&self, diagnosis_id: &str, target: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO outbox (id, diagnosis_id, target, state, next_ns)
             VALUES ($1, $2, $3, 'pending', $4) ON CONFLICT (id) DO NOTHING",
        )
        .bind(format!("{diagnosis_id}/{target}"))
        .bind(diagnosis_id)
        .bind(target)
        .bind(now_ns())
        .execute(&self.pool)
        .await
        .map_err(q("outbox add"))?;
        Ok(())
    }

    /// Deliveries due now for `target`, oldest first.
    pub async fn outbox_due(&self, target: &str, limit: i64) -> Result<Vec<Delivery>> {
        let rows = sqlx::query(
            "SELECT id, diagnosis_id, target, attempts FROM outbox
             WHERE state = 'pending' AND target = $1 AND next_ns <= $2
             ORDER BY next_ns, id LIMIT $3",
        )
        .bind(target)
        .bind(now_ns())
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(q("outbox due"))?;
        rows.iter()
            .map(|r| {
                Ok(Delivery {
                    id: col(r, "id")?,
                    diagnosis_id: col(r, "diagnosis_id")?,
                    target: col(r, "target")?,
                    attempts: col(r, "attempts")?,
                })
            })
            .collect()
    }

    /// A delivery went through.
    pub async fn outbox_done(&self, id: &str) -> Result<()> {
        sqlx::query("UPDATE outbox SET state = 'done', last_error = NULL WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(q("outbox done"))?;
        Ok(())
    }

    /// A delivery failed: retried after an exponential backoff (1 s, 2 s, 4 s, ... at most
    /// 5 min) until `max_attempts`, then marked failed with its last error.
    pub async fn outbox_failed(&self, id: &str, error: &str, max_attempts: i64) -> Result<()> {
        let attempts: Option<i64> = sqlx::query_scalar("SELECT attempts FROM outbox WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(q("outbox attempts"))?;
        let attempts = attempts.unwrap_or(0) + 1;
        let backoff_s = 1i64 << attempts.clamp(0, 8);
        let next = now_ns().saturating_add(backoff_s.min(300) * 1_000_000_000);
        let state = if attempts >= max_attempts {
            "failed"
        } else {
            "pending"
        };
        sqlx::query(
            "UPDATE outbox SET attempts = $1, next_ns = $2, state = $3, last_error = $4
             WHERE id = $5",
        )
        .bind(attempts)
        .bind(next)
        .bind(state)
        .bind(error)
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(q("outbox failed"))?;
        Ok(())
    }

    /// `(target, state, count)` for status pages.
    pub async fn outbox_counts(&self) -> Result<Vec<(String, String, i64)>> {
        let rows = sqlx::query(
            "SELECT target, state, COUNT(*) AS n FROM outbox GROUP BY target, state
             ORDER BY target, state",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(q("outbox counts"))?;
        rows.iter()
            .map(|r| Ok((col(r, "target")?, col(r, "state")?, col(r, "n")?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::stores;

    #[tokio::test]
    async fn deliveries_retry_with_backoff_then_fail() {
        for (store, _dir) in stores().await {
            store.outbox_add("d1", "phoenix").await.expect("add");
            store.outbox_add("d1", "phoenix").await.expect("add twice");
            let due = store.outbox_due("phoenix", 10).await.expect("due");
            assert_eq!(due.len(), 1);
            assert!(store.outbox_due("otlp", 10).await.expect("due").is_empty());
            store
                .outbox_failed(&due[0].id, "connection refused", 2)
                .await
                .expect("failed");
            // Backing off: not due now.
            assert!(store
                .outbox_due("phoenix", 10)
                .await
                .expect("due")
                .is_empty());
            store
                .outbox_failed(&due[0].id, "connection refused", 2)
                .await
                .expect("failed");
            let counts = store.outbox_counts().await.expect("counts");
            assert_eq!(counts, vec![("phoenix".into(), "failed".into(), 1)]);
            store.outbox_add("d2", "otlp").await.expect("add");
            let due = store.outbox_due("otlp", 10).await.expect("due");
            store.outbox_done(&due[0].id).await.expect("done");
            assert!(store.outbox_due("otlp", 10).await.expect("due").is_empty());
        }
    }
}
