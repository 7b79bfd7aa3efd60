//! Files a newcomer can read: no production file over 900 lines and no production function
//! over 150 lines (tests, `tests.rs` files and `#[cfg(test)]` modules do not count).
//!
//! What is over a limit today is listed in `KNOWN` with its size now: such an item may shrink,
//! never grow, and an entry that is back under its limit must leave the list (so the list only
//! gets shorter). Anything new over a limit fails. Lengths are counted on rustfmt'd code: a
//! function runs from its `fn` line to the closing brace at the same indentation.

use std::path::{Path, PathBuf};

const FILE_LIMIT: usize = 900;
const FN_LIMIT: usize = 150;

/// `(file under crates/, function name or "" for the file itself, its length now)`.
const KNOWN: &[(&str, &str, usize)] = &[];

/// One item over its limit: `(file under crates/, function or "", lines)`.
type Oversize = (String, String, usize);

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Production `.rs` files: under a crate's `src/`, not a `tests.rs` or `*_tests.rs` file, not in
/// a `tests/` folder.
fn production_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if path.is_dir() {
            if name != "tests" && name != "target" {
                production_files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

/// The lines before the file's `#[cfg(test)] mod ...` block.
fn without_tests(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| {
            let next = w[1]
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            w[0].starts_with("#[cfg(test)]") && next.starts_with("mod ")
        })
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// `(name, length)` of every function whose body spans more than `FN_LIMIT` lines.
fn long_functions(lines: &[&str]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let Some(at) = trimmed.find("fn ") else {
            continue;
        };
        let before = &trimmed[..at];
        let is_fn = before
            .split_whitespace()
            .all(|w| w.starts_with("pub") || ["async", "const", "unsafe"].contains(&w));
        if !is_fn || trimmed.ends_with(';') {
            continue;
        }
        let name: String = trimmed[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|l| *l == close) {
            if end + 1 > FN_LIMIT {
                out.push((name, end + 1));
            }
        }
    }
    out
}

fn oversize() -> Vec<Oversize> {
    let root = crates_dir();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&root)
        .expect("crates/ is readable")
        .flatten()
    {
        production_files(&krate.path().join("src"), &mut files);
    }
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("source files are UTF-8");
        let rel = path
            .strip_prefix(&root)
            .expect("under crates/")
            .to_string_lossy()
            .replace('\\', "/");
        let lines = without_tests(&text);
        if lines.len() > FILE_LIMIT {
            out.push((rel.clone(), String::new(), lines.len()));
        }
        for (name, len) in long_functions(&lines) {
            out.push((rel.clone(), name, len));
        }
    }
    out.sort();
    out
}

#[test]
fn no_file_or_function_grows_past_its_limit() {
    let found = oversize();
    let mut problems = Vec::new();
    for (file, item, len) in &found {
        match KNOWN.iter().find(|(f, i, _)| f == file && i == item) {
            None => problems.push(format!(
                "crates/{file} {item}: {len} lines, over the limit ({FILE_LIMIT} a file, {FN_LIMIT} a function): split it"
            )),
            Some((_, _, known)) if len > known => problems.push(format!(
                "crates/{file} {item}: {len} lines, grew from the {known} listed in KNOWN: split it"
            )),
            Some(_) => {}
        }
    }
    for (file, item, _) in KNOWN {
        if !found.iter().any(|(f, i, _)| f == file && i == item) {
            problems.push(format!(
                "crates/{file} {item} is under its limit now: remove it from KNOWN in this test"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_counter_sees_a_long_function_and_skips_tests() {
    let body = "    let x = 1;\n".repeat(FN_LIMIT);
    let text = format!(
        "pub async fn long() {{\n{body}}}\n\nfn short() {{\n}}\n\n#[cfg(test)]\nmod tests {{\n    fn in_tests() {{\n{body}    }}\n}}\n"
    );
    let lines = without_tests(&text);
    assert_eq!(
        long_functions(&lines),
        vec![("long".to_string(), FN_LIMIT + 2)]
    );
    assert!(!lines.iter().any(|l| l.contains("in_tests")));
}
