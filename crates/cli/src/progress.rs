//! Progress shown to a person: an indicatif bar on a terminal; off a terminal (a CI log, a pipe,
//! `nohup`) one line now and then with the count, the time taken and an estimate of the time
//! left, so a long run is never silent. `--quiet` hides both.

use maslens_eval::run::Progress;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// No log line before this much time: a short run stays quiet.
const FIRST_LINE_AFTER: Duration = Duration::from_secs(5);
/// A log line at least this often while the run goes on.
const LINE_EVERY: Duration = Duration::from_secs(30);

/// Progress over `total` items, drawn as a bar on a terminal and as lines in a log.
pub struct Meter {
    bar: indicatif::ProgressBar,
    lines: Option<Mutex<LogLines>>,
}

/// The state of the log lines.
struct LogLines {
    what: String,
    total: u64,
    done: u64,
    started: Instant,
    /// When and at what count the last line was printed (none yet: `None`).
    last: Option<(Instant, u64)>,
}

impl LogLines {
    /// The line to print after `done` items, if one is due now.
    fn due(&mut self, now: Instant) -> Option<String> {
        let elapsed = now.duration_since(self.started);
        if elapsed < FIRST_LINE_AFTER || self.done >= self.total {
            return None;
        }
        let step = (self.total / 10).max(1);
        let due = match self.last {
            None => true,
            Some((at, n)) => self.done >= n + step || now.duration_since(at) >= LINE_EVERY,
        };
        if !due {
            return None;
        }
        self.last = Some((now, self.done));
        Some(log_line(&self.what, self.done, self.total, elapsed))
    }
}

/// `locate: 3/10 done, 1m 05s so far, about 2m 32s left` (no estimate before the first item).
pub fn log_line(what: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let left = match done {
        0 => String::new(),
        _ => {
            let per = elapsed.as_secs_f64() / done as f64;
            let left = Duration::from_secs_f64(per * total.saturating_sub(done) as f64);
            format!(", about {} left", duration(left))
        }
    };
    format!(
        "{what}: {done}/{total} done, {} so far{left}",
        duration(elapsed)
    )
}

/// `45s`, `3m 07s`, `1h 02m`.
fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

impl Meter {
    /// A meter over `total` items named `what` in the log lines; nothing at all when `quiet`.
    pub fn new(what: &str, total: usize, quiet: bool) -> Meter {
        if quiet {
            return Meter {
                bar: indicatif::ProgressBar::hidden(),
                lines: None,
            };
        }
        // indicatif draws nothing when stderr is not a terminal; the lines take over there.
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let bar = indicatif::ProgressBar::new(total as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let lines = (!terminal).then(|| {
            Mutex::new(LogLines {
                what: what.to_string(),
                total: total as u64,
                done: 0,
                started: Instant::now(),
                last: None,
            })
        });
        Meter { bar, lines }
    }

    /// The item now being worked on (shown beside the bar).
    pub fn set_message(&self, message: impl Into<String>) {
        self.bar.set_message(message.into());
    }

    /// `n` more items done.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        self.log(|l| l.done += n);
    }

    /// A new total (the count is set back to 0).
    pub fn start(&self, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(0);
        self.log(|l| {
            l.total = total as u64;
            l.done = 0;
        });
    }

    /// Run `f` (which prints) with the bar out of the way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// The bar removed; in a log that had progress lines, one last line with the total time.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
        if let Some(lines) = &self.lines {
            let l = lines.lock().unwrap_or_else(|p| p.into_inner());
            if l.last.is_some() {
                eprintln!(
                    "{}: {}/{} done in {}",
                    l.what,
                    l.done,
                    l.total,
                    duration(l.started.elapsed())
                );
            }
        }
    }

    fn log(&self, update: impl FnOnce(&mut LogLines)) {
        if let Some(lines) = &self.lines {
            let mut l = lines.lock().unwrap_or_else(|p| p.into_inner());
            update(&mut l);
            if let Some(line) = l.due(Instant::now()) {
                eprintln!("{line}");
            }
        }
    }
}

/// The library's [`Progress`] on a [`Meter`]: case errors and summaries go to stderr above the
/// bar (summaries not with `--quiet`); it counts what a command's exit code and closing lines
/// need (deferred cases, a budget stop).
pub struct Bar {
    meter: Meter,
    quiet: bool,
    deferred: AtomicUsize,
    stopped: AtomicBool,
}

impl Bar {
    pub fn new(what: &str, quiet: bool) -> Bar {
        Bar {
            meter: Meter::new(what, 0, quiet),
            quiet,
            deferred: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
        }
    }

    /// Cases whose calls went to a batch file (export mode).
    pub fn deferred_cases(&self) -> usize {
        self.deferred.load(Ordering::Relaxed)
    }

    /// Whether a budget stopped the run.
    pub fn was_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// Run `f` (which prints) with the bar hidden, so its lines do not mix with the bar's.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.meter.suspend(f)
    }
}

impl Progress for Bar {
    fn start(&self, cases: usize) {
        self.meter.start(cases);
    }
    fn case(&self, id: &str) {
        self.meter.set_message(id);
    }
    fn case_done(&self) {
        self.meter.inc(1);
    }
    fn summary(&self, _id: &str, line: &str) {
        if !self.quiet {
            self.meter
                .suspend(|| eprintln!("{}", crate::term::inline(line)));
        }
    }
    fn error(&self, id: &str, message: &str) {
        let line = named(id, message);
        self.meter
            .suspend(|| eprintln!("error: {}", crate::term::inline(&line)));
    }
    // A deferred case is no error: the export line at the end says what to do.
    fn deferred(&self, _id: &str) {
        self.deferred.fetch_add(1, Ordering::Relaxed);
    }
    fn stopped(&self, id: &str, why: &str) {
        self.stopped.store(true, Ordering::Relaxed);
        let line = named(id, why);
        self.meter
            .suspend(|| eprintln!("error: {}", crate::term::inline(&line)));
    }
    fn finish(&self) {
        self.meter.finish();
    }
}

/// `message` led by the case it is about (`t3: no steps`), once: some messages name it already.
fn named(id: &str, message: &str) -> String {
    match message.strip_prefix(id) {
        Some(rest) if rest.starts_with(": ") => message.to_string(),
        _ => format!("{id}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(total: u64) -> LogLines {
        LogLines {
            what: "locate".into(),
            total,
            done: 0,
            started: Instant::now(),
            last: None,
        }
    }

    #[test]
    fn log_lines_wait_then_come_each_tenth_or_half_minute() {
        let mut l = lines(100);
        let t0 = l.started;
        l.done = 3;
        assert_eq!(l.due(t0 + Duration::from_secs(2)), None, "too early");
        assert_eq!(
            l.due(t0 + Duration::from_secs(6)).as_deref(),
            Some("locate: 3/100 done, 6s so far, about 3m 14s left")
        );
        l.done = 8;
        assert_eq!(
            l.due(t0 + Duration::from_secs(10)),
            None,
            "less than a tenth more"
        );
        l.done = 13;
        assert!(
            l.due(t0 + Duration::from_secs(11)).is_some(),
            "a tenth more"
        );
        l.done = 14;
        assert!(
            l.due(t0 + Duration::from_secs(42)).is_some(),
            "half a minute on"
        );
        l.done = 100;
        assert_eq!(
            l.due(t0 + Duration::from_secs(99)),
            None,
            "the end has its own line"
        );
    }

    #[test]
    fn durations_read_as_a_person_writes_them() {
        assert_eq!(duration(Duration::from_secs(45)), "45s");
        assert_eq!(duration(Duration::from_secs(187)), "3m 07s");
        assert_eq!(duration(Duration::from_secs(3720)), "1h 02m");
        assert_eq!(
            log_line("scan", 0, 4, Duration::from_secs(7)),
            "scan: 0/4 done, 7s so far"
        );
    }

    #[test]
    fn a_case_message_names_its_case_once() {
        assert_eq!(named("t3", "no steps"), "t3: no steps");
        assert_eq!(named("t3", "t3: not run (budget)"), "t3: not run (budget)");
        assert_eq!(named("t3", "t30: other"), "t3: t30: other");
    }
}
