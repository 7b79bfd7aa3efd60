//! `cargo build -p maslens` (what `scripts/maslens` runs), the wheel's build (`maturin build`:
//! `-p maslens-python` with pyproject.toml's features) and the test build (`cargo nextest run
//! --workspace`) must resolve the same features for every package they share.
//! Otherwise each rebuilds what the other built: a feature that only a dev-dependency turns on
//! (for example syn's `fold` from the browser tests' fantoccini) changes the fingerprint of that
//! crate and of everything above it, llama.cpp included. The fix for a failure here is to turn
//! the same feature on in `crates/workspace-hack/Cargo.toml` (a normal dependency there, or a build
//! dependency for proc-macro and build-script ones), or to drop it from the dev-dependency.

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

/// Packages whose features differ between `build` and `test`, with the features only one has.
fn differences(
    build: &BTreeMap<String, BTreeSet<String>>,
    test: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    build
        .iter()
        .filter_map(|(package, feats)| {
            let in_test = test.get(package)?;
            (in_test != feats).then(|| {
                let only_test: Vec<&String> = in_test.difference(feats).collect();
                let only_build: Vec<&String> = feats.difference(in_test).collect();
                format!("{package}: only in the test build {only_test:?}, only in this build {only_build:?}")
            })
        })
        .collect()
}

/// The features pyproject.toml's `[tool.maturin]` asks for (what `maturin build` passes to cargo).
fn maturin_features() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../pyproject.toml");
    let text = std::fs::read_to_string(path).expect("pyproject.toml reads");
    let line = text
        .lines()
        .find(|l| l.starts_with("features = ["))
        .expect("pyproject.toml's [tool.maturin] has a features line");
    line.trim_start_matches("features = [")
        .trim_end_matches(']')
        .split(',')
        .map(|f| f.trim().trim_matches('"'))
        .filter(|f| !f.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn the_binary_the_wheel_and_the_test_build_resolve_the_same_features() {
    let test = features(&["--workspace", "-e", "normal,build,dev"]);
    let wheel_features = maturin_features();
    let builds = [
        (
            "cargo build -p maslens",
            features(&["-p", "maslens", "-e", "normal,build"]),
        ),
        (
            "maturin build (-p maslens-python)",
            features(&[
                "-p",
                "maslens-python",
                "--features",
                &wheel_features,
                "-e",
                "normal,build",
            ]),
        ),
    ];
    let mut differ = Vec::new();
    for (name, build) in &builds {
        assert!(
            build.len() > 100,
            "{name}: cargo tree listed only {} packages",
            build.len()
        );
        for line in differences(build, &test) {
            // The wheel's own crates differ by the features maturin passes (extension-module):
            // pyo3's build and the package itself rebuild, nothing below them.
            if name.starts_with("maturin")
                && (line.starts_with("pyo3") || line.starts_with("maslens-python "))
            {
                continue;
            }
            differ.push(format!("{name}: {line}"));
        }
    }
    assert!(
        differ.is_empty(),
        "features differ from the test build's, so each build rebuilds the other's crates:\n{}",
        differ.join("\n")
    );
}
