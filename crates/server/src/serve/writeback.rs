//! Write-back: each diagnosis tied to a span goes where teams look, from the store's outbox (so
//! a target that is down, or a restart, loses nothing):
//! - an OTLP/HTTP logs endpoint, as a `gen_ai.evaluation.result` event on the judged span
//!   ([`maslens_otlp::export`]);
//! - Arize Phoenix, as a span annotation (`POST /v1/span_annotations?sync=true`, upserted on
//!   `identifier` = `maslens:<diagnosis id>`).
//!
//! A localization (prior, locate) annotates its decisive step's span with the label
//! `decisive_error` and the confidence as score; a scan annotates each event's step span with its
//! error type; a fix proposed for a failure mode (serve/propose.rs) annotates each example's
//! decisive-step span as `maslens.proposed_fix` with the label `prompt_change` and the new prompt. A diagnosis without a span (an imported trace) has nothing to write back.

use std::sync::Arc;

use maslens_otlp::export::{evaluation_request, Evaluation};
use maslens_store::Diagnosis;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::AppState;

/// Deliver due write-backs until shutdown.
pub async fn loop_(state: Arc<AppState>, mut shutdown: watch::Receiver<bool>) {
    loop {
        for target in ["otlp", "phoenix"] {
            if let Err(e) = deliver_due(&state, target).await {
                tracing::warn!(%e, target, "write-back");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(state.config.tick) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One pass over a target's due deliveries.
pub async fn deliver_due(state: &AppState, target: &str) -> Result<(), maslens_store::StoreError> {
    // One delivery at a time, claimed for twice a send's timeout (60 s by default): another
    // server skips it, and one claimed by a server that died is sent by another once the lease
    // has passed, not after the lease of a whole batch. At most 10 a pass.
    let lease_ns = super::nanos(state.config.writeback.lease());
    for _ in 0..10 {
        let Some(d) = state
            .store
            .outbox_claim(target, 1, lease_ns)
            .await?
            .into_iter()
            .next()
        else {
            break;
        };
        let Some(diag) = state.store.diagnosis(&d.diagnosis_id).await? else {
            state.store.outbox_done(&d.id).await?;
            continue;
        };
        let evals = evaluations(&diag);
        if evals.is_empty() {
            state.store.outbox_done(&d.id).await?;
            continue;
        }
        let sent = match target {
            "otlp" => send_otlp(state, &evals).await,
            _ => send_phoenix(state, &diag, &evals).await,
        };
        match sent {
            Ok(()) => state.store.outbox_done(&d.id).await?,
            Err(e) => {
                tracing::info!(target, diagnosis = %d.diagnosis_id, %e, "write-back will be retried");
                state.store.outbox_failed(&d.id, &e, 12).await?;
            }
        }
    }
    Ok(())
}

/// The span evaluations a diagnosis stands for.
pub fn evaluations(d: &Diagnosis) -> Vec<Evaluation> {
    let b = &d.body;
    let time_ns = u64::try_from(d.created_ns).unwrap_or(0);
    let mut attributes = vec![
        ("maslens.method".to_string(), b.method.clone()),
        ("maslens.diagnosis_id".to_string(), d.id.clone()),
        ("maslens.run_id".to_string(), b.run_id.clone()),
    ];
    if let Some(m) = &b.model {
        attributes.push(("maslens.model".into(), m.clone()));
    }
    match (b.method.as_str(), &b.otel_trace_id, &b.span_id) {
        ("scan", _, _) => {
            // Each event on its step's span, when the trace came over OTLP.
            let spans = step_spans(&b.result);
            b.events
                .iter()
                .filter_map(|e| {
                    let (t, s) = spans.get(&e.step?)?;
                    Some(Evaluation {
                        trace_id: t.clone(),
                        span_id: s.clone(),
                        name: "maslens.implicit_failure".into(),
                        score: e.severity,
                        label: e.error_type.clone(),
                        explanation: e
                            .event
                            .get("evidence")
                            .or_else(|| e.event.get("rationale"))
                            .and_then(Value::as_str)
                            .map(String::from),
                        attributes: attributes.clone(),
                        time_ns,
                    })
                })
                .collect()
        }
        ("propose", Some(t), Some(s)) => vec![Evaluation {
            trace_id: t.clone(),
            span_id: s.clone(),
            name: "maslens.proposed_fix".into(),
            score: None,
            label: Some("prompt_change".into()),
            explanation: b
                .result
                .get("note")
                .and_then(Value::as_str)
                .map(String::from),
            attributes,
            time_ns,
        }],
        (_, Some(t), Some(s)) => {
            let explanation = b
                .result
                .get("rationale")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| {
                    format!(
                        "{} localized the decisive error at step {} by {}",
                        b.method,
                        b.step.map(|s| s.to_string()).unwrap_or_default(),
                        b.agent.clone().unwrap_or_default()
                    )
                });
            vec![Evaluation {
                trace_id: t.clone(),
                span_id: s.clone(),
                name: "maslens.decisive_error".into(),
                score: b.confidence,
                label: Some("decisive_error".into()),
                explanation: Some(explanation),
                attributes,
                time_ns,
            }]
        }
        _ => Vec::new(),
    }
}

/// Scans carry no spans themselves; the server stores the step -> span map beside the result.
fn step_spans(result: &Value) -> std::collections::HashMap<i64, (String, String)> {
    result
        .get("step_spans")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| {
                    Some((
                        x.get("step")?.as_i64()?,
                        (
                            x.get("trace_id")?.as_str()?.to_string(),
                            x.get("span_id")?.as_str()?.to_string(),
                        ),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn logs_url(base: &str) -> String {
    if base.ends_with("/v1/logs") {
        base.to_string()
    } else {
        format!("{}/v1/logs", base.trim_end_matches('/'))
    }
}

async fn send_otlp(state: &AppState, evals: &[Evaluation]) -> Result<(), String> {
    let Some(base) = &state.config.writeback.otlp_logs else {
        return Err("no OTLP logs endpoint configured".into());
    };
    let body = maslens_otlp::export::encode(&evaluation_request(evals, "maslens"));
    let r = state
        .http
        .post(logs_url(base))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("OTLP logs endpoint: {e}"))?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(format!("OTLP logs endpoint answered {}", r.status()))
    }
}

async fn send_phoenix(state: &AppState, d: &Diagnosis, evals: &[Evaluation]) -> Result<(), String> {
    let Some(base) = &state.config.writeback.phoenix else {
        return Err("no Phoenix URL configured".into());
    };
    let annotator = if d.body.method == "prior" {
        "CODE"
    } else {
        "LLM"
    };
    let data: Vec<Value> = evals
        .iter()
        .enumerate()
        .map(|(i, e)| {
            json!({
                "span_id": e.span_id,
                "name": e.name,
                "annotator_kind": annotator,
                "result": {"label": e.label, "score": e.score, "explanation": e.explanation},
                "metadata": e.attributes.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
                "identifier": format!("maslens:{}:{i}", d.id),
            })
        })
        .collect();
    let mut req = state
        .http
        .post(format!(
            "{}/v1/span_annotations?sync=true",
            base.trim_end_matches('/')
        ))
        .json(&json!({"data": data}));
    if let Some(t) = &state.config.writeback.phoenix_token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.map_err(|e| format!("Phoenix: {e}"))?;
    if r.status().is_success() {
        Ok(())
    } else {
        // 404: Phoenix has not received the span yet; retried with backoff.
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        Err(format!(
            "Phoenix answered {status}: {}",
            text.chars().take(300).collect::<String>()
        ))
    }
}
