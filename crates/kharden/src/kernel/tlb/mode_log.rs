//! When a CPU was in user mode, for the recent past.
//!
//! CPUs run whole operations (a burst of page faults, a chunk of user work) as one step, so
//! an interrupt sent by a CPU processed later can arrive at a moment its target has already
//! simulated past. What the interrupt found there, user or kernel mode, decides whose time
//! the handler is under tick accounting. The log keeps each CPU's mode changes in time order
//! back to the earliest CPU clock. An interrupt can also arrive at a moment its target has
//! not simulated yet; the guess there is the CPU's recent share of time in user mode,
//! dithered so that successive guesses average to that share (deterministically).

use crate::sim::Time;
use std::collections::VecDeque;

/// Changes kept at most: runs without a scheduler to prune the log (one CPU looping on
/// system calls) would otherwise grow it without end. Thousands of changes span far more
/// than an IPI's flight.
const MAX_CHANGES: usize = 4096;

#[derive(Debug, Clone, Default)]
pub struct ModeLog {
    /// (when, user mode from then on), in time order.
    changes: VecDeque<(u64, bool)>,
    /// User time between the first and the last change (a running sum, so that the share
    /// asked at every future-arrival interrupt costs no walk of the log).
    closed_user: u64,
    /// Error diffusion of the guesses for moments not simulated yet.
    guess_credit: f64,
}

impl ModeLog {
    /// The CPU is in user mode (`true`) or kernel mode from `at` on.
    pub fn record(&mut self, at: Time, user: bool) {
        // A change stamped before the last one (an entry's first half charged after an
        // interrupt moved the clock) cannot reorder the past: it applies from the last one.
        let at = self.changes.back().map_or(at.0, |&(t, _)| t.max(at.0));
        if let Some(&(t, mode)) = self.changes.back() {
            if mode == user {
                return;
            }
            if t == at {
                // Replaces a change at the same moment (it lasted no time).
                self.pop_back();
                return self.record(Time(at), user);
            }
        }
        if self.changes.len() == MAX_CHANGES {
            self.pop_front();
        }
        if let Some(&(t, true)) = self.changes.back() {
            self.closed_user += at - t;
        }
        self.changes.push_back((at, user));
    }

    fn pop_back(&mut self) {
        let (t, _) = self.changes.pop_back().expect("a change to pop");
        if let Some(&(before, true)) = self.changes.back() {
            self.closed_user -= t - before;
        }
    }

    fn pop_front(&mut self) {
        let (t, user) = self.changes.pop_front().expect("a change to pop");
        if let (true, Some(&(next, _))) = (user, self.changes.front()) {
            self.closed_user -= next - t;
        }
    }

    /// The mode at `at`, if the log reaches back that far.
    pub fn user_at(&self, at: Time) -> Option<bool> {
        let i = self.changes.partition_point(|&(t, _)| t <= at.0);
        i.checked_sub(1).map(|i| self.changes[i].1)
    }

    /// Whether an interrupt arriving `at` found the CPU, whose clock stands at `now`, in user
    /// mode: the log's answer for its past, a dithered guess from its recent user share for
    /// its future; `present` (the mode it is in now) when the log holds nothing.
    pub fn interrupted_user(&mut self, at: Time, now: Time, present: bool) -> bool {
        if at <= now {
            return self.user_at(at).unwrap_or(present);
        }
        let Some(share) = self.user_share_before(now) else {
            return present;
        };
        self.guess_credit += share;
        let user = self.guess_credit >= 0.5;
        if user {
            self.guess_credit -= 1.0;
        }
        user
    }

    /// The fraction of the logged span before `now` spent in user mode.
    fn user_share_before(&self, now: Time) -> Option<f64> {
        let (&(start, _), end) = (self.changes.front()?, now.0);
        if end <= start {
            return None;
        }
        let &(last, last_user) = self.changes.back()?;
        let user = if last <= end {
            self.closed_user + if last_user { end - last } else { 0 }
        } else {
            // A clock moved back (an interrupt replaced spin time) below logged changes.
            self.walked_user(end)
        };
        Some(user as f64 / (end - start) as f64)
    }

    /// User time from the first change to `end`, by walking the log.
    fn walked_user(&self, end: u64) -> u64 {
        let mut user = 0;
        for (i, &(t, is_user)) in self.changes.iter().enumerate() {
            let until = self
                .changes
                .get(i + 1)
                .map_or(end, |&(next, _)| next.min(end));
            if is_user && until > t {
                user += until - t;
            }
        }
        user
    }

    /// The log as seen from `now` (each change's distance back, then the sums), so that a
    /// log that moved along with its CPU's clock is the same log (kernel/steady.rs).
    pub fn canon(&self, now: Time, c: &mut crate::sim::Canon) {
        c.word(self.changes.len() as u64);
        c.words(
            self.changes
                .iter()
                .map(|&(t, user)| now.0.wrapping_sub(t) << 1 | user as u64),
        );
        c.words([self.closed_user, self.guess_credit.to_bits()]);
    }

    /// Moves every logged change `dt` later (its CPU's clock moved on by `dt`).
    pub fn shift(&mut self, dt: Time) {
        for change in self.changes.iter_mut() {
            change.0 += dt.0;
        }
    }

    /// Forgets changes no request can ask about: those before `t`, except the one in force
    /// at `t`.
    pub fn prune(&mut self, t: Time) {
        while self.changes.len() > 1 && self.changes[1].0 <= t.0 {
            self.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_at_a_past_moment_is_the_last_change_before_it() {
        let mut log = ModeLog::default();
        assert_eq!(log.user_at(Time(5)), None, "nothing known yet");
        log.record(Time(10), true);
        log.record(Time(20), false);
        log.record(Time(20), false);
        log.record(Time(30), true);
        assert_eq!(log.user_at(Time(5)), None);
        assert_eq!(log.user_at(Time(10)), Some(true));
        assert_eq!(log.user_at(Time(25)), Some(false));
        assert_eq!(log.user_at(Time(99)), Some(true), "the present mode");
        log.prune(Time(25));
        assert_eq!(
            log.user_at(Time(25)),
            Some(false),
            "the change in force is kept"
        );
        assert_eq!(log.user_at(Time(31)), Some(true));
        // A late stamp never rewrites the past: it takes effect at the last change.
        log.record(Time(28), false);
        assert_eq!(log.user_at(Time(29)), Some(false));
        assert_eq!(log.user_at(Time(31)), Some(false));
        assert_eq!(
            log.changes.len(),
            1,
            "kernel mode from 20 on, in one change"
        );
    }

    #[test]
    fn guesses_for_the_future_average_to_the_recent_user_share() {
        let mut log = ModeLog::default();
        // User 0-30, kernel 30-100: 30% user.
        log.record(Time(0), true);
        log.record(Time(30), false);
        assert!(
            !log.interrupted_user(Time(50), Time(100), true),
            "the past is known"
        );
        let users = (0..1000)
            .filter(|_| log.interrupted_user(Time(150), Time(100), false))
            .count();
        assert_eq!(users, 300);
        let mut empty = ModeLog::default();
        assert!(
            empty.interrupted_user(Time(150), Time(100), true),
            "nothing logged"
        );
    }

    #[test]
    fn the_running_user_sum_survives_replacements_caps_and_prunes() {
        let mut log = ModeLog::default();
        let mut rng = crate::sim::Pcg32::new(3, 3);
        let mut now = 0u64;
        let mut capped = false;
        for step in 0..20_000u32 {
            // Some changes land at the same moment (replacements), some late (clamped).
            now += rng.below(3) as u64 * 7;
            let at = now.saturating_sub(rng.below(2) as u64 * 5);
            log.record(Time(at), rng.below(2) == 1);
            // Pruned like the engine does for a while, then left to reach its cap.
            if step % 97 == 0 && step < 5_000 {
                log.prune(Time(now.saturating_sub(500)));
            }
            capped |= log.changes.len() == MAX_CHANGES;
            let end = now + 1 + rng.below(50) as u64;
            if log.changes[0].0 < end {
                let span = (end - log.changes[0].0) as f64;
                let walked = log.walked_user(end) as f64 / span;
                assert_eq!(
                    log.user_share_before(Time(end)),
                    Some(walked),
                    "step {step}"
                );
            }
        }
        assert!(capped, "the cap was reached");
    }
}
