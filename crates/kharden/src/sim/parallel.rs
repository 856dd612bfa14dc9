//! A work queue over indices on scoped threads: each worker takes the next index, and every
//! result reaches the calling thread as soon as it is done (sweeps write and show progress
//! as points finish; experiments collect them in order).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// Threads a work queue runs on when its caller leaves the choice (0: not yet decided).
static DEFAULT_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Sets the threads every later work queue runs on when its caller leaves the choice
/// (0: KHARDEN_THREADS, else one per core). Results never depend on it.
pub fn set_default_threads(n: usize) {
    DEFAULT_THREADS.store(n, Ordering::Relaxed);
}

/// The KHARDEN_THREADS environment variable: None when unset, an error unless it is a
/// positive count (the command line checks it before running anything).
pub fn env_threads() -> crate::error::Result<Option<usize>> {
    let Some(v) = std::env::var_os("KHARDEN_THREADS") else {
        return Ok(None);
    };
    match v.to_str().and_then(|v| v.trim().parse::<usize>().ok()) {
        Some(n) if n > 0 => Ok(Some(n)),
        _ => Err(crate::error::Error::new(format!(
            "KHARDEN_THREADS: expected a positive number of threads, got {v:?}"
        ))),
    }
}

/// The threads a work queue runs on when its caller leaves the choice: set_default_threads,
/// else KHARDEN_THREADS, else one per core.
pub fn default_threads() -> usize {
    match DEFAULT_THREADS.load(Ordering::Relaxed) {
        0 => env_threads()
            .ok()
            .flatten()
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        n => n,
    }
}

/// Runs `work(i)` for every i in 0..count on `threads` threads (0: default_threads()),
/// calling `done(i, result)` on this thread as results arrive, in completion order.
pub fn for_each_index<R: Send>(
    count: usize,
    threads: usize,
    work: impl Fn(usize) -> R + Sync,
    mut done: impl FnMut(usize, R),
) {
    let threads = match threads {
        0 => default_threads(),
        n => n,
    }
    .min(count.max(1));
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, R)>();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (tx, next, work) = (tx.clone(), &next, &work);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count || tx.send((i, work(i))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            done(i, r);
        }
    });
}

/// `work(i)` for every i in 0..count on default_threads(); the results in index order.
pub fn map_indices<R: Send>(count: usize, work: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let mut out: Vec<Option<R>> = (0..count).map(|_| None).collect();
    for_each_index(count, 0, work, |i, r| out[i] = Some(r));
    out.into_iter()
        .map(|r| r.expect("every index ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_index_runs_once_and_results_keep_their_order() {
        let squares = super::map_indices(100, |i| i * i);
        assert_eq!(squares, (0..100).map(|i| i * i).collect::<Vec<_>>());
        assert!(super::map_indices(0, |i| i).is_empty());
    }
}
