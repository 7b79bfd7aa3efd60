use super::*;
use crate::test_support::{store_urls, stores};
use crate::RunFilter;
use maslens_trace::{Outcome, Step, ToolCall, TraceBuilder};

fn fixture() -> Vec<Trace> {
    vec![
        TraceBuilder::new("alpha")
            .outcome(Outcome::Failure)
            .step("Planner", "Plan the deployment of the Kubernetes cluster.")
            .step_with(Step {
                agent: "Coder".into(),
                content: "Applying the manifest now.".into(),
                tool_calls: vec![ToolCall {
                    id: Some("c1".into()),
                    name: "shell".into(),
                    arguments: r#"{"cmd": "kubectl get pods"}"#.into(),
                }],
                ..Step::default()
            })
            .step("Critic", "The rollout stalled at 3 replicas.")
            .build(),
        TraceBuilder::new("beta")
            .outcome(Outcome::Success)
            .step("Planner", "Book a flight to Paris.")
            .step("Booker", "Hotel reservation confirmed.")
            .build(),
        TraceBuilder::new("gamma")
            .outcome(Outcome::Failure)
            .step("Coder", "Fix the flaky test in parser.rs")
            .step("Tester", "All tests pass.")
            .build(),
        TraceBuilder::new("delta")
            .step("Planner", "He said \"hello\" to NEAR(x) a:b -x * OR")
            .build(),
        TraceBuilder::new("epsilon")
            .outcome(Outcome::Success)
            .step("Writer", "Lunch at Café Flore.")
            .build(),
    ]
}

async fn ids(store: &Store, filter: &RunFilter) -> BTreeSet<String> {
    store
        .list_runs(filter)
        .await
        .unwrap_or_else(|e| panic!("list {filter:?}: {e}"))
        .into_iter()
        .map(|r| r.id)
        .collect()
}

fn text(q: &str) -> RunFilter {
    RunFilter {
        q: Some(q.into()),
        ..RunFilter::default()
    }
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[test]
fn terms_are_letters_and_digits_and_quoting_is_safe() {
    assert_eq!(
        terms(r#"foo"bar -x a:b NEAR( * OR"#),
        ["foo", "bar", "x", "a", "b", "NEAR", "OR"]
    );
    assert!(terms("  * \" ( ) : - ^ ").is_empty());
    assert_eq!(terms("Café 3.14"), ["Café", "3", "14"]);
    assert_eq!(terms(&"w ".repeat(100)).len(), MAX_TERMS);
    assert_eq!(
        fts5_query(&["a\"b".to_string(), "OR".to_string()]),
        r#""a""b" "OR""#
    );
    // PostgreSQL reads the words as typed (NUL a separator), every text a parameter.
    let q = Query::parse(" a:b  * \0x\0 parser.rs \" ");
    let mut bound = Vec::new();
    let tsq = q.pg_tsquery(|t| {
        bound.push(t);
        format!("${}", bound.len())
    });
    assert_eq!(tsq.as_deref(), Some("((plainto_tsquery('simple', $1)))"));
    assert_eq!(bound, ["a:b x parser.rs"]);
}

#[test]
fn queries_parse_phrases_and_or() {
    let atoms = |q: &str| -> Vec<Vec<(String, bool)>> {
        Query::parse(q)
            .groups
            .iter()
            .map(|g| g.iter().map(|a| (a.text.clone(), a.phrase)).collect())
            .collect()
    };
    let w = |t: &str| (t.to_string(), false);
    let p = |t: &str| (t.to_string(), true);
    // The default: every word, one group.
    assert_eq!(atoms("flaky test"), [vec![w("flaky"), w("test")]]);
    assert_eq!(
        atoms(r#"flaky "unit test" OR timeout"#),
        [vec![w("flaky"), p("unit test")], vec![w("timeout")]]
    );
    // OR is an operator only in capitals between two items; else a word.
    assert_eq!(
        atoms("paris or london"),
        [vec![w("paris"), w("or"), w("london")]]
    );
    assert_eq!(atoms("OR"), [vec![w("OR")]]);
    assert_eq!(atoms("a OR"), [vec![w("a"), w("OR")]]);
    assert_eq!(atoms("OR a"), [vec![w("OR"), w("a")]]);
    assert_eq!(atoms(r#""OR" a"#), [vec![p("OR"), w("a")]]);
    // Unclosed and empty quotes; punctuation-only atoms are dropped, and with them the group.
    assert_eq!(atoms(r#"foo"bar baz"#), [vec![w("foo"), p("bar baz")]]);
    assert!(Query::parse(r#""" * ""#).is_empty());
    assert_eq!(atoms("* OR a"), [vec![w("a")]]);
    // The SQLite expression: quoted terms, a phrase as one string, groups in parentheses.
    assert_eq!(
        Query::parse(r#"flaky "unit-test" OR time:out"#).fts5(),
        r#"("flaky" "unit test") OR ("time" "out")"#
    );
    assert_eq!(
        Query::parse(r#"say "he""llo""#).fts5(),
        r#""say" "he" "llo""#
    );
    // PostgreSQL: words together, each phrase apart, every text bound.
    let mut bound = Vec::new();
    let tsq = Query::parse(r#"a "b c" d OR e"#).pg_tsquery(|t| {
        bound.push(t);
        format!("${}", bound.len())
    });
    assert_eq!(
        tsq.as_deref(),
        Some(
            "((plainto_tsquery('simple', $1) && phraseto_tsquery('simple', $2)) || \
                 (plainto_tsquery('simple', $3)))"
        )
    );
    assert_eq!(bound, ["a d", "b c", "e"]);
    // Highlighting: the words as typed, without operators.
    assert_eq!(
        Query::parse(r#"x "b c" OR parser.rs"#).marked_words(),
        ["x", "b", "c", "parser.rs"]
    );
    // At most MAX_TERMS terms over the whole query, phrases and alternatives included.
    let long = format!("{} OR \"{}\"", "w ".repeat(30), "p ".repeat(30));
    let q = Query::parse(&long);
    let n: usize = q.groups.iter().flatten().map(|a| a.terms.len()).sum();
    assert_eq!(n, MAX_TERMS);
    assert_eq!(q.groups[1][0].text, "p p");
}

#[test]
fn step_rows_carry_tool_calls_and_stay_within_the_limit() {
    let big_text = format!("{}é", "x".repeat(MAX_STEP_TEXT - 1)); // é is 2 bytes
    let t = TraceBuilder::new("t")
        .step_with(Step {
            agent: "A".into(),
            content: "calls\0a tool".into(),
            tool_calls: vec![ToolCall {
                id: None,
                name: "search".into(),
                arguments: "{\"q\": 1}".into(),
            }],
            ..Step::default()
        })
        .step("", big_text)
        .build();
    let rows = step_rows(&t);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].content, "calls a tool\nsearch\n{\"q\": 1}");
    assert_eq!(rows[0].agent.as_deref(), Some("A"));
    assert_eq!(rows[1].agent, None);
    assert_eq!(rows[1].content.len(), MAX_STEP_TEXT - 1);
    // Steps sharing an index (an unvalidated import) share a row.
    let mut dup = t.clone();
    dup.steps[1].index = 0;
    dup.steps[1].content = "second".into();
    let rows = step_rows(&dup);
    assert_eq!(rows.len(), 1);
    assert!(rows[0].content.ends_with("\nsecond"), "{}", rows[0].content);
}

/// The same queries give the same runs on SQLite and PostgreSQL, except where the two
/// tokenizers differ (listed at the end).
#[tokio::test]
async fn full_text_finds_words_in_steps_on_every_backend() {
    for (store, _dir) in stores().await {
        for t in fixture() {
            store.put_trace(&t).await.expect("put");
        }
        let cases: &[(&str, &[&str])] = &[
            ("deployment", &["alpha"]),
            ("KUBERNETES", &["alpha"]),
            ("kubectl pods", &["alpha"]), // tool-call arguments
            ("shell", &["alpha"]),        // tool name
            ("flight paris", &["beta"]),
            ("paris flaky", &[]), // every word in one step
            ("test", &["gamma"]), // no stemming: "tests" is another word
            ("tests", &["gamma"]),
            ("the", &["alpha", "gamma"]),
            ("the rollout", &["alpha"]),
            ("3 replicas", &["alpha"]),
            ("hello", &["delta"]),
            ("\"hello\"", &["delta"]),
            ("a:b", &["delta"]),
            ("-x", &["delta"]),
            ("NEAR(", &["delta"]),
            ("OR", &["delta"]),
            ("café", &["epsilon"]),
            // A phrase: its words next to each other, in order.
            ("\"the rollout\"", &["alpha"]),
            ("\"rollout the\"", &[]),
            ("\"flight to paris\"", &["beta"]),
            ("\"flight paris\"", &[]),
            ("\"a flight\" book", &["beta"]),
            // OR: either group; each group still needs all its words in one step.
            ("paris OR flaky", &["beta", "gamma"]),
            ("hotel confirmed OR lunch", &["beta", "epsilon"]),
            ("hotel paris OR nothing", &[]),
            ("\"to paris\" OR \"all tests\"", &["beta", "gamma"]),
            ("paris or flaky", &[]), // lower case: the word "or"
            ("*", &[]),
            ("\"", &[]),
            ("foo\"bar", &[]),
            ("nothing-here", &[]),
        ];
        for (q, want) in cases {
            assert_eq!(
                ids(&store, &text(q)).await,
                set(want),
                "q {q:?} on {:?}",
                store.backend()
            );
        }
        // Known differences: SQLite folds accents; PostgreSQL keeps `parser.rs` as one token.
        let (cafe, parser): (&[&str], &[&str]) = match store.backend() {
            Backend::Sqlite => (&["epsilon"], &["gamma"]),
            Backend::Postgres => (&[], &[]),
        };
        assert_eq!(ids(&store, &text("cafe")).await, set(cafe));
        assert_eq!(ids(&store, &text("parser")).await, set(parser));
        assert_eq!(ids(&store, &text("parser.rs")).await, set(&["gamma"]));
        // Which steps matched, for "matched in step 1 (Coder)".
        let m = store.step_matches("alpha", "kubectl", 3).await.expect("m");
        assert_eq!(
            m,
            [StepMatch {
                step: 1,
                agent: Some("Coder".into())
            }]
        );
        let m = store.step_matches("alpha", "the", 3).await.expect("m");
        assert_eq!(m.iter().map(|m| m.step).collect::<Vec<_>>(), [0, 1, 2]);
        let m = store
            .step_matches("alpha", "kubectl OR \"rollout stalled\"", 3)
            .await
            .expect("m");
        assert_eq!(m.iter().map(|m| m.step).collect::<Vec<_>>(), [1, 2]);
        let m = store.step_matches("alpha", "the", 1).await.expect("m");
        assert_eq!(m.len(), 1);
        assert!(store
            .step_matches("beta", "the", 3)
            .await
            .expect("m")
            .is_empty());
        assert!(store
            .step_matches("nope", "the", 3)
            .await
            .expect("m")
            .is_empty());
    }
}

#[tokio::test]
async fn hostile_queries_never_fail() {
    let long_word = "x".repeat(100_000);
    let many_words = "w ".repeat(5_000);
    let hostile = [
        "",
        "   ",
        "\"",
        "\"\"",
        "foo\"bar",
        "-x",
        "a:b",
        "NEAR(",
        "NEAR(a b, 2)",
        "*",
        "a*",
        "^a",
        "OR",
        "AND",
        "NOT",
        "a OR b",
        "(",
        ")",
        "{a b}",
        "'",
        "''",
        "\\",
        "%",
        "_",
        "$1",
        "--",
        "; DROP TABLE runs",
        "\0",
        "a\0b",
        "😀",
        "ünïcödé",
        "col:x",
        "+",
        "a + b",
        &long_word,
        &many_words,
        "\u{200b}",
        "\t\n",
    ];
    for (store, _dir) in stores().await {
        for t in fixture() {
            store.put_trace(&t).await.expect("put");
        }
        for q in hostile {
            let f = text(q);
            let got = store.list_runs(&f).await;
            assert!(got.is_ok(), "list q {q:?}: {got:?}");
            let got = store.count_runs_capped(&f, 100).await;
            assert!(got.is_ok(), "count q {q:?}: {got:?}");
            let got = store.step_matches("delta", q, 3).await;
            assert!(got.is_ok(), "step matches q {q:?}: {got:?}");
        }
        // Blank is no filter; nothing searchable matches nothing.
        assert_eq!(ids(&store, &text("  ")).await.len(), 5);
        assert!(ids(&store, &text("*")).await.is_empty());
    }
}

#[tokio::test]
async fn agent_filter_reads_run_agents_kept_in_step_with_the_run() {
    for (store, _dir) in stores().await {
        for t in fixture() {
            store.put_trace(&t).await.expect("put");
        }
        let agent = |a: &str| RunFilter {
            agent: Some(a.into()),
            ..RunFilter::default()
        };
        // `runs.agents` is not what the filter reads.
        sqlx::query("UPDATE runs SET agents = NULL")
            .execute(store.pool())
            .await
            .expect("clear");
        assert_eq!(ids(&store, &agent("Coder")).await, set(&["alpha", "gamma"]));
        assert_eq!(ids(&store, &agent("Booker")).await, set(&["beta"]));
        assert!(ids(&store, &agent("Cod")).await.is_empty());
        assert!(ids(&store, &agent("%")).await.is_empty());
        let f = RunFilter {
            agent: Some("Coder".into()),
            q: Some("flaky".into()),
            outcome: Some("failure".into()),
            ..RunFilter::default()
        };
        assert_eq!(ids(&store, &f).await, set(&["gamma"]));
        assert_eq!(
            store.count_runs_capped(&f, 10).await.expect("count"),
            (1, false)
        );
        let out_of_step: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM run_agents a JOIN runs r ON r.id = a.run_id
                 WHERE a.received_ns <> r.received_ns",
        )
        .fetch_one(store.pool())
        .await
        .expect("check");
        assert_eq!(out_of_step, 0);
        let facets = store.facets().await.expect("facets");
        assert_eq!(
            facets.agents,
            ["Booker", "Coder", "Critic", "Planner", "Tester", "Writer"]
        );
        assert!(facets.systems.is_empty() && facets.located_agents.is_empty());
        for sql in [
            "UPDATE runs SET system = 'sys-b' WHERE id IN ('alpha', 'beta')",
            "UPDATE runs SET system = 'sys-a', located_agent = 'Coder' WHERE id = 'gamma'",
        ] {
            sqlx::query(sql)
                .execute(store.pool())
                .await
                .expect("update");
        }
        let facets = store.facets().await.expect("facets");
        assert_eq!(facets.systems, ["sys-a", "sys-b"]);
        assert_eq!(facets.located_agents, ["Coder"]);
    }
}

#[tokio::test]
async fn a_reimported_trace_replaces_its_rows() {
    for (store, _dir) in stores().await {
        let v1 = TraceBuilder::new("r")
            .step("Old", "apple orchard")
            .step("Old", "apple pie")
            .build();
        let v2 = TraceBuilder::new("r").step("New", "banana bread").build();
        store.put_trace(&v1).await.expect("put");
        assert_eq!(ids(&store, &text("apple")).await, set(&["r"]));
        store.put_trace(&v2).await.expect("put");
        assert!(ids(&store, &text("apple")).await.is_empty());
        assert_eq!(ids(&store, &text("banana")).await, set(&["r"]));
        let old_agent = RunFilter {
            agent: Some("Old".into()),
            ..RunFilter::default()
        };
        assert!(ids(&store, &old_agent).await.is_empty());
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM step_text WHERE run_id = 'r'")
            .fetch_one(store.pool())
            .await
            .expect("count");
        assert_eq!(n, 1);
        assert_eq!(
            store.step_matches("r", "banana", 5).await.expect("m"),
            [StepMatch {
                step: 0,
                agent: Some("New".into())
            }]
        );
    }
}

async fn delete_search_rows(store: &Store, flag_too: bool) {
    for sql in ["DELETE FROM step_text", "DELETE FROM run_agents"] {
        sqlx::query(sql)
            .execute(store.pool())
            .await
            .expect("delete");
    }
    if flag_too {
        sqlx::query("DELETE FROM store_flags")
            .execute(store.pool())
            .await
            .expect("delete flag");
    }
}

#[tokio::test]
async fn opening_indexes_runs_without_search_rows() {
    for (url, _dir) in store_urls().await {
        let store = Store::open(&url).await.expect("open");
        for t in fixture() {
            store.put_trace(&t).await.expect("put");
        }
        // Rows lost with the flag kept: opening does not look again, reindex_search does.
        delete_search_rows(&store, false).await;
        store.close().await;
        let store = Store::open(&url).await.expect("reopen");
        assert!(ids(&store, &text("kubectl")).await.is_empty());
        assert_eq!(store.reindex_search().await.expect("reindex"), 5);
        assert_eq!(ids(&store, &text("kubectl")).await, set(&["alpha"]));
        assert_eq!(store.reindex_search().await.expect("again"), 0);
        // A store whose runs predate the index (no flag): opening indexes them.
        delete_search_rows(&store, true).await;
        store.close().await;
        let store = Store::open(&url).await.expect("reopen");
        assert_eq!(ids(&store, &text("kubectl")).await, set(&["alpha"]));
        let coder = RunFilter {
            agent: Some("Coder".into()),
            ..RunFilter::default()
        };
        assert_eq!(ids(&store, &coder).await, set(&["alpha", "gamma"]));
        store.close().await;
    }
}

/// A database written by the previous version (migration 1 only) migrates and gets its
/// runs indexed when this version opens it.
#[tokio::test]
async fn a_version_1_database_is_migrated_and_indexed() {
    sqlx::any::install_default_drivers();
    for (url, _dir) in store_urls().await {
        let backend = if url.starts_with("postgres") {
            Backend::Postgres
        } else {
            Backend::Sqlite
        };
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await
            .expect("connect");
        let v1: Vec<_> = crate::migrations(backend).into_iter().take(1).collect();
        sqlx::migrate::Migrator::with_migrations(v1)
            .run(&pool)
            .await
            .expect("migration 1");
        let t = &fixture()[0];
        let (json, hash) = crate::trace_json(t).expect("json");
        sqlx::query(
            "INSERT INTO runs (id, source, trace_json, trace_hash, agents, received_ns, state)
                 VALUES ($1, 'import', $2, $3, 'Coder Critic Planner', 42, 'complete')",
        )
        .bind(t.id.as_str())
        .bind(json)
        .bind(hash)
        .execute(&pool)
        .await
        .expect("insert v1 run");
        pool.close().await;
        let store = Store::open(&url).await.expect("open");
        assert_eq!(ids(&store, &text("kubectl")).await, set(&["alpha"]));
        let received: i64 =
            sqlx::query_scalar("SELECT MIN(received_ns) FROM run_agents WHERE run_id = 'alpha'")
                .fetch_one(store.pool())
                .await
                .expect("agents");
        assert_eq!(received, 42);
        store.close().await;
    }
}
