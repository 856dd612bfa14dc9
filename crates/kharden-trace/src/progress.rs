//! A one-line progress indicator on stderr, shown only when stderr is a terminal (nothing
//! when it is piped or redirected), redrawn at most ten times a second.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    enabled: bool,
    last: Option<Instant>,
    shown: bool,
}

impl Progress {
    /// An indicator that draws only if stderr is a terminal.
    pub fn on_terminal() -> Progress {
        Progress {
            enabled: std::io::stderr().is_terminal(),
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
