//! Read a corpus with the streaming reader and report traces, steps and MB/s (benchmark helper;
//! `maslens stats` is the user-facing reader measured by bench/trace_read.sh).
//!
//! `cargo run --release -p maslens-trace --example read_corpus -- PATH [FORMAT]`

use maslens_trace::import::{read_path, Format};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: read_corpus PATH [FORMAT]");
        std::process::exit(2);
    };
    let format: Format = match args.get(2).map(|f| f.parse()).unwrap_or(Ok(Format::Auto)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let start = Instant::now();
    let (mut traces, mut steps, mut errors, mut diags) = (0u64, 0u64, 0u64, 0u64);
    for item in read_path(path.as_ref(), format) {
        match item {
            Ok(imp) => {
                traces += 1;
                steps += imp.trace.steps.len() as u64;
                diags += imp.diagnostics.len() as u64;
            }
            Err(e) => {
                errors += 1;
                if errors <= 3 {
                    eprintln!("{e}");
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{traces} traces, {steps} steps, {errors} errors, {diags} diagnostics, {:.1} MB in {secs:.2} s = {:.0} MB/s",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / secs
    );
}
