//! Progress on stderr: a bar on a terminal, a plain line every few seconds otherwise.

use super::*;

/// A progress bar of `total` items counted in `unit`, hidden unless `show`.
///
/// On a terminal it is a bar; otherwise (a CI log, a file) a bar would draw nothing, so a plain
/// line is printed every [`PLAIN_PROGRESS_EVERY`] instead, without escape codes.
pub(super) fn progress_bar(total: u64, unit: &str, message: String, show: bool) -> ProgressBar {
    use std::io::IsTerminal as _;
    let bar = if show && std::io::stderr().is_terminal() {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    if show && !std::io::stderr().is_terminal() {
        bar.set_length(total);
        plain_progress(bar.clone(), unit.to_owned(), message.clone());
    }
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {{msg}} [{{bar:30}}] {{pos}}/{{len}} {unit}, {{per_sec}}, eta {{eta}}"
        ))
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_message(message);
    bar
}

/// How often progress is printed as a plain line when stderr is not a terminal.
pub(super) const PLAIN_PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Prints `bar`'s progress as a plain line every [`PLAIN_PROGRESS_EVERY`] until it is finished.
pub(super) fn plain_progress(bar: ProgressBar, unit: String, message: String) {
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut last = Instant::now();
        while !bar.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(200));
            if last.elapsed() < PLAIN_PROGRESS_EVERY || bar.is_finished() {
                continue;
            }
            last = Instant::now();
            let done = bar.position();
            let total = bar.length().unwrap_or(0);
            let seconds = started.elapsed().as_secs_f64();
            let rate = done as f64 / seconds.max(1e-9);
            let eta = if rate > 0.0 {
                format!(", eta {:.0} s", total.saturating_sub(done) as f64 / rate)
            } else {
                String::new()
            };
            eprintln!("{message}: {done}/{total} {unit} after {seconds:.0} s ({rate:.1}/s{eta})");
        }
    });
}
