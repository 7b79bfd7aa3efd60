//! Parallel, order-preserving parsing of a line-per-record file in bounded memory.
//!
//! A reader thread cuts the file into batches of lines (about [`BATCH_BYTES`] each); parser
//! threads turn each batch into traces; the consuming iterator puts batches back in file order.
//! At most `workers * 2 + 2` batches are in flight at any time (a token channel enforces it),
//! so memory stays bounded whatever the file size.

use super::{parse_record_detect, Format, ImportError, Imported, RecordCtx};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// Target raw size of one batch.
pub const BATCH_BYTES: usize = 1 << 20;
/// Files smaller than this are parsed on the calling thread.
pub const PARALLEL_MIN_BYTES: u64 = 4 << 20;

/// A block of whole lines starting at line `first_line` (1-based), or a read error.
enum Work {
    Block { first_line: u64, data: Vec<u8> },
    Error(ImportError),
}
type Parsed = Vec<Result<Imported, ImportError>>;

/// Number of parser threads: `MASLENS_READ_THREADS` when set (1 disables the pipeline), else
/// the available parallelism minus one (the reader and the consumer need a core), at most 4.
/// On a 2-core machine the default is therefore the sequential reader, which measured faster
/// there whenever other work kept the second core busy.
pub fn parser_threads() -> usize {
    if let Some(n) = std::env::var("MASLENS_READ_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return n.clamp(1, 64);
    }
    std::thread::available_parallelism()
        .map(|n| n.get().saturating_sub(1))
        .unwrap_or(1)
        .clamp(1, 4)
}

pub(crate) struct Pipeline {
    out_rx: Receiver<(u64, Parsed)>,
    tokens_tx: SyncSender<()>,
    pending: BTreeMap<u64, Parsed>,
    next_seq: u64,
    current: std::vec::IntoIter<Result<Imported, ImportError>>,
    finished: bool,
}

impl Pipeline {
    pub(crate) fn start(
        mut reader: BufReader<File>,
        first: Option<(u64, Vec<u8>)>,
        path: PathBuf,
        display: String,
        format: Format,
        workers: usize,
    ) -> Self {
        let in_flight = workers * 2 + 2;
        let (tokens_tx, tokens_rx) = sync_channel::<()>(in_flight);
        for _ in 0..in_flight {
            // Cannot fail: the channel has room for exactly this many tokens.
            let _ = tokens_tx.try_send(());
        }
        let (work_tx, work_rx) = sync_channel::<(u64, Work)>(workers);
        let work_rx = Arc::new(Mutex::new(work_rx));
        let (out_tx, out_rx) = sync_channel::<(u64, Parsed)>(in_flight);

        let reader_display = display.clone();
        std::thread::spawn(move || {
            let mut seq = 0u64;
            let mut send = |work: Work| -> bool {
                let ok = tokens_rx.recv().is_ok() && work_tx.send((seq, work)).is_ok();
                seq += 1;
                ok
            };
            let mut line_no = 1u64;
            if let Some((n, b)) = first {
                line_no = n + 1;
                if !send(Work::Block {
                    first_line: n,
                    data: b,
                }) {
                    return;
                }
            }
            // Read blocks of about BATCH_BYTES and cut them after their last newline; the
            // rest carries over to the next block (a line longer than a block grows it).
            let mut buf: Vec<u8> = Vec::with_capacity(BATCH_BYTES + (64 << 10));
            loop {
                let start = buf.len();
                let want = BATCH_BYTES.saturating_sub(start).max(64 << 10);
                buf.resize(start + want, 0);
                let n = match reader.read(&mut buf[start..]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                        buf.truncate(start);
                        continue;
                    }
                    Err(e) => {
                        buf.truncate(start);
                        let _ = send(Work::Error(ImportError {
                            file: reader_display.clone(),
                            record: Some(format!("line {line_no}")),
                            path: None,
                            message: format!("cannot read: {e}"),
                        }));
                        return;
                    }
                };
                buf.truncate(start + n);
                let eof = n == 0;
                if !eof && buf.len() < BATCH_BYTES {
                    continue;
                }
                let cut = if eof {
                    buf.len()
                } else {
                    match memchr::memrchr(b'\n', &buf) {
                        Some(i) => i + 1,
                        None => continue,
                    }
                };
                let rest = buf.split_off(cut);
                let lines = memchr::memchr_iter(b'\n', &buf).count() as u64
                    + u64::from(!buf.is_empty() && !buf.ends_with(b"\n"));
                if !buf.is_empty() {
                    let data = std::mem::replace(&mut buf, rest);
                    if !send(Work::Block {
                        first_line: line_no,
                        data,
                    }) {
                        return;
                    }
                } else {
                    buf = rest;
                }
                line_no += lines;
                if eof {
                    return;
                }
                buf.reserve(BATCH_BYTES + (64 << 10));
            }
        });

        let path = Arc::new(path);
        let display = Arc::new(display);
        for _ in 0..workers {
            let work_rx = Arc::clone(&work_rx);
            let out_tx = out_tx.clone();
            let path = Arc::clone(&path);
            let display = Arc::clone(&display);
            std::thread::spawn(move || loop {
                let job = match work_rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => return,
                };
                let Ok((seq, work)) = job else { return };
                let parsed: Parsed = match work {
                    Work::Error(e) => vec![Err(e)],
                    Work::Block { first_line, data } => {
                        let mut out = Vec::new();
                        let mut line = first_line;
                        let mut ends = memchr::memchr_iter(b'\n', &data);
                        let mut start = 0usize;
                        while start < data.len() {
                            let end = ends.next().map(|i| i + 1).unwrap_or(data.len());
                            let record = &data[start..end];
                            if !record.iter().all(|b| b.is_ascii_whitespace()) {
                                let ctx = RecordCtx {
                                    file: &display,
                                    path: Some(&path),
                                    line: Some(line),
                                };
                                out.push(parse_record_detect(record, format, &ctx).1);
                            }
                            line += 1;
                            start = end;
                        }
                        out
                    }
                };
                if out_tx.send((seq, parsed)).is_err() {
                    return;
                }
            });
        }
        drop(out_tx);
        Pipeline {
            out_rx,
            tokens_tx,
            pending: BTreeMap::new(),
            next_seq: 0,
            current: Vec::new().into_iter(),
            finished: false,
        }
    }

    pub(crate) fn next(&mut self) -> Option<Result<Imported, ImportError>> {
        loop {
            if let Some(item) = self.current.next() {
                return Some(item);
            }
            if self.finished {
                return None;
            }
            let batch = match self.pending.remove(&self.next_seq) {
                Some(b) => b,
                None => loop {
                    match self.out_rx.recv() {
                        Ok((seq, b)) if seq == self.next_seq => break b,
                        Ok((seq, b)) => {
                            self.pending.insert(seq, b);
                        }
                        Err(_) => {
                            // Every worker is done; what is left is in order in `pending`.
                            match self.pending.pop_first() {
                                Some((seq, b)) => {
                                    self.next_seq = seq;
                                    break b;
                                }
                                None => {
                                    self.finished = true;
                                    return None;
                                }
                            }
                        }
                    }
                },
            };
            self.next_seq += 1;
            // Free one in-flight slot for the reader.
            let _ = self.tokens_tx.try_send(());
            self.current = batch.into_iter();
        }
    }
}
