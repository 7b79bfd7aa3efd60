use super::*;
use crate::test_support::stores;
use serde_json::{json, Map, Value};

fn span(trace: &str, id: &str, parent: Option<&str>, start: u64, attrs: Value) -> SpanRecord {
    let attributes: Map<String, Value> = attrs.as_object().cloned().unwrap_or_default();
    SpanRecord {
        trace_id: trace.repeat(32 / trace.len()),
        span_id: id.repeat(16 / id.len()),
        parent_span_id: parent.map(|p| p.repeat(16 / p.len())),
        name: "chat".into(),
        start_ns: start,
        end_ns: start + 10,
        error: None,
        attributes,
        events: vec![],
        service: Some("svc".into()),
    }
}

fn chat(agent: &str, text: &str) -> Value {
    json!({
        "gen_ai.operation.name": "chat",
        "gen_ai.agent.name": agent,
        "gen_ai.output.messages": format!(
            "[{{\"role\":\"assistant\",\"parts\":[{{\"type\":\"text\",\"content\":\"{text}\"}}]}}]"
        ),
    })
}

#[tokio::test]
async fn a_run_grows_over_requests_idempotently_and_in_start_order() {
    for (store, _dir) in stores().await {
        let a = span("a", "1", Some("9"), 300, chat("Coder", "third"));
        let b = span("a", "2", Some("9"), 100, chat("Planner", "first"));
        let out = store
            .ingest(std::slice::from_ref(&a))
            .await
            .expect("ingest 1");
        assert_eq!((out.stored, out.duplicates), (1, 0));
        let run = out.runs[0].clone();
        store.assemble_pending(10).await.expect("assemble");
        // A repeated span and a late, earlier one.
        let out = store
            .ingest(&[a.clone(), b.clone(), b])
            .await
            .expect("ingest 2");
        assert_eq!((out.stored, out.duplicates), (1, 2));
        assert_eq!(store.pending_assembly(10).await.expect("pending").len(), 1);
        let trace = store
            .assemble(&run)
            .await
            .expect("assemble")
            .expect("newer");
        let texts: Vec<&str> = trace.steps.iter().map(|s| s.content.as_str()).collect();
        assert_eq!(texts, ["first", "third"]);
        // Only duplicates: nothing to assemble again.
        let out = store.ingest(&[a]).await.expect("ingest 3");
        assert!(out.runs.is_empty());
        assert!(store
            .pending_assembly(10)
            .await
            .expect("pending")
            .is_empty());
    }
}

#[tokio::test]
async fn a_stale_assembly_never_overwrites_a_newer_one() {
    for (store, _dir) in stores().await {
        let out = store
            .ingest(&[span("b", "1", None, 1, chat("A", "x"))])
            .await
            .expect("ingest");
        let run = &out.runs[0];
        assert!(store.assemble(run).await.expect("first").is_some());
        // Assembled at the current seq already: a second assembly of the same seq is refused.
        assert!(store.assemble(run).await.expect("again").is_none());
    }
}

#[tokio::test]
async fn traces_join_their_conversation_even_when_the_id_comes_late() {
    for (store, _dir) in stores().await {
        let conv = json!({"gen_ai.conversation.id": "conv-7"});
        // Trace c first arrives without the conversation id: its own run.
        let out = store
            .ingest(&[span("c", "1", Some("5"), 10, chat("A", "one"))])
            .await
            .expect("ingest");
        let first_run = out.runs[0].clone();
        assert_eq!(first_run, "c".repeat(32));
        store.assemble_pending(10).await.expect("assemble");
        // Its root span names the conversation; trace d is in the same conversation.
        let mut root = span("c", "5", None, 5, conv.clone());
        root.name = "invoke_agent".into();
        let mut attrs = chat("B", "two").as_object().cloned().unwrap_or_default();
        attrs.insert("gen_ai.conversation.id".into(), json!("conv-7"));
        let d = span("d", "1", None, 20, Value::Object(attrs));
        let out = store.ingest(&[root, d]).await.expect("ingest");
        assert!(out.runs.contains(&"conv-7".to_string()), "{out:?}");
        store.assemble_pending(10).await.expect("assemble");
        let trace = store.assemble_pending(10).await.expect("nothing left");
        assert!(trace.is_empty());
        let run = store.run("conv-7").await.expect("run").expect("exists");
        let texts: Vec<String> = run
            .trace
            .expect("assembled")
            .steps
            .iter()
            .map(|s| s.content.clone())
            .collect();
        assert_eq!(texts, ["one", "two"]);
        assert!(run.summary.has_root);
        assert!(store.run(&first_run).await.expect("old").is_none());
        // The removed run's search rows went with it; the conversation has them now.
        for table in ["step_text", "run_agents"] {
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {table} WHERE run_id = $1"
            )))
            .bind(first_run.as_str())
            .fetch_one(store.pool())
            .await
            .expect("count");
            assert_eq!(n, 0, "{table}");
        }
        let m = store.step_matches("conv-7", "one two", 3).await.expect("m");
        assert!(m.is_empty());
        let m = store.step_matches("conv-7", "one", 3).await.expect("m");
        assert_eq!(m.len(), 1);
    }
}

#[tokio::test]
async fn completion_needs_a_quiet_root_or_a_long_idle() {
    for (store, _dir) in stores().await {
        let out = store
            .ingest(&[span("e", "1", Some("2"), 1, chat("A", "x"))])
            .await
            .expect("ingest");
        let run = out.runs[0].clone();
        store.assemble_pending(10).await.expect("assemble");
        let now = now_ns();
        // No root yet, not idle long: open.
        assert!(store
            .due_for_completion(now, 0, 60_000_000_000)
            .await
            .expect("due")
            .is_empty());
        // Idle long enough: due.
        let due = store
            .due_for_completion(now + 120_000_000_000, 0, 60_000_000_000)
            .await
            .expect("due");
        assert_eq!(due.len(), 1);
        // The root arrives: due after the settle time; a stale seq cannot complete it.
        store
            .ingest(&[span("e", "2", None, 0, json!({}))])
            .await
            .expect("root");
        assert!(!store.mark_complete(&run, due[0].1).await.expect("stale"));
        store.assemble_pending(10).await.expect("assemble");
        let due = store
            .due_for_completion(now_ns(), 0, 60_000_000_000)
            .await
            .expect("due");
        assert_eq!(due.len(), 1);
        assert!(store.mark_complete(&run, due[0].1).await.expect("complete"));
        assert!(!store.mark_complete(&run, due[0].1).await.expect("twice"));
        // A late span reopens it.
        store
            .ingest(&[span("e", "3", Some("2"), 5, chat("B", "late"))])
            .await
            .expect("late");
        let run = store.run(&run).await.expect("run").expect("exists");
        assert_eq!(run.summary.state, "open");
    }
}

/// Assembly writes the search rows with the trace; a later ingest keeps `run_agents` in step
/// with the run's received time; a run removed by assembly loses its rows.
#[tokio::test]
async fn assembly_indexes_steps_and_agents() {
    for (store, _dir) in stores().await {
        let out = store
            .ingest(&[span("f", "1", None, 1, chat("Scout", "a quokka appears"))])
            .await
            .expect("ingest");
        let run = out.runs[0].clone();
        store.assemble_pending(10).await.expect("assemble");
        let find = |q: &str| crate::RunFilter {
            q: Some(q.into()),
            ..crate::RunFilter::default()
        };
        let ids = |runs: Vec<crate::RunSummary>| -> Vec<String> {
            runs.into_iter().map(|r| r.id).collect()
        };
        assert_eq!(
            ids(store.list_runs(&find("quokka")).await.expect("list")),
            std::slice::from_ref(&run)
        );
        let m = store
            .step_matches(&run, "quokka", 3)
            .await
            .expect("matches");
        assert_eq!(m[0].agent.as_deref(), Some("Scout"));
        // More spans: the run is received again (run_agents follows), then reassembled.
        store
            .ingest(&[span("f", "2", Some("1"), 5, chat("Keeper", "a wombat too"))])
            .await
            .expect("ingest");
        let times: Vec<(i64, i64)> = sqlx::query_as::<_, (i64, i64)>(
            "SELECT a.received_ns, r.received_ns FROM run_agents a
             JOIN runs r ON r.id = a.run_id",
        )
        .fetch_all(store.pool())
        .await
        .expect("times");
        assert!(
            !times.is_empty() && times.iter().all(|(a, r)| a == r),
            "{times:?}"
        );
        store.assemble_pending(10).await.expect("assemble");
        assert_eq!(
            ids(store.list_runs(&find("wombat")).await.expect("list")),
            std::slice::from_ref(&run)
        );
        assert_eq!(
            ids(store.list_runs(&find("quokka")).await.expect("list")),
            std::slice::from_ref(&run)
        );
        let keeper = crate::RunFilter {
            agent: Some("Keeper".into()),
            ..crate::RunFilter::default()
        };
        assert_eq!(
            ids(store.list_runs(&keeper).await.expect("list")),
            std::slice::from_ref(&run)
        );
    }
}

/// Issue 35: a NUL in the agent name, an attribute key, the service, the span name or the
/// conversation id is stored replaced (and reported) with the good spans of the request,
/// and every run is assembled (PostgreSQL refused the text: a 503 or a poisoned run).
#[tokio::test]
async fn nul_characters_are_replaced_span_by_span_and_reported() {
    for (store, _dir) in stores().await {
        let mut bad = span("a", "1", None, 1, chat("Pl\0anner", "hi"));
        bad.name = "ch\0at".into();
        bad.service = Some("svc\0".into());
        bad.attributes.insert("k\0".into(), json!("v"));
        bad.attributes
            .insert("gen_ai.conversation.id".into(), json!("conv\0x"));
        let good = span("b", "2", None, 2, chat("Coder", "fine"));
        let out = store.ingest(&[bad, good]).await.expect("ingest");
        assert_eq!(out.stored, 2);
        assert_eq!(
            out.sanitized,
            [format!("{}/{}", "a".repeat(32), "1".repeat(16))]
        );
        assert!(out.sanitized_message().contains("1 span(s)"), "{out:?}");
        let done = store.assemble_pending(10).await.expect("assemble");
        assert_eq!(done.len(), 2, "{done:?}");
        let run = store
            .run("conv\u{FFFD}x")
            .await
            .expect("run")
            .expect("stored under the cleaned id");
        let trace = run.trace.expect("assembled");
        assert_eq!(trace.steps[0].agent, "Pl\u{FFFD}anner");
        assert_eq!(run.summary.system.as_deref(), Some("svc\u{FFFD}"));
    }
}

/// Issue 35: a run that cannot be assembled is marked failed with its reason and the other
/// runs are still assembled; new spans reopen it.
#[tokio::test]
async fn a_run_that_fails_to_assemble_is_marked_failed_and_skipped() {
    for (store, _dir) in stores().await {
        let out = store
            .ingest(&[span("c", "1", None, 1, chat("A", "x"))])
            .await
            .expect("ingest");
        let broken = out.runs[0].clone();
        sqlx::query("UPDATE spans SET record = 'not json' WHERE otel_trace_id = $1")
            .bind("c".repeat(32))
            .execute(store.pool())
            .await
            .expect("corrupt");
        let out = store
            .ingest(&[span("d", "1", None, 2, chat("B", "y"))])
            .await
            .expect("ingest");
        let good = out.runs[0].clone();
        let done = store.assemble_pending(10).await.expect("the loop goes on");
        assert_eq!(done, [good]);
        let s = store
            .run(&broken)
            .await
            .expect("run")
            .expect("kept")
            .summary;
        assert_eq!(s.state, "failed");
        assert!(
            s.error.as_deref().is_some_and(|e| e.contains("assembly")),
            "{s:?}"
        );
        assert!(store.pending_assembly(10).await.expect("p").is_empty());
        // New spans reopen it (and clear the reason).
        store
            .ingest(&[span("c", "2", Some("1"), 3, chat("A", "z"))])
            .await
            .expect("ingest");
        let s = store
            .run(&broken)
            .await
            .expect("run")
            .expect("kept")
            .summary;
        assert_eq!((s.state.as_str(), s.error), ("open", None));
    }
}

/// Red-team findings: a conversation id or agent name longer than an index entry can be,
/// and the `otlp:` namespace colliding with imported ids or merging two conversations.
#[tokio::test]
async fn otlp_runs_with_long_or_namespaced_ids_and_names() {
    for (store, _dir) in stores().await {
        let with_conv = |trace: &str, conv: &str, agent: &str| {
            let mut attrs = chat(agent, "x").as_object().cloned().unwrap_or_default();
            attrs.insert("gen_ai.conversation.id".into(), json!(conv));
            span(trace, "1", None, 1, Value::Object(attrs))
        };
        // A 4,000-character conversation id and agent name (PostgreSQL's index refused both:
        // a retryable 503, and a run that never assembled).
        let long_conv = "c".repeat(4000);
        let long_agent = "A".repeat(4000);
        let out = store
            .ingest(&[with_conv("h", &long_conv, &long_agent)])
            .await
            .expect("ingest");
        let id = out.runs[0].clone();
        assert!(id.chars().count() <= crate::text::MAX_ID_CHARS, "{id}");
        assert!(id.starts_with(&"c".repeat(200)) && id.contains('~'), "{id}");
        store.assemble_pending(10).await.expect("assemble");
        let run = store.run(&id).await.expect("run").expect("stored");
        assert_ne!(run.summary.state, "failed", "{:?}", run.summary.error);
        assert_eq!(run.trace.expect("assembled").steps[0].agent, long_agent);
        // The same long id from another trace meets it in the same run.
        let again = store
            .ingest(&[with_conv("i", &long_conv, "B")])
            .await
            .expect("ingest");
        assert_eq!(again.runs, [id]);
        // Imported `Y`: OTLP `Y` goes to `otlp:Y`, OTLP `otlp:Y` to `otlp:otlp:Y`, never one run.
        let y = maslens_trace::TraceBuilder::new("Y")
            .step("A", "imported")
            .build();
        store.put_trace(&y).await.expect("import");
        let a = store
            .ingest(&[with_conv("j", "Y", "Alice")])
            .await
            .expect("a");
        let b = store
            .ingest(&[with_conv("k", "otlp:Y", "Bob")])
            .await
            .expect("b");
        assert_eq!(a.runs, ["otlp:Y"]);
        assert_eq!(b.runs, ["otlp:otlp:Y"]);
    }
}

/// Imports: text PostgreSQL cannot hold is replaced (it answered a retryable 503); ids that
/// are empty, too long or in the OTLP namespace are refused with the reason.
#[tokio::test]
async fn imports_with_nul_or_bad_ids() {
    for (store, _dir) in stores().await {
        let t = maslens_trace::TraceBuilder::new("n")
            .task("ta\0sk")
            .step("Ag\0ent", "x")
            .build();
        store.put_trace(&t).await.expect("stored");
        let run = store.run("n").await.expect("run").expect("kept");
        assert_eq!(run.trace.expect("trace").steps[0].agent, "Ag\u{FFFD}ent");
        for (id, says) in [
            ("", "cannot be empty"),
            (&*"x".repeat(300), "at most 256"),
            ("otlp:z", "kept for runs received over OTLP"),
            ("a\0b", "NUL"),
        ] {
            let t = maslens_trace::TraceBuilder::new(id).step("A", "x").build();
            let e = store.put_trace(&t).await.expect_err("refused");
            assert!(
                matches!(&e, crate::StoreError::Invalid(m) if m.contains(says)),
                "{e}"
            );
        }
    }
}

/// Issue 35: OTLP spans whose conversation id is an imported run's id go to their own run
/// (`otlp:ID`), and an import over an OTLP run's id is refused, not reported as stored.
#[tokio::test]
async fn otlp_and_imported_runs_never_replace_each_other() {
    for (store, _dir) in stores().await {
        let imported = maslens_trace::TraceBuilder::new("shared")
            .task("q")
            .step("A", "imported text")
            .build();
        store.put_trace(&imported).await.expect("import");
        let mut attrs = chat("B", "otlp text")
            .as_object()
            .cloned()
            .unwrap_or_default();
        attrs.insert("gen_ai.conversation.id".into(), json!("shared"));
        let out = store
            .ingest(&[span("g", "1", None, 1, Value::Object(attrs))])
            .await
            .expect("ingest");
        assert_eq!(out.runs, ["otlp:shared"]);
        store.assemble_pending(10).await.expect("assemble");
        let kept = store.run("shared").await.expect("run").expect("kept");
        assert_eq!(kept.summary.source, "import");
        assert_eq!(kept.summary.state, "complete");
        assert_eq!(kept.trace.expect("trace").steps[0].content, "imported text");
        let otlp = store
            .run("otlp:shared")
            .await
            .expect("run")
            .expect("own run");
        assert_eq!(otlp.trace.expect("trace").steps[0].content, "otlp text");
        // An import with an OTLP run's id: an error, nothing replaced.
        let clash = maslens_trace::TraceBuilder::new("otlp:shared")
            .task("q")
            .step("C", "import over otlp")
            .build();
        let e = store.put_trace(&clash).await.expect_err("clash");
        assert!(
            matches!(&e, crate::StoreError::Invalid(m) if m.contains("kept for runs received over OTLP")),
            "{e}"
        );
        let otlp = store
            .run("otlp:shared")
            .await
            .expect("run")
            .expect("own run");
        assert_eq!(otlp.trace.expect("trace").steps[0].content, "otlp text");
    }
}

/// Issue 35 (memory proportional to the body): a run's spans are read back for assembly with
/// only the attributes assembly reads; the stored records keep every attribute, and the trace
/// is the one the full spans give.
#[tokio::test]
async fn assembly_reads_back_only_the_attributes_it_uses_and_nothing_stored_is_lost() {
    for (store, _dir) in stores().await {
        let mut attrs = chat("Scout", "a quokka appears");
        for (k, v) in [("http.method", "POST"), ("k1", "v1"), ("app.user", "ada")] {
            attrs[k] = json!(v);
        }
        let full = vec![
            span("c", "1", None, 1, attrs.clone()),
            span("c", "2", Some("1"), 5, chat("Keeper", "a wombat too")),
        ];
        let out = store.ingest(&full).await.expect("ingest");
        let run = out.runs[0].clone();
        let read = store.run_spans(&run).await.expect("run spans");
        let keys: Vec<&str> = read[0].attributes.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "gen_ai.agent.name",
                "gen_ai.operation.name",
                "gen_ai.output.messages"
            ]
        );
        let stored: Vec<String> = sqlx::query_scalar("SELECT record FROM spans ORDER BY start_ns")
            .fetch_all(store.pool())
            .await
            .expect("records");
        assert!(stored[0].contains("http.method") && stored[0].contains("app.user"));
        let trace = store
            .assemble(&run)
            .await
            .expect("assemble")
            .expect("stored");
        let refs: Vec<&SpanRecord> = full.iter().collect();
        assert_eq!(trace, maslens_otlp::assemble::assemble(&run, &refs));
    }
}
