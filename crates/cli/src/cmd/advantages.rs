//! `maslens advantages`: IF-GRPO advantages (MASIF eq. 1-4) for groups of trajectories.
//!
//! Input JSONL lines `{"group","id","success":bool,"if_cost":number}`; output JSONL lines
//! `{"group","id","advantage"}` in input order. Lines that cannot be read are reported on
//! stderr (file, line, field), left out, and the exit code is 1.

use crate::cmd::{EXIT_OK, EXIT_PROBLEMS};
use crate::Global;
use anyhow::Context;
use maslens_implicit::grpo::{if_grpo_advantages, AdvantageInput};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input JSONL (`-` or absent: stdin).
    pub input: Option<PathBuf>,
    /// Output JSONL (default stdout).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args, _global: &Global) -> anyhow::Result<ExitCode> {
    let (name, reader): (String, Box<dyn BufRead>) = match &args.input {
        Some(p) if p.as_os_str() != "-" => (
            p.display().to_string(),
            Box::new(std::io::BufReader::new(
                std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?,
            )),
        ),
        _ => ("<stdin>".into(), Box::new(std::io::stdin().lock())),
    };
    let mut inputs = Vec::new();
    let mut problems = 0usize;
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("{name}: line {}: cannot read", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<AdvantageInput>(&line) {
            Ok(x) if x.if_cost.is_finite() => inputs.push(x),
            Ok(x) => {
                eprintln!(
                    "warning: {name}: line {}: field if_cost: {} is not a finite number (id {:?})",
                    i + 1,
                    x.if_cost,
                    x.id
                );
                problems += 1;
            }
            Err(e) => {
                eprintln!("warning: {name}: line {}: {e} (expected {{\"group\",\"id\",\"success\":bool,\"if_cost\":number}})", i + 1);
                problems += 1;
            }
        }
    }
    let out = if_grpo_advantages(&inputs).map_err(anyhow::Error::msg)?;
    let mut sink: Box<dyn Write> = match &args.out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    for o in &out {
        writeln!(sink, "{}", serde_json::to_string(o)?)?;
    }
    sink.flush()?;
    Ok(ExitCode::from(if problems == 0 {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    }))
}
