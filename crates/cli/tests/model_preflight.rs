//! A model that cannot be used stops an LLM-backed command before any work (issue 37 item 1):
//! within seconds, exit 2, one line naming the cause and the fix. And the stacked default answers
//! with the prior alone only when asked (`--fallback prior`), saying so in the verdict and the
//! exit code. The model servers here are local sockets and the fixture server
//! (`maslens_llm::testing::server::FakeServer`, hand-written replies, **not a model**).

mod common;
use common::*;

use maslens_llm::testing::server::{FakeServer, Reply};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server answering every request with HTTP 401 (what a hosted API says without a key).
fn refusing_server() -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = r#"{"error":{"message":"You didn't provide an API key."}}"#;
            let _ = write!(
                s,
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}/v1")
}

/// An address where nothing listens.
fn closed_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}/v1")
}

/// Each way a model can be unusable, through every LLM-backed command: exit 2 within 5 s, one
/// `error:` line with the cause and the fix, no answer printed.
#[test]
fn an_unusable_model_stops_every_llm_command_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let trace = data("whowhen/Hand-Crafted/10.json");
    let trace = trace.to_str().unwrap();
    let refusing = format!("openai:gpt-4o-mini@{}", refusing_server());
    let closed = format!("openai:gpt-4o-mini@{}", closed_port());
    // (model, words the error line must hold)
    let models: [(&str, &[&str]); 3] = [
        (
            "openai:gpt-4o-mini",
            &["OPENAI_API_KEY", "not set", "--model"],
        ),
        (
            &refusing,
            &["HTTP 401", "no API key was sent: set OPENAI_API_KEY"],
        ),
        (&closed, &["cannot reach", "--base-url", "--model"]),
    ];
    let commands: [&[&str]; 5] = [
        &["locate", trace],
        &["locate", trace, "--method", "llm"],
        &["eval", "locate", trace],
        &["scan", trace],
        &["credit", trace],
    ];
    for (model, words) in models {
        for cmd in commands {
            let mut args = cmd.to_vec();
            args.extend(["--model", model]);
            let started = Instant::now();
            let o = maslens(dir.path(), &args).output().unwrap();
            let took = started.elapsed();
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
            assert!(took < Duration::from_secs(5), "{args:?} took {took:?}: {e}");
            let line = e
                .lines()
                .find(|l| l.starts_with("error:"))
                .unwrap_or_else(|| panic!("{args:?}: no error line: {e}"));
            for w in words {
                assert!(line.contains(w), "{args:?}: {line:?} lacks {w:?}");
            }
            assert!(o.stdout.is_empty(), "{args:?} answered: {:?}", o.stdout);
        }
    }
}

/// The stacked default whose LLM calls fail on a trace: an error for that trace (exit 1), not the
/// prior's answer passed off as the method's; with `--fallback prior`, the prior's answer, said
/// to be one, and still exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stacked_default_falls_back_to_the_prior_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    // The server is there (its model list answers) but every completion is refused.
    let server = FakeServer::start(Arc::new(|_, _| Reply::Status {
        code: 400,
        body: r#"{"error":{"message":"this model does not exist"}}"#.into(),
        retry_after: None,
    }))
    .await
    .unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let trace = data("whowhen/Hand-Crafted/10.json");
    let args = ["locate", trace.to_str().unwrap(), "--model", &spec];
    let o = run(maslens(dir.path(), &args)).await;
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(e.contains("--fallback prior"), "{e}");

    let mut asked = args.to_vec();
    asked.extend(["--fallback", "prior"]);
    let o = run(maslens(dir.path(), &asked)).await;
    let (out, e) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        out.contains("the prior alone: the LLM pipeline failed"),
        "{out}"
    );
    assert!(e.contains("answered by the prior alone"), "{e}");
}
