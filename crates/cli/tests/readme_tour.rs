//! Every command of the README's tour runs, as a user would type it, with the real embedded model
//! (a documented command that fails is a bug). Each line's wall time goes to stderr and to
//! `target/tmp/readme-tour.tsv`; `maslens serve` and `serve-model` must start and keep running
//! for 5 s. Slow (real model calls): named `e2e_*`; the structural test (every tour line is a
//! maslens command) is fast.
#![cfg(feature = "local")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The command lines of the tour's `sh` block: no blanks, no comments, no variable set-ups, and
/// the trailing `# ...` explanation cut off.
fn tour_lines(readme: &str) -> Vec<String> {
    let start = readme.find("## A tour").expect("README has a tour");
    let block = &readme[start..];
    let open = block.find("```sh").expect("the tour is an sh block") + "```sh".len();
    let close = block[open..].find("```").expect("the block ends") + open;
    block[open..close]
        .lines()
        .map(|l| match l.find("  #").or_else(|| l.find(" # ")) {
            Some(i) => l[..i].trim(),
            None => l.trim(),
        })
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| !(l.starts_with("m=") || l.starts_with("D=")))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_tour_is_found_and_every_line_calls_maslens() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = tour_lines(&readme);
    assert!(lines.len() >= 25, "{lines:#?}");
    for l in &lines {
        assert!(
            l.starts_with("$m "),
            "a tour line that is not a maslens command: {l}"
        );
    }
}

// In CI: about 10 minutes alone on 2 cores with the embedded model (the per-line times of the last
// run are in the closing note of issue 20). `cargo nextest run --workspace -E 'test(e2e_readme_tour)'`.
#[test]
fn e2e_readme_tour_commands_run() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = tour_lines(&readme);
    let data = repo().join("../shared/data");
    assert!(
        data.is_dir(),
        "the tour reads ../shared/data beside the checkout"
    );
    // A home of its own (the store, the LLM cache, completions), with the real model store.
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mhome = home.join(".cache/maslens");
    std::fs::create_dir_all(&mhome).unwrap();
    let real_home = std::env::var("MASLENS_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/maslens")
        });
    std::os::unix::fs::symlink(real_home.join("models"), mhome.join("models")).unwrap();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for line in &lines {
        let server = line.starts_with("$m serve");
        let script = if server {
            // Must start and still be serving after 5 s (timeout's exit 124).
            format!("timeout 5 {line}")
        } else {
            line.clone()
        };
        let started = Instant::now();
        let out = Command::new("bash")
            .args(["-o", "pipefail", "-c", &script])
            .current_dir(repo())
            .env("m", env!("CARGO_BIN_EXE_maslens"))
            .env("D", &data)
            .env("HOME", &home)
            .env("MASLENS_HOME", &mhome)
            .env_remove("MASLENS_CACHE")
            .output()
            .expect("bash runs");
        let secs = started.elapsed().as_secs_f64();
        let code = out.status.code().unwrap_or(-1);
        let ok = if server {
            code == 124
        } else {
            code == 0 || code == 1
        };
        eprintln!("{secs:7.1} s  exit {code}  {line}");
        rows.push(format!("{secs:.1}\t{code}\t{line}"));
        if !ok {
            failures.push(format!(
                "{line}: exit {code}\n{}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .rev()
                    .take(8)
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    let tsv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-tour.tsv");
    let _ = std::fs::write(&tsv, rows.join("\n") + "\n");
    assert!(
        failures.is_empty(),
        "README tour commands failed:\n{}",
        failures.join("\n\n")
    );
}
