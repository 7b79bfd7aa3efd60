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

/// Queue a delivery on `ex` (the pool, or the transaction that stores the diagnosis).
pub(crate) async fn insert<'e, E>(ex: E, diagnosis_id: &str, target: &str) -> Result<()>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    sqlx::query(
        "INSERT INTO outbox (id, diagnosis_id, target, state, next_ns)
         VALUES ($1, $2, $3, 'pending', $4) ON CONFLICT (id) DO NOTHING",
    )
    .bind(format!("{diagnosis_id}/{target}"))
    .bind(diagnosis_id)
    .bind(target)
    .bind(now_ns())
    .execute(ex)
    .await
    .map_err(q("outbox add"))?;
    Ok(())
}

impl Store {
    /// Queue a diagnosis for a target (once per diagnosis and target).
    pub async fn outbox_add(&self, diagnosis_id: &str, target: &str) -> Result<()> {
        insert(&self.pool, diagnosis_id, target).await
    }

    /// Claim up to `limit` deliveries due now for `target`, oldest first: each is taken by a
    /// compare-and-set on its `next_ns`, which moves it `lease_ns` ahead, so several servers on
    /// one store send each delivery once (a server that dies before [`Store::outbox_done`] leaves
    /// it to be claimed again when the lease ends).
    pub async fn outbox_claim(
        &self,
        target: &str,
        limit: i64,
        lease_ns: i64,
    ) -> Result<Vec<Delivery>> {
        let now = now_ns();
        let rows = sqlx::query(
            "SELECT id, diagnosis_id, target, attempts, next_ns FROM outbox
             WHERE state = 'pending' AND target = $1 AND next_ns <= $2
             ORDER BY next_ns, id LIMIT $3",
        )
        .bind(target)
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(q("outbox due"))?;
        let mut claimed = Vec::new();
        for r in &rows {
            let id: String = col(r, "id")?;
            let seen: i64 = col(r, "next_ns")?;
            let took = sqlx::query(
                "UPDATE outbox SET next_ns = $1 WHERE id = $2 AND state = 'pending' AND next_ns = $3",
            )
            .bind(now.saturating_add(lease_ns))
            .bind(id.as_str())
            .bind(seen)
            .execute(&self.pool)
            .await
            .map_err(q("outbox claim"))?;
            if took.rows_affected() == 1 {
                claimed.push(Delivery {
                    id,
                    diagnosis_id: col(r, "diagnosis_id")?,
                    target: col(r, "target")?,
                    attempts: col(r, "attempts")?,
                });
            }
        }
        Ok(claimed)
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
            let due = store.outbox_claim("phoenix", 10, 0).await.expect("due");
            assert_eq!(due.len(), 1);
            assert!(store
                .outbox_claim("otlp", 10, 0)
                .await
                .expect("due")
                .is_empty());
            store
                .outbox_failed(&due[0].id, "connection refused", 2)
                .await
                .expect("failed");
            // Backing off: not due now.
            assert!(store
                .outbox_claim("phoenix", 10, 0)
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
            let due = store.outbox_claim("otlp", 10, 0).await.expect("due");
            store.outbox_done(&due[0].id).await.expect("done");
            assert!(store
                .outbox_claim("otlp", 10, 0)
                .await
                .expect("due")
                .is_empty());
        }
    }

    /// Issue 35: two servers on one store (two handles on one database) each claim a different
    /// half; no delivery is handed to both (they both sent 181 of 200 before).
    #[tokio::test]
    async fn two_handles_never_claim_the_same_delivery() {
        for (url, _dir) in crate::test_support::store_urls().await {
            let a = crate::Store::open(&url).await.expect("a");
            let b = crate::Store::open(&url).await.expect("b");
            for i in 0..200 {
                a.outbox_add(&format!("d{i}"), "otlp").await.expect("add");
            }
            let lease = 60_000_000_000;
            let mut seen = std::collections::BTreeSet::new();
            loop {
                let (x, y) = tokio::join!(
                    a.outbox_claim("otlp", 25, lease),
                    b.outbox_claim("otlp", 25, lease)
                );
                let (x, y) = (x.expect("claim a"), y.expect("claim b"));
                if x.is_empty() && y.is_empty() {
                    break;
                }
                for d in x.into_iter().chain(y) {
                    assert!(seen.insert(d.id.clone()), "{} claimed twice", d.id);
                }
            }
            assert_eq!(seen.len(), 200);
        }
    }
}
