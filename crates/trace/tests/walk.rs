//! Directory walking under `read_path` / `read_paths`: order, hidden entries, links, loops and
//! non-regular files.

use maslens_trace::import::{read_path, read_paths, Format};
use std::path::Path;

const TRACE: &str = "{\"id\":\"ID\",\"steps\":[]}\n";

fn write(dir: &Path, rel: &str, id: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, TRACE.replace("ID", id)).unwrap();
}

/// The ids read (errors as `ERR <message>`).
fn ids(
    items: impl Iterator<
        Item = Result<maslens_trace::import::Imported, maslens_trace::import::ImportError>,
    >,
) -> Vec<String> {
    items
        .map(|r| match r {
            Ok(i) => i.trace.id.to_string(),
            Err(e) => format!("ERR {}", e.message),
        })
        .collect()
}

#[test]
fn natural_order_recursive_and_hidden_skipped() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "10.json", "ten");
    write(dir.path(), "2.json", "two");
    write(dir.path(), "b/1.jsonl", "b1");
    write(dir.path(), "a.ndjson", "a");
    write(dir.path(), ".hidden.json", "hidden");
    write(dir.path(), ".git/x.json", "git");
    write(dir.path(), "notes.txt", "txt");
    assert_eq!(
        ids(read_path(dir.path(), Format::Auto)),
        vec!["two", "ten", "a", "b1"]
    );
    // A file named explicitly is read whatever its name.
    assert_eq!(
        ids(read_path(&dir.path().join("notes.txt"), Format::Auto)),
        vec!["txt"]
    );
    // A hidden directory named explicitly is walked.
    assert_eq!(
        ids(read_path(&dir.path().join(".git"), Format::Auto)),
        vec!["git"]
    );
}

#[cfg(unix)]
#[test]
fn links_are_followed_once_and_dangling_ones_reported_only_when_traces() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    write(&data, "x.json", "x");
    let walk = dir.path().join("walk");
    std::fs::create_dir(&walk).unwrap();
    std::os::unix::fs::symlink(&data, walk.join("l1")).unwrap();
    std::os::unix::fs::symlink(&data, walk.join("l2")).unwrap();
    std::os::unix::fs::symlink(&walk, walk.join("loop")).unwrap();
    std::os::unix::fs::symlink(data.join("x.json"), walk.join("y.json")).unwrap();
    std::os::unix::fs::symlink(walk.join("missing"), walk.join("gone.txt")).unwrap();
    // Two links to one directory: read once; a link back up: ends; a link to a file: read.
    assert_eq!(ids(read_path(&walk, Format::Auto)), vec!["x", "x"]);
    // A dangling link that looks like a trace is an error naming it; the walk goes on.
    std::os::unix::fs::symlink(walk.join("missing"), walk.join("a.json")).unwrap();
    let got = ids(read_path(&walk, Format::Auto));
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got[0].starts_with("ERR cannot read"), "{got:?}");
    // The same directory named twice is read once.
    assert_eq!(
        ids(read_paths(&[data.clone(), data.clone()], Format::Auto)),
        vec!["x"]
    );
}

#[cfg(unix)]
#[test]
fn fifos_in_directories_are_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.json", "a");
    let fifo = dir.path().join("b.jsonl");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("mkfifo unavailable: skipped");
        return;
    }
    // Opening the FIFO would block forever (no writer): the walk must leave it alone.
    assert_eq!(ids(read_path(dir.path(), Format::Auto)), vec!["a"]);
}

#[cfg(unix)]
#[test]
fn unreadable_directory_is_an_error_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a/1.json", "a1");
    write(dir.path(), "b/1.json", "b1");
    use std::os::unix::fs::PermissionsExt;
    let locked = dir.path().join("a");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    // As root, permissions do not apply: then both are read.
    let privileged = std::fs::read_dir(&locked).is_ok();
    let got = ids(read_path(dir.path(), Format::Auto));
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    if privileged {
        assert_eq!(got, vec!["a1", "b1"]);
        return;
    }
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].starts_with("ERR cannot list directory"), "{got:?}");
    assert_eq!(got[1], "b1");
}
