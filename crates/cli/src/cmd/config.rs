//! `maslens config`: where the config file is, what is in force and where each value came from.

use crate::cmd::{EXIT_ERROR, EXIT_OK};
use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::Context;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// Print the settings in force and where each came from (flag, env, config file, default).
    Show {
        #[command(flatten)]
        llm: LlmArgs,
    },
    /// Print the path of the config file that would be read (or created by `init`).
    Path {
        #[command(flatten)]
        llm: LlmArgs,
    },
    /// Write a commented config file to the platform's config directory (or `--config FILE`);
    /// refuses to overwrite one that exists.
    Init {
        #[command(flatten)]
        llm: LlmArgs,
    },
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Show { llm } => {
            let eff = llm.effective()?;
            if global.json {
                let rows: Vec<_> = eff
                    .rows()
                    .into_iter()
                    .map(|(k, v, s)| serde_json::json!({"setting": k, "value": v, "source": s}))
                    .collect();
                crate::outln!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(ExitCode::from(EXIT_OK));
            }
            let rows = eff.rows();
            let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
            let wv = rows
                .iter()
                .map(|r| crate::term::inline(&r.1).chars().count())
                .max()
                .unwrap_or(0)
                .min(60);
            for (k, v, s) in rows {
                let v = crate::term::inline(&v);
                crate::outln!("{k:<w$}  {v:<wv$}  {}", crate::term::inline(&s));
            }
            Ok(ExitCode::from(EXIT_OK))
        }
        Action::Path { llm } => {
            let path = match maslens_llm::config::locate(llm.llm_config.as_deref())? {
                Some((p, _)) => p,
                None => maslens_llm::config::default_config_path(),
            };
            crate::outln!("{}", path.display());
            Ok(ExitCode::from(EXIT_OK))
        }
        Action::Init { llm } => {
            let path = llm
                .llm_config
                .clone()
                .unwrap_or_else(maslens_llm::config::default_config_path);
            if path.exists() {
                eprintln!(
                    "error: {} exists; edit it, or remove it first",
                    path.display()
                );
                return Ok(ExitCode::from(EXIT_ERROR));
            }
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            crate::ui::write_atomic(&path, maslens_llm::config::TEMPLATE.as_bytes())?;
            eprintln!("wrote {}", path.display());
            Ok(ExitCode::from(EXIT_OK))
        }
    }
}
