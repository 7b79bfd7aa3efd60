//! Helpers shared by the CLI integration tests that drive the built `maslens` binary.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A file under the shared data folder beside the repository (`../shared/data/...`).
pub fn data(rel: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/"
    ))
    .join(rel)
}

/// The built binary with an isolated home and cache, and no model or endpoint from the environment.
pub fn maslens(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_maslens"));
    c.env("MASLENS_HOME", home)
        .env("MASLENS_CACHE", home.join("cache.sqlite"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("MASLENS_MODEL")
        // No config file of the user's: an empty config directory inside the test's home.
        .env_remove("MASLENS_CONFIG")
        .env("XDG_CONFIG_HOME", home.join("xdg-config"))
        .args(args);
    c
}

/// Run a command off the async runtime (the fixture server lives on it).
pub async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Stdout parsed as JSON; panics with stdout and stderr when it is not.
pub fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}
pub mod browser;
pub mod serve;
