//! Records the git revision of the checkout this crate is built from (`MASLENS_GIT_REV`), so
//! every report can say which code produced it. Outside a checkout nothing is recorded.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    if let Some(rev) = git(&["rev-parse", "HEAD"]) {
        println!("cargo:rustc-env=MASLENS_GIT_REV={rev}");
    }
    // Rebuild when HEAD moves (a branch switch or a new commit).
    for p in [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["rev-parse", "--git-path", "logs/HEAD"]),
    ]
    .into_iter()
    .flatten()
    {
        println!("cargo:rerun-if-changed={p}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
