//! The README's tour (the `sh` block under "## A tour") as the tests run it: its command lines, and
//! a home of their own to run them in, as a user would type them (`$m` the built binary, `$D` the
//! shared data beside the checkout, `bash -o pipefail -c LINE` from the repository root).
//!
//! `readme_tour.rs` runs every line; a line named in [`RUN_BY`] is run instead by the end-to-end test
//! that checks what it writes in depth (verbatim, through [`TourHome::run`]), so the embedded model
//! answers it once per test run, not twice.

pub use super::serve::repo;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Tour lines (by their start) that a dedicated test runs verbatim: (start, the test that runs it).
pub const RUN_BY: &[(&str, &str)] = &[
    (
        "$m optimize ",
        "credit_e2e::e2e_optimize_mmlu_smollm2_every_section",
    ),
    (
        "$m eval locate whowhen:$D/whowhen/Algorithm-Generated ",
        "locate_e2e::e2e_eval_locate_every_protocol_and_full_pipeline_on_whowhen",
    ),
];

/// The command lines of the tour's `sh` block: no blanks, no comments, no variable set-ups, and
/// the trailing `# ...` explanation cut off.
pub fn lines() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
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

/// The one tour line that starts with `start`.
pub fn line(start: &str) -> String {
    let found: Vec<String> = lines()
        .into_iter()
        .filter(|l| l.starts_with(start))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "tour lines starting with {start:?}: {found:?}"
    );
    found.into_iter().next().unwrap_or_default()
}

/// The value after `flag` in a tour line (no quoting in the tour).
pub fn flag_value(line: &str, flag: &str) -> String {
    let mut words = line.split_whitespace();
    words.find(|w| *w == flag);
    words
        .next()
        .unwrap_or_else(|| panic!("{flag} has no value in {line}"))
        .to_string()
}

/// The dedicated test that runs this line, if one does.
pub fn run_by(line: &str) -> Option<&'static str> {
    RUN_BY
        .iter()
        .find(|(start, _)| line.starts_with(start))
        .map(|(_, test)| *test)
}

/// A home of its own (the store, the LLM cache, completions), with the real model store linked in.
pub struct TourHome {
    _dir: tempfile::TempDir,
    home: PathBuf,
    maslens_home: PathBuf,
}

impl TourHome {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let home = dir.path().join("home");
        let maslens_home = home.join(".cache/maslens");
        std::fs::create_dir_all(&maslens_home).expect("the home");
        let real = std::env::var("MASLENS_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/maslens")
            });
        std::os::unix::fs::symlink(real.join("models"), maslens_home.join("models"))
            .expect("link the model store");
        TourHome {
            _dir: dir,
            home,
            maslens_home,
        }
    }

    /// The LLM cache the lines run here share (the default one of this home).
    pub fn maslens_home(&self) -> &Path {
        &self.maslens_home
    }

    /// Runs `script` (a tour line, or one with more arguments) as the tour does.
    pub fn run(&self, script: &str) -> Output {
        let data = repo().join("../shared/data");
        assert!(
            data.is_dir(),
            "the tour reads ../shared/data beside the checkout"
        );
        Command::new("bash")
            .args(["-o", "pipefail", "-c", script])
            .current_dir(repo())
            .env("m", env!("CARGO_BIN_EXE_maslens"))
            .env("D", &data)
            .env("HOME", &self.home)
            .env("MASLENS_HOME", &self.maslens_home)
            .env_remove("MASLENS_CACHE")
            .env_remove("MASLENS_MODEL")
            .env_remove("MASLENS_CONFIG")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("OPENAI_BASE_URL")
            .output()
            .expect("bash runs")
    }
}
