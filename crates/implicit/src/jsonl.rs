//! JSON Lines input that goes on past bad records: every line that cannot be read or fails a
//! check becomes a warning naming the source, line and (where known) field.

use crate::ImplicitError;
use serde::de::DeserializeOwned;
use std::io::BufRead;
use std::path::Path;

/// A value and the problems met while producing it (each one line, without a `warning:` prefix).
#[derive(Debug, Clone, PartialEq)]
pub struct WithWarnings<T> {
    pub value: T,
    pub warnings: Vec<String>,
}

/// Open a file for [`read_jsonl`]; the error names the file.
pub fn open(path: &Path) -> Result<std::io::BufReader<std::fs::File>, ImplicitError> {
    let file = std::fs::File::open(path).map_err(|e| ImplicitError::Read {
        file: path.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(std::io::BufReader::new(file))
}

/// Read one `T` per non-empty line of `reader` (`name` names it in warnings). A line that does
/// not parse gives `"{name}: line {n}: {serde error}{hint}"`; one that parses but fails
/// `check` gives `"{name}: line {n}: {check's message}"`, and so does a line that is not UTF-8.
/// All are left out. Only an I/O error ends the read.
pub fn read_jsonl<T: DeserializeOwned>(
    name: &str,
    reader: impl BufRead,
    hint: &str,
    check: impl Fn(&T) -> Result<(), String>,
) -> Result<WithWarnings<Vec<T>>, ImplicitError> {
    let mut value = Vec::new();
    let mut warnings = Vec::new();
    for (i, line) in reader.split(b'\n').enumerate() {
        let bytes = line.map_err(|e| ImplicitError::Read {
            file: format!("{name}: line {}", i + 1),
            message: e.to_string(),
        })?;
        let line = match String::from_utf8(bytes) {
            Ok(l) => l,
            Err(e) => {
                warnings.push(format!("{name}: line {}: not UTF-8 text ({e})", i + 1));
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<T>(&line) {
            Ok(x) => match check(&x) {
                Ok(()) => value.push(x),
                Err(why) => warnings.push(format!("{name}: line {}: {why}", i + 1)),
            },
            Err(e) => warnings.push(format!("{name}: line {}: {e}{hint}", i + 1)),
        }
    }
    Ok(WithWarnings { value, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_named_and_left_out() {
        let text = "1\n\nx\n-2\n3\n";
        let r = read_jsonl::<i64>("f.jsonl", text.as_bytes(), " (a number)", |x| {
            if *x < 0 {
                Err(format!("field n: {x} is negative"))
            } else {
                Ok(())
            }
        })
        .unwrap();
        assert_eq!(r.value, [1, 3]);
        assert_eq!(r.warnings.len(), 2);
        assert!(
            r.warnings[0].starts_with("f.jsonl: line 3: ")
                && r.warnings[0].ends_with(" (a number)")
        );
        assert_eq!(r.warnings[1], "f.jsonl: line 4: field n: -2 is negative");
    }

    #[test]
    fn a_line_that_is_not_utf8_is_skipped_not_fatal() {
        let text: &[u8] = b"1\n\xff\xfe\n2\r\n";
        let r = read_jsonl::<i64>("f.jsonl", text, "", |_| Ok(())).unwrap();
        assert_eq!(r.value, [1, 2]);
        assert_eq!(r.warnings.len(), 1);
        assert!(
            r.warnings[0].starts_with("f.jsonl: line 2: not UTF-8"),
            "{:?}",
            r.warnings
        );
    }
}
