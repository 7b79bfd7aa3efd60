use super::*;
use crate::test_support::stores;
use crate::{ImplicitEvent, NewDiagnosis};
use maslens_trace::{Outcome, TraceBuilder};
use serde_json::json;

fn trace(id: &str, outcome: Outcome, system: &str) -> Trace {
    let mut t = TraceBuilder::new(id)
        .task("q")
        .outcome(outcome)
        .steps(&["Planner", "Coder"])
        .decisive("Coder", 1)
        .build();
    t.source.format = system.into();
    t
}

fn located(run: &str, method: &str, agent: &str, reason: &str) -> NewDiagnosis {
    NewDiagnosis {
        run_id: run.into(),
        method: method.into(),
        agent: Some(agent.into()),
        step: Some(1),
        result: json!({"agent": agent, "step": 1, "rationale": reason, "method": method}),
        ..NewDiagnosis::default()
    }
}

fn event(kind: &str, severity: f64) -> ImplicitEvent {
    ImplicitEvent {
        step: Some(0),
        agent: Some("Planner".into()),
        error_type: Some(kind.into()),
        severity: Some(severity),
        absorbed_by: None,
        event: json!({"type": kind}),
    }
}

#[tokio::test]
async fn failed_runs_carry_the_latest_localization_scan_and_gold() {
    for (store, _dir) in stores().await {
        store
            .put_trace(&trace("a", Outcome::Failure, "shop"))
            .await
            .unwrap();
        store
            .put_trace(&trace("b", Outcome::Failure, "news"))
            .await
            .unwrap();
        store
            .put_trace(&trace("c", Outcome::Success, "shop"))
            .await
            .unwrap();
        store
            .add_diagnosis(&located("a", "prior", "Planner", "old"))
            .await
            .unwrap();
        store
            .add_diagnosis(&located("a", "locate", "Coder", "wrong index"))
            .await
            .unwrap();
        store
            .add_diagnosis(&located("c", "locate", "Coder", "fine"))
            .await
            .unwrap();
        let scan = NewDiagnosis {
            run_id: "a".into(),
            method: "scan".into(),
            result: json!({"events": []}),
            events: vec![
                event("minor slip", 0.2),
                event("wrong fact", 0.9),
                event("minor slip", 0.5),
            ],
            ..NewDiagnosis::default()
        };
        store.add_diagnosis(&scan).await.unwrap();

        let (runs, more) = store
            .failed_runs(&FailedRunFilter::default())
            .await
            .unwrap();
        assert!(!more);
        let ids: Vec<&str> = runs.iter().map(|r| r.run.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        let a = &runs[0];
        assert_eq!((a.agent.as_deref(), a.step), (Some("Coder"), Some(1)));
        assert_eq!(a.reason, "wrong index");
        assert_eq!(a.failure_types, ["wrong fact", "minor slip"]);
        assert_eq!(a.system.as_deref(), Some("shop"));
        assert!(a.trace.is_none(), "traces only when asked");
        assert_eq!(
            (runs[1].agent.as_ref(), runs[1].failure_types.len()),
            (None, 0)
        );

        let filter = FailedRunFilter {
            system: Some("shop".into()),
            outcome: "any".into(),
            gold: true,
            limit: 1,
        };
        let (runs, more) = store.failed_runs(&filter).await.unwrap();
        assert!(more, "a and c match, the limit is 1");
        assert_eq!(runs.len(), 1);
        let gold = runs[0]
            .trace
            .as_ref()
            .and_then(|t| t.gold())
            .and_then(|g| g.agent);
        assert_eq!(gold.as_deref(), Some("Coder"));

        let bad = FailedRunFilter {
            outcome: "failed".into(),
            ..FailedRunFilter::default()
        };
        let err = store.failed_runs(&bad).await.unwrap_err().to_string();
        assert!(
            err.contains("\"failed\"") && err.contains("failure"),
            "{err}"
        );
    }
}
