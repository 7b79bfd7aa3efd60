//! End to end through the whole stack (usage tracker, cache, budget) and structured output with
//! the real embedded model, SmolLM2-135M-Instruct (`scripts/fetch-model.sh` or
//! `maslens model pull smollm2-135m` puts it in `$MASLENS_HOME`).
#![cfg(feature = "local")]

use maslens_llm::budget::Budget;
use maslens_llm::structured::complete_json;
use maslens_llm::{open, CacheMode, ChatRequest, LlmError, Message, OpenOptions};
use serde_json::json;

fn opts(dir: &std::path::Path) -> OpenOptions {
    let config = dir.join("llm.toml");
    std::fs::write(&config, "").unwrap();
    OpenOptions {
        cache_path: Some(dir.join("cache.sqlite")),
        config: Some(config),
        context_size: Some(2048),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_stack_structured_cache_replay_budget() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(dir.path());
    let stack = open("local:smollm2-135m", &o)
        .await
        .expect("run scripts/fetch-model.sh first");
    let schema = json!({"type": "object", "required": ["agent", "step"], "additionalProperties": false,
        "properties": {"agent": {"type": "string"}, "step": {"type": "integer", "minimum": 0}}});
    let req = ChatRequest::new(vec![
        Message::system("You read multi-agent traces and answer in JSON."),
        Message::user(
            "Trace: step 0 Planner: plan the task. step 1 Coder: wrote code. step 2 Verifier: skipped the tests. \
             Which agent and step caused the failure?",
        ),
    ])
    .max_tokens(48)
    .stage("judge");

    // Structured output through the stack: grammar-constrained, so it validates.
    let out = complete_json(&*stack.model, req.clone(), &schema)
        .await
        .unwrap();
    let value = out
        .value
        .clone()
        .unwrap_or_else(|| panic!("abstained: {:?} raw {:?}", out.abstain_reason, out.raw));
    assert!(
        value["agent"].is_string() && value["step"].is_u64(),
        "{value}"
    );
    let first_calls = out.calls as u64;

    // The same call again is a cache hit with the same answer.
    let again = complete_json(&*stack.model, req.clone(), &schema)
        .await
        .unwrap();
    assert_eq!(again.value, out.value);
    let r = stack.usage.report();
    assert_eq!(r.stages["judge"].calls, 1 + 1);
    assert!(r.total.cache_hits >= 1);
    assert!(
        r.total.prompt_tokens > 20 && r.total.completion_tokens > 0,
        "{r:?}"
    );
    assert_eq!(
        r.total.cost_usd.unwrap_or(0.0),
        0.0,
        "local models are free"
    );
    assert!(r.price_known);
    assert_eq!(stack.cache.as_ref().unwrap().len().unwrap(), first_calls);

    // Replay, without loading the model: answers from the cache, misses are errors.
    let replay = open(
        "local:smollm2-135m",
        &OpenOptions {
            cache_mode: CacheMode::Replay,
            ..o.clone()
        },
    )
    .await
    .unwrap();
    let replayed = complete_json(&*replay.model, req.clone(), &schema)
        .await
        .unwrap();
    assert_eq!(replayed.value, out.value);
    let other = ChatRequest::new(vec![Message::user("Say hi.")]).max_tokens(8);
    assert!(matches!(
        replay.model.complete(&other).await,
        Err(LlmError::ReplayMiss { .. })
    ));

    // Budget: one backend call allowed; the second distinct call stops cleanly.
    let limited = OpenOptions {
        budget: Budget {
            max_calls: Some(1),
            ..Default::default()
        },
        ..o.clone()
    };
    let b = open("local:smollm2-135m", &limited).await.unwrap();
    assert!(b.model.complete(&other).await.is_ok());
    let third = ChatRequest::new(vec![Message::user("Say bye.")]).max_tokens(8);
    assert!(matches!(
        b.model.complete(&third).await,
        Err(LlmError::Budget(_))
    ));
    // ...while cached calls stay free.
    assert!(b.model.complete(&other).await.unwrap().from_cache);
}
