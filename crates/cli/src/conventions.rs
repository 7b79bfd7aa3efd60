//! The flags every command agrees on, checked against the clap definitions by
//! `every_command_follows_the_flag_conventions` (a new command that breaks one fails it).
//!
//! - `--json` (global) on every command;
//! - a command that reads traces flattens [`crate::inputs::Inputs`]: PATHs with `-` for stdin,
//!   `--format/-f`, `--strict`, `--otlp`, `--db`;
//! - a command that reads a line-oriented file (JSONL) accepts `-` for stdin where it reads one
//!   file positionally, and has `--strict` (first bad line fatal; without it bad lines are
//!   skipped with file, line and reason, counted, and the exit code is 1);
//! - the main output is `-o/--out` (a file or, where the command writes several, a folder);
//!   rendered reports are `--html FILE` / `--markdown FILE`; traces written back with verdicts
//!   are `--traces-out FILE` where `--out` is taken by something else;
//! - old names (`--output`, `--write-back`, `--write-verdicts`) stay as hidden aliases for one
//!   release.

/// Long names an output flag may have.
pub const OUTPUT_FLAGS: &[&str] = &["out", "html", "markdown", "traces-out"];

/// Flags that write a side file and are named for what they hold (not the command's output).
pub const SIDE_OUTPUTS: &[&str] = &[
    "usage-log",
    "batch-export",
    "export-refinement",
    "oof-probs",
    "report",
    // `serve`'s write-back endpoints (URLs, not files).
    "otlp-export",
    "phoenix",
];

/// Old output names, kept as hidden aliases.
pub const OLD_OUTPUT_NAMES: &[&str] = &["output", "write-back", "write-verdicts"];

/// Every leaf command under `cmd` with its path (`"eval locate"`), for the tests that hold each
/// command to a rule (these conventions, `examples.rs`).
pub fn leaves(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
    let subs: Vec<_> = cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
        .collect();
    if subs.is_empty() {
        out.push((path.to_string(), cmd.clone()));
    }
    for s in subs {
        let p = format!("{path} {}", s.get_name()).trim().to_string();
        leaves(s, &p, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn help(a: &clap::Arg) -> String {
        a.get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default()
    }

    /// Every broken rule, as `command: problem` lines.
    fn problems(root: clap::Command) -> Vec<String> {
        let mut root = root;
        root.build();
        let mut all = Vec::new();
        leaves(&root, "", &mut all);
        let mut bad = Vec::new();
        for (path, cmd) in &all {
            let args: Vec<&clap::Arg> = cmd.get_arguments().collect();
            let has = |long: &str| args.iter().any(|a| a.get_long() == Some(long));
            if !has("json") {
                bad.push(format!("{path}: no --json"));
            }
            let reads_traces = args.iter().any(|a| a.get_id() == "inputs");
            if reads_traces {
                for f in ["format", "strict", "otlp", "db"] {
                    if !has(f) {
                        bad.push(format!("{path}: reads traces but has no --{f}"));
                    }
                }
            }
            for a in args.iter().filter(|a| a.is_positional()) {
                let h = help(a);
                let line_file = h.contains("JSONL") || h.contains("per line");
                if (reads_traces && a.get_id() == "inputs") || line_file {
                    if !has("strict") {
                        bad.push(format!("{path}: reads {} without --strict", a.get_id()));
                    }
                    let multiple = a.get_num_args().is_some_and(|n| n.max_values() > 1);
                    if (multiple || !a.is_required_set()) && !h.contains("`-`") {
                        bad.push(format!(
                            "{path}: {} does not say that `-` reads stdin",
                            a.get_id()
                        ));
                    }
                }
            }
            for a in args.iter().filter(|a| !a.is_positional()) {
                let Some(long) = a.get_long() else { continue };
                for alias in a.get_visible_aliases().into_iter().flatten() {
                    if OLD_OUTPUT_NAMES.contains(&alias) {
                        bad.push(format!("{path}: old name --{alias} is visible"));
                    }
                }
                let outputish = ["out", "write", "output", "dest"]
                    .iter()
                    .any(|w| long.split('-').any(|part| part == *w))
                    || help(a).starts_with("Write");
                if outputish && !OUTPUT_FLAGS.contains(&long) && !SIDE_OUTPUTS.contains(&long) {
                    bad.push(format!(
                        "{path}: output flag --{long} is not one of {OUTPUT_FLAGS:?} (or a named side output)"
                    ));
                }
                if long == "out" && a.get_short() != Some('o') {
                    bad.push(format!("{path}: --out without -o"));
                }
            }
        }
        bad
    }

    #[test]
    fn every_command_follows_the_flag_conventions() {
        let bad = problems(crate::command());
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// Flags whose values are a fixed set: `--help` and the completions must list them.
    const ENUM_FLAGS: &[&str] = &[
        "format",
        "method",
        "protocol",
        "variant",
        "evaluators",
        "error-modes",
        "segment",
        "blocks",
        "objective",
        "pair-rule",
        "refine-targets",
        "mode",
    ];

    #[test]
    fn enum_flags_list_their_values() {
        let mut root = crate::command();
        root.build();
        let mut all = Vec::new();
        leaves(&root, "", &mut all);
        let mut seen = std::collections::BTreeSet::new();
        for (path, cmd) in &all {
            for a in cmd.get_arguments() {
                let Some(long) = a.get_long() else { continue };
                if ENUM_FLAGS.contains(&long) {
                    seen.insert(long);
                    assert!(
                        !a.get_possible_values().is_empty(),
                        "{path}: --{long} does not list its values"
                    );
                }
            }
        }
        assert_eq!(seen.len(), ENUM_FLAGS.len(), "flags not found: {seen:?}");
    }

    #[test]
    fn the_check_catches_each_kind_of_break() {
        // A made-up command per rule: the check must name each.
        let cmd = clap::Command::new("x")
            .arg(clap::Arg::new("json").long("json").global(true).num_args(0))
            .subcommand(
                clap::Command::new("bad-out").arg(clap::Arg::new("o").long("output").num_args(1)),
            )
            .subcommand(
                clap::Command::new("no-short").arg(clap::Arg::new("out").long("out").num_args(1)),
            )
            .subcommand(
                clap::Command::new("jsonl")
                    .arg(clap::Arg::new("input").help("Input JSONL").required(false)),
            )
            .subcommand(
                clap::Command::new("visible-old").arg(
                    clap::Arg::new("out")
                        .long("out")
                        .short('o')
                        .visible_alias("write-back"),
                ),
            );
        let bad = problems(cmd).join("\n");
        for want in [
            "bad-out: output flag --output",
            "no-short: --out without -o",
            "jsonl: reads input without --strict",
            "jsonl: input does not say",
            "visible-old: old name --write-back",
        ] {
            assert!(bad.contains(want), "missing {want:?} in:\n{bad}");
        }
    }

    #[test]
    fn old_output_names_still_parse() {
        use clap::FromArgMatches;
        for argv in [
            &["maslens", "import", "x.json", "--output", "o.jsonl"][..],
            &["maslens", "locate", "x.json", "--write-back", "o.jsonl"],
            &["maslens", "credit", "x.json", "--write-verdicts", "o.jsonl"],
            &["maslens", "batch", "run", "r.jsonl", "--output", "o.jsonl"],
        ] {
            let m = crate::command().try_get_matches_from(argv).unwrap();
            crate::Cli::from_arg_matches(&m).unwrap();
        }
    }
}
