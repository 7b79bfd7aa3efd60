use super::*;
use crate::test_support::stores;
use maslens_trace::{Outcome, TraceBuilder};

fn trace(id: &str, outcome: Outcome, agents: &[&str]) -> Trace {
    let mut b = TraceBuilder::new(id).task("q").outcome(outcome);
    for a in agents {
        b = b.step(a, "text");
    }
    b.build()
}

#[tokio::test]
async fn put_list_filter_and_page() {
    for (store, _dir) in stores().await {
        for i in 0..7 {
            let outcome = if i % 2 == 0 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            let agents: &[&str] = if i < 3 {
                &["Planner", "Coder"]
            } else {
                &["Solo"]
            };
            store
                .put_trace(&trace(&format!("t{i}"), outcome, agents))
                .await
                .expect("put");
        }
        let all = store.list_runs(&RunFilter::default()).await.expect("list");
        assert_eq!(all.len(), 7);
        let failed = store
            .list_runs(&RunFilter {
                outcome: Some("failure".into()),
                ..RunFilter::default()
            })
            .await
            .expect("list");
        assert_eq!(failed.len(), 4);
        let coder = store
            .list_runs(&RunFilter {
                agent: Some("Coder".into()),
                outcome: Some("failure".into()),
                ..RunFilter::default()
            })
            .await
            .expect("list");
        let ids: BTreeSet<&str> = coder.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, BTreeSet::from(["t0", "t2"]));
        // Pages of 3 cover everything once, in order.
        let mut seen = Vec::new();
        let mut before = None;
        loop {
            let page = store
                .list_runs(&RunFilter {
                    limit: Some(3),
                    before: before.clone(),
                    ..RunFilter::default()
                })
                .await
                .expect("page");
            if page.is_empty() {
                break;
            }
            before = page.last().map(|r| (r.received_ns, r.id.clone()));
            seen.extend(page.into_iter().map(|r| r.id));
        }
        assert_eq!(seen.len(), 7);
        assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 7);
        // `traces` walks every page (here pages of 3) in the same order.
        let traces = store
            .traces(&RunFilter {
                limit: Some(3),
                ..RunFilter::default()
            })
            .await
            .expect("traces");
        let ids: Vec<String> = traces.into_iter().map(|t| t.id).collect();
        assert_eq!(ids, seen);
        let back = store.run("t3").await.expect("run").expect("exists");
        assert_eq!(back.trace.expect("trace").steps.len(), 1);
        assert_eq!(back.summary.state, "complete");
        assert!(store.run("nope").await.expect("run").is_none());
    }
}

fn keyed(i: usize) -> Trace {
    let outcome = [Outcome::Success, Outcome::Failure, Outcome::Unknown][i % 3];
    let mut words = vec![if i.is_multiple_of(2) { "even" } else { "odd" }];
    if i.is_multiple_of(3) {
        words.push("tri");
    }
    TraceBuilder::new(format!("k{i:02}"))
        .outcome(outcome)
        .step(&format!("A{}", i % 4), format!("common word{i}"))
        .step("B", words.join(" "))
        .build()
}

/// Pages of every filter shape (and on SQLite every text plan) are disjoint, complete and in
/// list order, also across runs that share a received time.
#[tokio::test]
async fn keyset_pages_with_text_and_filters_are_disjoint_and_complete() {
    for (store, _dir) in stores().await {
        for i in 0..30 {
            store.put_trace(&keyed(i)).await.expect("put");
        }
        // Three runs share each received time: the id breaks ties.
        for i in 0..30 {
            let ns = 1_000 + (i as i64) / 3;
            for sql in [
                "UPDATE runs SET received_ns = $1 WHERE id = $2",
                "UPDATE run_agents SET received_ns = $1 WHERE run_id = $2",
            ] {
                sqlx::query(sql)
                    .bind(ns)
                    .bind(format!("k{i:02}"))
                    .execute(store.pool())
                    .await
                    .expect("time");
            }
        }
        // Newest first: received time, then id, both descending.
        let order: Vec<usize> = (0..30).rev().collect();
        type Pred = Box<dyn Fn(usize) -> bool>;
        let cases: Vec<(RunFilter, Pred)> = vec![
            (RunFilter::default(), Box::new(|_| true)),
            (
                RunFilter {
                    q: Some("common".into()),
                    ..RunFilter::default()
                },
                Box::new(|_| true),
            ),
            (
                RunFilter {
                    q: Some("EVEN".into()),
                    ..RunFilter::default()
                },
                Box::new(|i| i % 2 == 0),
            ),
            (
                RunFilter {
                    q: Some("even tri".into()),
                    ..RunFilter::default()
                },
                Box::new(|i| i % 6 == 0),
            ),
            (
                RunFilter {
                    q: Some("odd".into()),
                    outcome: Some("failure".into()),
                    ..RunFilter::default()
                },
                Box::new(|i| i % 2 == 1 && i % 3 == 1),
            ),
            (
                RunFilter {
                    agent: Some("A1".into()),
                    q: Some("common".into()),
                    ..RunFilter::default()
                },
                Box::new(|i| i % 4 == 1),
            ),
            (
                RunFilter {
                    agent: Some("B".into()),
                    outcome: Some("success".into()),
                    since_ns: Some(1_002),
                    until_ns: Some(1_009),
                    ..RunFilter::default()
                },
                Box::new(|i| i % 3 == 0 && (6..27).contains(&i)),
            ),
            (
                RunFilter {
                    outcome: Some("unknown".into()),
                    since_ns: Some(1_003),
                    ..RunFilter::default()
                },
                Box::new(|i| i % 3 == 2 && i >= 9),
            ),
        ];
        let plans = match store.backend() {
            Backend::Sqlite => vec![
                None,
                Some(TextPlan::Drive),
                Some(TextPlan::Member),
                Some(TextPlan::Probe),
            ],
            Backend::Postgres => vec![None, Some(TextPlan::Drive), Some(TextPlan::Probe)],
        };
        for plan in plans {
            FORCE_TEXT_PLAN.with(|f| f.set(plan));
            for (filter, pred) in &cases {
                let want: Vec<String> = order
                    .iter()
                    .filter(|i| pred(**i))
                    .map(|i| format!("k{i:02}"))
                    .collect();
                let mut got = Vec::new();
                let mut before = None;
                loop {
                    let page = store
                        .list_runs(&RunFilter {
                            limit: Some(4),
                            before: before.clone(),
                            ..filter.clone()
                        })
                        .await
                        .expect("page");
                    assert!(page.len() <= 4);
                    let Some(last) = page.last() else { break };
                    before = Some((last.received_ns, last.id.clone()));
                    got.extend(page.into_iter().map(|r| r.id));
                }
                assert_eq!(got, want, "{filter:?} plan {plan:?}");
                let n = i64::try_from(want.len()).expect("small");
                let counted = store.count_runs_capped(filter, 100).await.expect("count");
                assert_eq!(counted, (n, false), "{filter:?} plan {plan:?}");
                if n > 0 {
                    let capped = store.count_runs_capped(filter, n - 1).await.expect("count");
                    assert_eq!(capped, (n - 1, true), "{filter:?} plan {plan:?}");
                }
            }
        }
        FORCE_TEXT_PLAN.with(|f| f.set(None));
    }
}

/// SQLite walks an index in list order for each common filter (no sort of all matches),
/// and the row-value cursor is an index range.
#[tokio::test]
async fn sqlite_list_plans_walk_an_index_without_sorting() {
    let (store, _dir) = crate::test_support::sqlite().await;
    for i in 0..6 {
        store.put_trace(&keyed(i)).await.expect("put");
    }
    let cursor = Some((1_000, "k03".to_string()));
    let cases: Vec<(RunFilter, &str)> = vec![
        (RunFilter::default(), "SCAN runs USING INDEX runs_recv_id"),
        (
            RunFilter {
                outcome: Some("failure".into()),
                ..RunFilter::default()
            },
            "USING INDEX runs_outcome_recv (outcome=?)",
        ),
        (
            RunFilter {
                before: cursor.clone(),
                ..RunFilter::default()
            },
            "USING INDEX runs_recv_id ((received_ns,id)<(?,?))",
        ),
        (
            RunFilter {
                before: cursor.clone(),
                outcome: Some("failure".into()),
                ..RunFilter::default()
            },
            "USING INDEX runs_outcome_recv (outcome=? AND (received_ns,id)<(?,?))",
        ),
        (
            RunFilter {
                system: Some("s".into()),
                ..RunFilter::default()
            },
            "USING INDEX runs_system_recv (system=?)",
        ),
        (
            RunFilter {
                located_agent: Some("A1".into()),
                ..RunFilter::default()
            },
            "USING INDEX runs_located_recv (located_agent=?)",
        ),
        (
            RunFilter {
                agent: Some("A1".into()),
                before: cursor.clone(),
                ..RunFilter::default()
            },
            "USING COVERING INDEX run_agents_agent (agent=? AND (received_ns,run_id)<(?,?))",
        ),
    ];
    for plan in [Some(TextPlan::Member), Some(TextPlan::Probe), None] {
        FORCE_TEXT_PLAN.with(|f| f.set(plan));
        for (filter, index) in &cases {
            let mut filter = filter.clone();
            if plan.is_some() {
                filter.q = Some("common".into());
            }
            let lines = store.explain_list(&filter).await.expect("plan").join("\n");
            assert!(lines.contains(index), "{filter:?}: {lines}");
            assert!(!lines.contains("TEMP B-TREE"), "{filter:?}: {lines}");
        }
    }
    // Few matches: the matching runs are looked up by key (and the page sorted).
    FORCE_TEXT_PLAN.with(|f| f.set(Some(TextPlan::Drive)));
    let lines = store
        .explain_list(&RunFilter {
            q: Some("tri".into()),
            ..RunFilter::default()
        })
        .await
        .expect("plan")
        .join("\n");
    assert!(lines.contains("runs_search_key"), "{lines}");
    FORCE_TEXT_PLAN.with(|f| f.set(None));
}

/// Issue 36 item 3: a trace's run warnings (OTLP assembly's `otel_warnings`) are on its run
/// summary, in the list and for one run, on both back ends; a trace without any has none.
#[tokio::test]
async fn run_warnings_reach_the_summary() {
    for (store, _dir) in stores().await {
        let mut warned = TraceBuilder::new("w").step("a", "").build();
        warned.metadata.insert(
            maslens_trace::WARNINGS_KEY.into(),
            serde_json::json!([{"code": "no_content", "message": "m", "fix": "f"}]),
        );
        store.put_trace(&warned).await.expect("put");
        store
            .put_trace(&TraceBuilder::new("ok").step("a", "x").build())
            .await
            .expect("put");
        let one = store.run_summary("w").await.expect("read").expect("run");
        assert_eq!(one.warnings.len(), 1);
        assert_eq!(one.warnings[0].code, "no_content");
        assert_eq!(one.warnings[0].fix.as_deref(), Some("f"));
        let all = store.list_runs(&RunFilter::default()).await.expect("list");
        for r in &all {
            assert_eq!(r.warnings.is_empty(), r.id == "ok", "{r:?}");
        }
    }
}
