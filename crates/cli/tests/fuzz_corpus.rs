//! The fuzz targets on stable, inside the test suite (issue 16): every target of `fuzz/`
//! (`fuzz/src/lib.rs`, included here as it is) runs over its seed corpus (`fuzz/seeds/<target>/`),
//! every committed regression input (`fuzz/regressions/<target>/`, inputs that once failed) and a
//! bounded number of seeded mutations of the seeds (bit flips, cuts, splices, inserted JSON
//! tokens). A panic or a broken invariant fails the test with the target and the input's origin.
//! `MASLENS_FUZZ_MUTATIONS` sets the mutations per seed (default 150). The long campaigns are
//! libFuzzer's (`bench/fuzz.sh`, docs/fuzzing.md).

#[allow(dead_code)]
#[path = "../../../fuzz/src/lib.rs"]
mod fuzz;

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = rd
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            let p = e.path();
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.display().to_string(), bytes)
        })
        .collect();
    out.sort();
    out
}

/// xorshift64*: a fixed, dependency-free stream, so a failure replays from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "null",
    "true",
    "-1",
    "0",
    "1e999",
    "-0.0",
    "18446744073709551616",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "```",
    "```json\n",
    "\n",
    "\u{feff}",
    "\u{1b}[2J",
    "{\"",
    "\":",
    "[[[[[[[[",
    "]]]]]]]]",
    "\"$ref\"",
    "\"#/\"",
    "\"type\"",
    "\"steps\"",
    "\"history\"",
    "\"messages\"",
    "\"tools\"",
    "\"step\"",
    "\"index\"",
];

fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 => v.truncate(at),
            4 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                v.splice(at..at, t.iter().copied());
            }
            5 if !other.is_empty() => {
                let from = rng.below(other.len());
                let to = (from + 1 + rng.below(64)).min(other.len());
                v.splice(at..at, other[from..to].iter().copied());
            }
            _ => {
                let end = (at + rng.below(32)).min(v.len());
                let chunk = v[at..end].to_vec();
                v.splice(at..at, chunk);
            }
        }
    }
    v
}

fn run(target: &str, f: fuzz::Target, origin: &str, data: &[u8]) {
    if let Err(e) = std::panic::catch_unwind(|| f(data)) {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "fuzz target {target} failed on {origin}: {msg}\ninput ({} bytes): {:?}",
            data.len(),
            String::from_utf8_lossy(&data[..data.len().min(2000)])
        );
    }
}

#[test]
fn fuzz_targets_hold_on_their_seeds_regressions_and_mutations() {
    let mutations: usize = std::env::var("MASLENS_FUZZ_MUTATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let mut total = 0usize;
    for &(target, f) in fuzz::TARGETS {
        let seeds = inputs(&fuzz_dir().join("seeds").join(target));
        assert!(
            !seeds.is_empty(),
            "fuzz/seeds/{target}/ has no seeds: every target keeps a small corpus in the repo"
        );
        let regressions = inputs(&fuzz_dir().join("regressions").join(target));
        for (origin, data) in seeds.iter().chain(&regressions) {
            run(target, f, origin, data);
            total += 1;
        }
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ maslens_trace::fnv1a(target));
        for (i, (origin, seed)) in seeds.iter().enumerate() {
            let other = &seeds[(i + 1) % seeds.len()].1;
            for m in 0..mutations {
                let data = mutate(&mut rng, seed, other);
                run(target, f, &format!("mutation {m} of {origin}"), &data);
                total += 1;
            }
        }
    }
    eprintln!("fuzz targets: {total} inputs, no failure");
}

/// Every libFuzzer binary of fuzz/Cargo.toml has a body in `TARGETS` and seeds, and the other
/// way round, so a target added on one side is not silently left out of CI.
#[test]
fn every_fuzz_binary_is_run_here() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let mut bins: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "maslens-fuzz")
        .collect();
    bins.sort();
    let mut here: Vec<&str> = fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    here.sort();
    assert_eq!(bins, here);
}
