//! Parallel, order-preserving parsing of a line-per-record file in bounded memory.
//!
//! A reader thread cuts the file into batches of lines (about [`BATCH_BYTES`] each); parser
//! threads turn each batch into traces; the consuming iterator puts batches back in file order.
//! At most `workers * 2 + 2` batches are in flight at any time (a token channel enforces it),
//! so memory stays bounded whatever the file size.

use super::{parse_record_detect, Format, ImportError, Imported, RecordCtx};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// Target raw size of one batch.
pub const BATCH_BYTES: usize = 1 << 20;
/// Files smaller than this are parsed on the calling thread.
pub const PARALLEL_MIN_BYTES: u64 = 4 << 20;

type Lines = Vec<Result<(u64, Vec<u8>), ImportError>>;
type Parsed = Vec<Result<Imported, ImportError>>;

/// Number of parser threads: `MASLENS_READ_THREADS` when set (1 disables the pipeline), else
/// the available parallelism, at most 4.
pub fn parser_threads() -> usize {
    if let Some(n) = std::env::var("MASLENS_READ_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return n.clamp(1, 64);
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(4)
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
        let (work_tx, work_rx) = sync_channel::<(u64, Lines)>(workers);
        let work_rx = Arc::new(Mutex::new(work_rx));
        let (out_tx, out_rx) = sync_channel::<(u64, Parsed)>(in_flight);

        let reader_display = display.clone();
        std::thread::spawn(move || {
            let mut seq = 0u64;
            let mut line_no = first.as_ref().map(|(n, _)| *n).unwrap_or(0);
            let mut batch: Lines = Vec::new();
            let mut bytes = 0usize;
            if let Some((n, b)) = first {
                bytes += b.len();
                batch.push(Ok((n, b)));
            }
            let mut done = false;
            while !done {
                let mut buf = Vec::new();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) => done = true,
                    Ok(_) => {
                        line_no += 1;
                        if !buf.iter().all(|b| b.is_ascii_whitespace()) {
                            bytes += buf.len();
                            batch.push(Ok((line_no, buf)));
                        }
                    }
                    Err(e) => {
                        batch.push(Err(ImportError {
                            file: reader_display.clone(),
                            record: Some(format!("line {}", line_no + 1)),
                            path: None,
                            message: format!("cannot read: {e}"),
                        }));
                        done = true;
                    }
                }
                if (bytes >= BATCH_BYTES || (done && !batch.is_empty()))
                    && (tokens_rx.recv().is_err()
                        || work_tx.send((seq, std::mem::take(&mut batch))).is_err())
                {
                    return; // the consumer has gone
                }
                if bytes >= BATCH_BYTES || done {
                    seq += 1;
                    bytes = 0;
                }
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
                let Ok((seq, lines)) = job else { return };
                let parsed: Parsed = lines
                    .into_iter()
                    .map(|item| {
                        let (n, bytes) = item?;
                        let ctx = RecordCtx {
                            file: &display,
                            path: Some(&path),
                            line: Some(n),
                        };
                        parse_record_detect(&bytes, format, &ctx).1
                    })
                    .collect();
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
