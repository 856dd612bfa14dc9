//! Windows: stretches of time in which the driver knows which kernel path a thread is in. The
//! driver writes them; the recorder attributes perf samples and the latency runs attribute
//! time through them.

use std::io::{self, Write};
use std::path::Path;

/// One stretch of one thread's time.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Which repeat of the scenario (latency runs repeat it in one process).
    pub repeat: u32,
    /// The path the thread that opened the window runs (None: its samples are not kept).
    pub own: Option<String>,
    /// The path every other thread or child of the driver runs meanwhile (None: dropped).
    pub others: Option<String>,
    pub tid: i32,
    /// CLOCK_MONOTONIC nanoseconds, the clock `perf record -k mono` stamps samples with.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Operations of `own` done in the window (for the latency: time / ops).
    pub ops: u64,
}

pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec and CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

fn dash(p: &Option<String>) -> &str {
    p.as_deref().unwrap_or("-")
}

pub fn write_all(path: &Path, windows: &[Window]) -> io::Result<()> {
    let mut out = io::BufWriter::new(std::fs::File::create(path)?);
    for w in windows {
        writeln!(
            out,
            "{} {} {} {} {} {} {}",
            w.repeat,
            dash(&w.own),
            dash(&w.others),
            w.tid,
            w.start_ns,
            w.end_ns,
            w.ops
        )?;
    }
    out.flush()
}

/// Reads what `write_all` wrote; `place` names the file in errors.
pub fn read_all(place: &str, text: &str) -> kharden::Result<Vec<Window>> {
    let opt = |s: &str| (s != "-").then(|| s.to_string());
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let bad = || {
                kharden::Error::at(
                    format!("{place}: line {}", i + 1),
                    "expected 'repeat own others tid start_ns end_ns ops'",
                )
            };
            if f.len() != 7 {
                return Err(bad());
            }
            Ok(Window {
                repeat: f[0].parse().map_err(|_| bad())?,
                own: opt(f[1]),
                others: opt(f[2]),
                tid: f[3].parse().map_err(|_| bad())?,
                start_ns: f[4].parse().map_err(|_| bad())?,
                end_ns: f[5].parse().map_err(|_| bad())?,
                ops: f[6].parse().map_err(|_| bad())?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_round_trip_through_text() {
        let w = Window {
            repeat: 2,
            own: Some("fork".into()),
            others: None,
            tid: 7,
            start_ns: 10,
            end_ns: 20,
            ops: 3,
        };
        let dir = std::env::temp_dir().join(format!("kh-win-{}", std::process::id()));
        write_all(&dir, std::slice::from_ref(&w)).unwrap();
        let text = std::fs::read_to_string(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(read_all("w", &text).unwrap(), vec![w]);
        let err = read_all("w", "1 a b").unwrap_err().to_string();
        assert!(err.starts_with("w: line 1:"), "{err}");
    }
}
