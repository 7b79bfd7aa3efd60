//! One example or more per command, shown at the end of its `--help` and in its man page.
//! Kept in one table so a test can check that every command has one and that each parses
//! (`every_command_has_an_example_that_parses`).

/// (command path, example lines). A parent command shows its children's examples.
pub const EXAMPLES: &[(&str, &[&str])] = &[
    ("import", &[
        "maslens import runs/ -o traces.jsonl               # any supported input -> native JSONL",
        "maslens import --otlp examples/otlp/genai-run.jsonl # OpenTelemetry spans -> traces",
        "maslens import examples/whowhen-style.json --db maslens.db",
    ]),
    ("validate", &["maslens validate runs/ --strict"]),
    ("show", &["maslens show examples/whowhen-style.json --full"]),
    ("stats", &["maslens stats runs/ --json"]),
    ("schema", &["maslens schema trace > trace.schema.json"]),
    ("model pull", &["maslens model pull smollm2-135m"]),
    ("model list", &["maslens model list --json"]),
    ("model bench", &["maslens model bench --reps 1 --mode raw"]),
    ("serve-model", &["maslens serve-model --port 8080   # then --model openai:smollm2-135m@http://127.0.0.1:8080/v1"]),
    ("serve", &["maslens serve --db maslens.db --phoenix http://127.0.0.1:6006"]),
    ("batch run", &["maslens batch run examples/inputs/batch-requests.jsonl -o results.jsonl"]),
    ("batch export", &["maslens batch export --requests examples/inputs/batch-requests.jsonl -o batch.jsonl --model openai/gpt-4o-mini"]),
    ("batch import", &["maslens batch import batch-output.jsonl"]),
    ("cache stats", &["maslens cache stats --json"]),
    ("cache clear", &["maslens cache clear --model openai:gpt-4o-mini"]),
    ("locate", &[
        "maslens locate examples/whowhen-style.json                       # LLM pipeline + prior, stacked (embedded model)",
        "maslens locate runs/ --model openai/gpt-4o-mini --stack stack.json   # weights fit for that model (eval stack)",
        "maslens locate runs/ --model openai/gpt-4o-mini -o located.jsonl",
        "maslens locate runs/ --method prior --json                      # no LLM",
    ]),
    ("eval locate", &[
        "maslens eval locate whowhen:runs/Hand-Crafted --method prior -o report/",
        "maslens eval locate aegis:aegis.jsonl --model openai/gpt-4o-mini --max-cost 2",
    ]),
    ("eval stack", &[
        "maslens eval stack whowhen:runs/ --model openai/gpt-4o-mini -o stack.json",
        "maslens eval stack whowhen:runs/ --verdicts report/verdicts.jsonl   # no LLM calls: an earlier run's verdicts",
    ]),
    ("eval compare", &[
        "maslens eval compare whowhen:runs/ --model openai/gpt-4o-mini -o cmp/   # all six localizers, paired tests",
        "maslens eval compare whowhen:runs/ --methods prior,all-at-once,binary-search --limit 20",
    ]),
    ("prior train", &["maslens prior train labelled/ -o prior.json --report report.json   # nested grouped CV, then select and train"]),
    ("prior eval", &["maslens prior eval labelled/ --model prior.json"]),
    ("prior rank", &["maslens prior rank examples/whowhen-style.json --top 3"]),
    ("scan", &["maslens scan runs/ -o scan.json --markdown scan.md"]),
    ("select", &["maslens select --scan scan.json --n 4,8"]),
    ("repair", &["maslens repair runs/ --scan scan.json -o repairs.jsonl"]),
    ("replay-stats", &["maslens replay-stats replays.jsonl -o stats.json"]),
    ("process-stats", &[
        "maslens process-stats scan.json                      # IFs per task and per 1K tokens",
        "maslens process-stats grpo.json if-grpo.json --seed 1  # paired by task, Holm-adjusted tests",
    ]),
    ("advantages", &["maslens advantages examples/inputs/grpo-groups.jsonl -o advantages.jsonl"]),
    ("modes", &[
        "maslens modes --db maslens.db                       # failed runs of every system, grouped",
        "maslens modes --db maslens.db --outcome unknown --system shop-bot --summarize",
        "maslens modes located.jsonl --gold -o modes.json  # traces from `locate -o`, purity vs gold",
    ]),
    ("improve", &[
        "maslens improve mypkg.team:system --tasks tasks.jsonl --out improve/ --model openai/gpt-4o-mini",
        "maslens improve --python .venv/bin/python mypkg.team:system --tasks tasks.jsonl --out improve/ --max-calls 200",
    ]),
    ("credit", &["maslens credit runs/ --limit 2 --html credit.html"]),
    ("optimize", &[
        "maslens optimize examples/debate-smoke.toml --simulation -o opt/",
        "maslens optimize examples/debate-smoke.toml --simulation --sweep tau=0.3,0.5,0.7 --sweep m=3,5 -o sweep/",
        "maslens optimize examples/debate-smoke.toml --simulation --sweep round=1,2   # one round at a time",
    ]),
    ("inject", &[
        "maslens inject --simulation --questions 8 -o injected/",
        "maslens inject examples/debate-smoke.toml --model local:smollm2-135m --dataset jsonl:examples/inputs/easy-mcq.jsonl --per-run 2 -o injected/",
    ]),
    ("completions", &["maslens completions bash > ~/.local/share/bash-completion/completions/maslens"]),
    ("config show", &[
        "maslens config show                        # what LLM-backed commands use now, and why",
        "maslens config show --model openai/gpt-4o  # ... with this flag",
    ]),
    ("config path", &["maslens config path"]),
    ("config init", &["maslens config init     # a commented config.toml to edit"]),
    ("man", &["maslens man -o /usr/local/share/man/man1   # one page per command"]),
];

fn render(lines: &[&str]) -> String {
    let mut s = String::from("Examples:\n");
    for l in lines {
        s.push_str("  ");
        s.push_str(l);
        s.push('\n');
    }
    s.trim_end().to_string()
}

/// `cmd` with every command's examples attached as `after_help`.
pub fn attach(cmd: clap::Command) -> clap::Command {
    attach_at(cmd, "")
}

fn attach_at(mut cmd: clap::Command, path: &str) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        let child = if path.is_empty() {
            name.clone()
        } else {
            format!("{path} {name}")
        };
        cmd = cmd.mut_subcommand(&name, |c| attach_at(c, &child));
    }
    let own: Vec<&str> = EXAMPLES
        .iter()
        .filter(|(p, _)| {
            !path.is_empty()
                && (*p == path || p.strip_prefix(path).is_some_and(|r| r.starts_with(' ')))
        })
        .flat_map(|(_, l)| l.iter().copied())
        .collect();
    if own.is_empty() {
        cmd
    } else {
        cmd.after_help(render(&own))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;
    use clap::CommandFactory;

    /// Split an example line into argv: drop the trailing comment and shell redirection.
    fn argv(line: &str) -> Vec<String> {
        let line = line.split(" #").next().unwrap_or(line);
        let line = line.split(" > ").next().unwrap_or(line);
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn every_command_has_an_example_that_parses() {
        let mut found = Vec::new();
        crate::conventions::leaves(&Cli::command(), "", &mut found);
        let all: Vec<String> = found.into_iter().map(|(path, _)| path).collect();
        assert!(all.len() > 25, "{all:?}");
        for leaf in &all {
            let lines = EXAMPLES
                .iter()
                .find(|(p, _)| p == leaf)
                .map(|(_, l)| *l)
                .unwrap_or_else(|| panic!("`maslens {leaf}` has no example in EXAMPLES"));
            for line in lines {
                let args = argv(line);
                let words: Vec<&str> = leaf.split(' ').collect();
                assert_eq!(args[0], "maslens", "{line}");
                assert_eq!(&args[1..=words.len()], words.as_slice(), "{line}");
                if let Err(e) = Cli::command().try_get_matches_from(&args) {
                    panic!("example `{line}` does not parse: {e}");
                }
            }
        }
        for (p, _) in EXAMPLES {
            assert!(
                all.contains(&p.to_string()),
                "EXAMPLES names `{p}`, not a command"
            );
        }
    }

    #[test]
    fn help_ends_with_the_examples() {
        let mut cmd = attach(Cli::command());
        let locate = cmd.find_subcommand_mut("locate").unwrap();
        let help = locate.render_help().to_string();
        assert!(help.contains("Examples:\n  maslens locate examples/whowhen-style.json"));
        let mut cmd = attach(Cli::command());
        let model = cmd.find_subcommand_mut("model").unwrap();
        let help = model.render_help().to_string();
        assert!(help.contains("maslens model pull") && help.contains("maslens model bench"));
    }
}
