//! Terminal helpers shared by the commands: output files, JSON or text, exit codes.

use anyhow::Context;
use maslens_eval::atomic::AtomicFile;
use std::io::Write;
use std::path::Path;

/// Write `text` to `path`, or to stdout (ending in a newline) when `path` is `None`.
pub fn write_output(path: Option<&Path>, text: &str) -> anyhow::Result<()> {
    match path {
        // Beside `p` under a temporary name, then renamed: never a truncated file under `p`.
        Some(p) => write_atomic(p, text.as_bytes()),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            if !text.ends_with('\n') {
                out.write_all(b"\n")?;
            }
            Ok(())
        }
    }
}

/// Write `json` to `out` when given; print `json` to stdout with `--json`, else `human()`.
pub fn emit(
    out: Option<&Path>,
    json: &str,
    json_mode: bool,
    human: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if let Some(p) = out {
        write_output(Some(p), json)?;
    }
    if json_mode {
        write_output(None, json)
    } else {
        write_output(None, &human())
    }
}

/// Write `bytes` to `path` atomically (the one helper, [`maslens_eval::atomic`]), the error
/// naming the file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    maslens_eval::atomic::write_atomic(path, bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Write `item` as one JSON line.
pub fn write_jsonl<T: serde::Serialize>(out: &mut dyn Write, item: &T) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, item)?;
    out.write_all(b"\n")
}

/// A buffered output file, or stdout when `path` is `None`. The file is written beside `path`
/// under a temporary name and renamed by [`Output::finish`]: a run killed or failed half-way
/// leaves no truncated file under the final name (and an earlier complete one stays).
pub fn sink(path: Option<&Path>) -> anyhow::Result<Output> {
    Ok(match path {
        Some(p) => Output::File {
            w: std::io::BufWriter::new(
                AtomicFile::create(p).with_context(|| format!("cannot create {}", p.display()))?,
            ),
            path: p.to_path_buf(),
        },
        None => Output::Stdout(std::io::stdout().lock()),
    })
}

/// Where [`sink`] writes.
pub enum Output {
    Stdout(std::io::StdoutLock<'static>),
    File {
        w: std::io::BufWriter<AtomicFile>,
        path: std::path::PathBuf,
    },
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Output::Stdout(s) => s.write(buf),
            Output::File { w, .. } => w.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(s) => s.flush(),
            Output::File { w, .. } => w.flush(),
        }
    }
}

impl Output {
    /// Flush, and put a file under its final name.
    pub fn finish(self) -> anyhow::Result<()> {
        match self {
            Output::Stdout(mut s) => Ok(s.flush()?),
            Output::File { w, path } => {
                let tmp = w.into_inner().map_err(|e| {
                    anyhow::anyhow!("cannot write {}: {}", path.display(), e.error())
                })?;
                tmp.commit()
                    .with_context(|| format!("cannot write {}", path.display()))
            }
        }
    }
}

/// A JSONL input named by an optional path (`-` or absent: stdin), with the name its messages use.
pub fn jsonl_input(path: Option<&Path>) -> anyhow::Result<(String, Box<dyn std::io::BufRead>)> {
    Ok(match path {
        Some(p) if p.as_os_str() != "-" => (
            p.display().to_string(),
            Box::new(maslens_implicit::jsonl::open(p)?),
        ),
        _ => ("<stdin>".into(), Box::new(std::io::stdin().lock())),
    })
}

/// Print each warning to stderr as `warning: ...`; returns how many there were.
pub fn warn_all(warnings: &[String]) -> usize {
    for w in warnings {
        eprintln!("warning: {w}");
    }
    warnings.len()
}

/// The exit code of a command that ran: 0 without problems, 1 with some.
pub fn exit_code(problems: usize) -> std::process::ExitCode {
    std::process::ExitCode::from(if problems == 0 {
        crate::cmd::EXIT_OK
    } else {
        crate::cmd::EXIT_PROBLEMS
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    #[test]
    fn an_output_file_appears_only_when_finished() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut out = super::sink(Some(&path)).unwrap();
        writeln!(out, "{{\"a\":1}}").unwrap();
        out.flush().unwrap();
        assert!(
            !path.exists(),
            "a half-written output must not sit under the final name"
        );
        drop(out);
        assert!(!path.exists());
        std::fs::write(&path, "old complete output\n").unwrap();
        let mut out = super::sink(Some(&path)).unwrap();
        writeln!(out, "partial").unwrap();
        drop(out);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "old complete output\n"
        );
        let mut out = super::sink(Some(&path)).unwrap();
        writeln!(out, "new").unwrap();
        out.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(
                mode & 0o044,
                0o044,
                "group and others can read it: {mode:o}"
            );
        }
    }
}
