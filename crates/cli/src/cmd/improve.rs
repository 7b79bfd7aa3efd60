//! `maslens improve`: the improvement loop on a Python system (docs/improve.md). The loop runs
//! where the system lives, in Python: this command runs `python -m maslens.improve` with the
//! arguments given, in the interpreter named by `--python` (else `$MASLENS_PYTHON`, else
//! `python3`), and exits with its code.

use crate::Global;
use std::ffi::OsString;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Python interpreter that has the maslens package (default: $MASLENS_PYTHON, else python3).
    #[arg(long, value_name = "PATH")]
    pub python: Option<OsString>,
    /// `MODULE:ATTRIBUTE --tasks FILE --out DIR [...]`: see `maslens improve -- --help`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

pub fn run(args: Args, _global: &Global) -> anyhow::Result<ExitCode> {
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
    let status = std::process::Command::new(&python)
        .args(["-m", "maslens.improve"])
        .args(&args.args)
        .status()?;
    let code = status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(2);
    Ok(ExitCode::from(code))
}
