//! Progress on the terminal: an indicatif bar that implements the library's `Progress`, hidden
//! when quiet or when stderr is not a terminal.

use maslens_eval::run::Progress;

/// A progress bar over `n` items (hidden when quiet or not a terminal).
pub fn bar(n: usize, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(n as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb
}

/// The library's progress callbacks on a terminal bar; case errors go to stderr above the bar.
pub struct Bar(pub indicatif::ProgressBar);

impl Bar {
    pub fn new(quiet: bool) -> Bar {
        Bar(bar(0, quiet))
    }
}

impl Progress for Bar {
    fn start(&self, cases: usize) {
        self.0.set_length(cases as u64);
        self.0.set_position(0);
    }
    fn case(&self, id: &str) {
        self.0.set_message(id.to_string());
    }
    fn case_done(&self) {
        self.0.inc(1);
    }
    fn error(&self, _id: &str, message: &str) {
        self.0.suspend(|| eprintln!("error: {message}"));
    }
    // A deferred case (export mode) is no error: the export line at the end says what to do.
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
