//! When a CPU is busy in interrupt handlers, kept in simulated-time order.
//!
//! CPUs run their operations in time order, but one operation can issue IPIs at several
//! moments, so requests reach a target out of order: a late-processed request may be earlier
//! in simulated time than one already booked. The calendar books each handler run as an
//! interval. A request that lands inside a booked interval is drained by that interrupt
//! (Linux flush_smp_call_function_queue takes every queued call) and extends it; one that
//! lands in a gap opens a new interval and pays interrupt entry.

use crate::sim::Time;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub struct IrqCalendar {
    /// start -> end of each busy interval (ps).
    busy: BTreeMap<u64, u64>,
}

/// Where a request was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booking {
    /// When the handler starts working on this request.
    pub start: Time,
    /// True when an interrupt already in progress drains it (no new entry).
    pub drained: bool,
}

impl IrqCalendar {
    /// Finds where a request arriving at `arrival` is served.
    pub fn place(&self, arrival: Time) -> Booking {
        match self.busy.range(..=arrival.0).next_back() {
            Some((_, &end)) if end > arrival.0 => Booking {
                start: Time(end),
                drained: true,
            },
            _ => Booking {
                start: arrival,
                drained: false,
            },
        }
    }

    /// Books the request placed by `place` as taking until `done`.
    pub fn book(&mut self, booking: Booking, arrival: Time, done: Time) {
        if booking.drained {
            let (&s, _) = self
                .busy
                .range(..=arrival.0)
                .next_back()
                .expect("placed in an interval");
            self.busy.insert(s, done.0);
        } else {
            self.busy.insert(booking.start.0, done.0);
        }
    }

    /// Forgets intervals that ended before `t` (no request can arrive before the earliest
    /// CPU clock).
    pub fn prune(&mut self, t: Time) {
        while let Some((&s, &e)) = self.busy.first_key_value() {
            if e >= t.0 {
                break;
            }
            self.busy.remove(&s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn requests_inside_an_interrupt_are_drained_and_out_of_order_ones_fit_in_gaps() {
        let mut c = IrqCalendar::default();
        let b = c.place(Time(1000));
        assert_eq!(
            b,
            Booking {
                start: Time(1000),
                drained: false
            }
        );
        c.book(b, Time(1000), Time(1500));
        let b = c.place(Time(1200));
        assert_eq!(
            b,
            Booking {
                start: Time(1500),
                drained: true
            }
        );
        c.book(b, Time(1200), Time(1600));
        // A request far in the future, then one in between that was processed later.
        let b = c.place(Time(9000));
        c.book(b, Time(9000), Time(9400));
        assert_eq!(
            c.place(Time(3000)),
            Booking {
                start: Time(3000),
                drained: false
            },
            "the earlier request is not stuck behind the later one"
        );
        c.prune(Time(2000));
        assert_eq!(
            c.place(Time(1200)),
            Booking {
                start: Time(1200),
                drained: false
            },
            "pruned"
        );
    }
}
