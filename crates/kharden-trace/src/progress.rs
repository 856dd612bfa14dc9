//! A one-line progress indicator on stderr, shown only when stderr is a terminal (nothing
//! when it is piped or redirected), redrawn at most ten times a second.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    enabled: bool,
    started: Instant,
    last: Option<Instant>,
    shown: bool,
}

impl Progress {
    /// An indicator that draws only if stderr is a terminal.
    pub fn on_terminal() -> Progress {
        Progress {
            enabled: std::io::stderr().is_terminal(),
            started: Instant::now(),
            last: None,
            shown: false,
        }
    }

    /// Replaces the line with `text` (if the last redraw is 100 ms old).
    pub fn show(&mut self, text: &str) {
        if !self.enabled
            || self
                .last
                .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(Instant::now());
        self.shown = true;
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[2K{text}");
        let _ = e.flush();
    }

    /// Replaces the line with `text` now (for steps that are seconds apart).
    pub fn show_now(&mut self, text: &str) {
        self.last = None;
        self.show(text);
    }

    /// `[#####.....] 12/40 label, 1m05s left`: `done` of `total` steps, the time left
    /// estimated from the pace since the indicator was made.
    pub fn show_bar(&mut self, done: usize, total: usize, label: &str) {
        if self.enabled {
            let text = bar(done, total, self.started.elapsed(), label);
            self.show(&text);
        }
    }

    /// Erases the line.
    pub fn clear(&mut self) {
        if self.shown {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The text of a progress bar (see `Progress::show_bar`).
pub fn bar(done: usize, total: usize, elapsed: Duration, label: &str) -> String {
    const WIDTH: usize = 30;
    let filled = (done * WIDTH)
        .checked_div(total)
        .unwrap_or(WIDTH)
        .min(WIDTH);
    let left = if done == 0 || done >= total {
        String::new()
    } else {
        let secs = elapsed.as_secs_f64() * (total - done) as f64 / done as f64;
        format!(", {}m{:02}s left", secs as u64 / 60, secs as u64 % 60)
    };
    format!(
        "[{}{}] {done}/{total} {label}{left}",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_fills_with_progress_and_estimates_the_rest() {
        let t = Duration::from_secs(10);
        assert_eq!(bar(0, 4, t, "x"), format!("[{}] 0/4 x", ".".repeat(30)));
        assert_eq!(
            bar(1, 4, t, "points"),
            format!(
                "[{}{}] 1/4 points, 0m30s left",
                "#".repeat(7),
                ".".repeat(23)
            )
        );
        assert_eq!(bar(4, 4, t, "x"), format!("[{}] 4/4 x", "#".repeat(30)));
        assert_eq!(bar(0, 0, t, "x"), format!("[{}] 0/0 x", "#".repeat(30)));
    }
}
