//! `cargo build -p maslens` (what `scripts/maslens` runs) and the test build
//! (`cargo nextest run --workspace`) must resolve the same features for every package they share.
//! Otherwise each rebuilds what the other built: a feature that only a dev-dependency turns on
//! (for example syn's `fold` from the browser tests' fantoccini) changes the fingerprint of that
//! crate and of everything above it, llama.cpp included. The fix for a failure here is to turn
//! the same feature on in a normal (or, for proc-macro dependencies, build) dependency of the
//! `maslens` crate (see its Cargo.toml), or to drop it from the dev-dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// `name version` -> features, for every package in the resolved graph.
fn features(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .arg("tree")
        .args(args)
        .args(["--offline", "--prefix", "none", "-f", "{p}|{f}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((package, feats)) = line.split_once('|') else {
            continue;
        };
        // `{p}` is `name vX.Y.Z`, then `(path)` for local crates and `(*)` for repeats.
        let mut words = package.split_whitespace();
        let key = match (words.next(), words.next()) {
            (Some(name), Some(version)) => format!("{name} {version}"),
            _ => continue,
        };
        let feats = feats.trim().trim_end_matches("(*)").trim();
        map.entry(key)
            .or_default()
            .extend(feats.split(',').filter(|f| !f.is_empty()).map(String::from));
    }
    map
}

#[test]
fn the_binary_build_and_the_test_build_resolve_the_same_features() {
    let run = features(&["-p", "maslens", "-e", "normal,build"]);
    let test = features(&["--workspace", "-e", "normal,build,dev"]);
    assert!(
        run.len() > 100,
        "cargo tree listed only {} packages",
        run.len()
    );
    let differ: Vec<String> = run
        .iter()
        .filter_map(|(package, feats)| {
            let in_test = test.get(package)?;
            (in_test != feats).then(|| {
                let only_test: Vec<&String> = in_test.difference(feats).collect();
                let only_run: Vec<&String> = feats.difference(in_test).collect();
                format!("{package}: only in the test build {only_test:?}, only in the binary build {only_run:?}")
            })
        })
        .collect();
    assert!(
        differ.is_empty(),
        "features differ between `cargo build -p maslens` and the test build, so each rebuilds \
         the other's crates:\n{}",
        differ.join("\n")
    );
}
