//! `maslens improve`: the improvement loop on a Python system (docs/improve.md). The loop runs
//! where the system lives, in Python: this command runs `python -m maslens.improve` with the
//! arguments given, in the interpreter named by `--python` (else `$MASLENS_PYTHON`, else
//! `python3`), and exits with its code. With `--db`, the loop's report (`OUT/report.json`) is
//! then stored, where `maslens serve` shows it as the verification of the system's proposed
//! fixes.

use crate::Global;
use anyhow::Context;
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::SystemTime;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Python interpreter that has the maslens package (default: $MASLENS_PYTHON, else python3).
    #[arg(long, value_name = "PATH")]
    pub python: Option<OsString>,
    /// Store the loop's report (`--out DIR`'s `report.json`) in this store when the loop ends:
    /// `maslens serve`'s proposal pages of the system show its verification. A `postgres://` URL,
    /// a `sqlite:` URL or a SQLite file.
    #[arg(long, value_name = "DB")]
    pub db: Option<String>,
    /// `MODULE:ATTRIBUTE --tasks FILE --out DIR [...]`: see `maslens improve -- --help`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// The value of `--out` among the loop's arguments.
fn out_dir(args: &[OsString]) -> Option<std::path::PathBuf> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let a = a.to_string_lossy();
        if a == "--out" {
            return it.next().map(std::path::PathBuf::from);
        }
        if let Some(v) = a.strip_prefix("--out=") {
            return Some(v.into());
        }
    }
    None
}

/// Store the report the loop wrote in `out` under its system's name (only one written since
/// `started`: a loop that failed leaves an older report, which is not stored again).
fn store_report(db: &str, out: &std::path::Path, started: SystemTime) -> anyhow::Result<()> {
    let path = out.join("report.json");
    let written = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    if written.is_none_or(|w| w < started) {
        anyhow::bail!(
            "--db: the loop wrote no report this time ({} is missing or older than this run)",
            path.display()
        );
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("--db: reading the loop's report {}", path.display()))?;
    let body: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("--db: {} is not JSON", path.display()))?;
    let Some(system) = body["system"].as_str().map(String::from) else {
        anyhow::bail!("--db: {}: field system: missing", path.display());
    };
    let kind = maslens_store::diagnosis::ReportKind::Improve;
    let id = crate::db::add_report(db, kind, &system, None, &body)?;
    eprintln!("improvement report of {system} stored in {db} as {id}");
    Ok(())
}

pub fn run(args: Args, _global: &Global) -> anyhow::Result<ExitCode> {
    let out = out_dir(&args.args);
    if args.db.is_some() && out.is_none() {
        anyhow::bail!("--db stores the loop's report from its --out DIR: give --out");
    }
    let python = args
        .python
        .or_else(|| std::env::var_os("MASLENS_PYTHON"))
        .unwrap_or_else(|| "python3".into());
    let probe = std::process::Command::new(&python)
        .args(["-c", "import maslens.improve"])
        .output();
    match probe {
        Err(e) => anyhow::bail!("cannot run the Python interpreter {python:?}: {e} (--python PATH or MASLENS_PYTHON)"),
        Ok(o) if !o.status.success() => anyhow::bail!(
            "the Python interpreter {python:?} has no maslens package ({}): `pip install maslens` there, \
             or name another one with --python PATH (docs/python.md)",
            String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("import failed")
        ),
        Ok(_) => {}
    }
    // File times can be coarser than the clock: a second of slack.
    let started = SystemTime::now() - std::time::Duration::from_secs(1);
    let status = std::process::Command::new(&python)
        .args(["-m", "maslens.improve"])
        .args(&args.args)
        .status()?;
    let code = status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(2);
    // A loop that ran (0: done; 1: done with problems) wrote its report.
    if let (Some(db), Some(out), true) = (&args.db, &out, code <= 1) {
        store_report(db, out, started)?;
    }
    Ok(ExitCode::from(code))
}
