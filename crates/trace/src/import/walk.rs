//! Walking input trees: the files under named paths, in natural name order, hidden entries
//! left out, symlink loops ended.

use super::ImportError;
use std::path::{Path, PathBuf};

/// The files under several paths, in the order given, walked as the trace reader walks them
/// (natural name order, hidden entries below a named path left out, symlinks followed and loops
/// ended, a directory reached twice read once). A named path is always returned; below it, the
/// regular files `wanted` accepts. Other readers of input trees (OTLP exports) walk with this.
pub fn files(paths: &[PathBuf], wanted: fn(&Path) -> bool) -> Files {
    Files {
        roots: paths.iter().rev().cloned().collect(),
        walk: None,
        visited: Default::default(),
        wanted,
    }
}

/// Iterator of [`files`]: each file, or the error of a path that cannot be walked or listed.
pub struct Files {
    /// Named paths still to walk (popped from the end).
    roots: Vec<PathBuf>,
    /// The walk under the named path being walked.
    walk: Option<Walk>,
    /// Directories already walked (canonical paths), so symlink loops end.
    visited: std::collections::HashSet<PathBuf>,
    wanted: fn(&Path) -> bool,
}

impl Iterator for Files {
    type Item = Result<PathBuf, ImportError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(walk) = &mut self.walk else {
                let root = self.roots.pop()?;
                self.walk = Some(walk_under(&root));
                continue;
            };
            let entry = match walk.next() {
                Some(Ok(entry)) => entry,
                Some(Err(e)) => match walk_error(e, self.wanted) {
                    Some(err) => return Some(Err(err)),
                    None => continue,
                },
                None => {
                    self.walk = None;
                    continue;
                }
            };
            // A path named by the caller is always read (a pipe such as `<(zcat x.jsonl.gz)`
            // included); below a directory only regular wanted files are.
            let explicit = entry.depth() == 0;
            if entry.file_type().is_dir() {
                // A directory reached twice (two links to it, or named twice) is read once.
                if let Ok(canonical) = std::fs::canonicalize(entry.path()) {
                    if !self.visited.insert(canonical) {
                        walk.skip_current_dir();
                    }
                }
                continue;
            }
            let regular = entry.file_type().is_file();
            let path = entry.into_path();
            if explicit || (regular && (self.wanted)(&path)) {
                return Some(Ok(path));
            }
        }
    }
}

/// The walk under one named path: symlinks followed (loops end: walkdir reports a link back to
/// an ancestor, which is skipped), entries in natural name order, hidden entries below the
/// named path left out.
type Walk = walkdir::FilterEntry<walkdir::IntoIter, fn(&walkdir::DirEntry) -> bool>;

fn walk_under(root: &Path) -> Walk {
    fn shown(e: &walkdir::DirEntry) -> bool {
        e.depth() == 0 || !is_hidden(e.path())
    }
    walkdir::WalkDir::new(root)
        .follow_links(true)
        .sort_by(|a, b| natural_cmp(a.path(), b.path()))
        .into_iter()
        .filter_entry(shown as fn(&walkdir::DirEntry) -> bool)
}

pub(super) fn is_trace_file(p: &Path) -> bool {
    matches!(
        p.extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref(),
        Some("json" | "jsonl" | "ndjson")
    )
}

fn is_hidden(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

/// The error for a failed walk step, or `None` for what is skipped silently: a link back to a
/// directory being walked, and (below the named path) entries that are neither a directory nor
/// a wanted file, such as a dangling `notes.txt` link.
fn walk_error(e: walkdir::Error, wanted: fn(&Path) -> bool) -> Option<ImportError> {
    if e.loop_ancestor().is_some() {
        return None;
    }
    let path = e.path().map(Path::to_path_buf).unwrap_or_default();
    let listing = std::fs::metadata(&path).is_ok_and(|m| m.is_dir());
    if e.depth() > 0 && !listing && !wanted(&path) {
        return None;
    }
    let io = e
        .io_error()
        .map_or_else(|| e.to_string(), ToString::to_string);
    Some(ImportError {
        file: path.display().to_string(),
        record: None,
        path: None,
        message: if listing {
            format!("cannot list directory: {io}")
        } else {
            format!("cannot read: {io}")
        },
    })
}

/// Sort by name, with digit runs compared as numbers (`2.json` before `10.json`).
fn natural_cmp(a: &Path, b: &Path) -> std::cmp::Ordering {
    let a = a
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let b = b
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ka = natural_key(&a);
    let kb = natural_key(&b);
    ka.cmp(&kb).then_with(|| a.cmp(&b))
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Chunk {
    Num(u128, usize),
    Text(String),
}

fn natural_key(s: &str) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_digit() {
            let mut digits = String::new();
            while let Some(&d) = chars.peek() {
                if !d.is_ascii_digit() {
                    break;
                }
                digits.push(d);
                chars.next();
            }
            let trimmed = digits.trim_start_matches('0');
            match trimmed.parse::<u128>() {
                Ok(n) => out.push(Chunk::Num(n, digits.len())),
                Err(_) if trimmed.is_empty() => out.push(Chunk::Num(0, digits.len())),
                Err(_) => out.push(Chunk::Text(digits)),
            }
        } else {
            let mut text = String::new();
            while let Some(&d) = chars.peek() {
                if d.is_ascii_digit() {
                    break;
                }
                text.push(d);
                chars.next();
            }
            out.push(Chunk::Text(text));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v: Vec<PathBuf> = ["10.json", "2.json", "1.json", "b", "a10", "a9"]
            .iter()
            .map(PathBuf::from)
            .collect();
        v.sort_by(|a, b| natural_cmp(a, b));
        let names: Vec<_> = v.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(names, ["1.json", "2.json", "10.json", "a9", "a10", "b"]);
    }
}
