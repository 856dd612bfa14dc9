//! Simulated time in integer picoseconds: exact addition, no drift, and a u64 lasts 213 days.

use serde::Serialize;
use std::ops::{Add, AddAssign, Mul, Sub};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);
    pub fn from_ns(ns: f64) -> Time {
        Time((ns * 1000.0).round() as u64)
    }
    pub fn ps(self) -> u64 {
        self.0
    }
    pub fn ns(self) -> f64 {
        self.0 as f64 / 1e3
    }
    pub fn secs(self) -> f64 {
        self.0 as f64 / 1e12
    }
}

impl Add for Time {
    type Output = Time;
    fn add(self, o: Time) -> Time {
        Time(self.0 + o.0)
    }
}
impl AddAssign for Time {
    fn add_assign(&mut self, o: Time) {
        self.0 += o.0;
    }
}
impl Mul<u64> for Time {
    type Output = Time;
    fn mul(self, n: u64) -> Time {
        Time(self.0 * n)
    }
}
impl Sub for Time {
    type Output = Time;
    fn sub(self, o: Time) -> Time {
        Time(self.0.saturating_sub(o.0))
    }
}

/// Converts core cycles of one machine into time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    ps_per_cycle: f64,
}

impl Clock {
    pub fn new(frequency_ghz: f64) -> Clock {
        Clock {
            ps_per_cycle: 1000.0 / frequency_ghz,
        }
    }
    pub fn cycles(&self, cycles: f64) -> Time {
        Time((cycles * self.ps_per_cycle).round() as u64)
    }
    pub fn to_cycles(&self, t: Time) -> f64 {
        t.0 as f64 / self.ps_per_cycle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn clock_round_trips_cycles() {
        let c = Clock::new(2.0);
        assert_eq!(c.cycles(3.0), Time(1500));
        assert_eq!(c.to_cycles(Time(1500)), 3.0);
        assert_eq!(Time::from_ns(1.5).ps(), 1500);
    }
}
