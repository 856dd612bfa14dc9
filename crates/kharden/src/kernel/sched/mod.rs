//! Scheduling: per-CPU run queues, wake-up placement, time slices and context switches
//! (scheduler.rs), and the load balancing the scheduler tick runs (balance.rs).

pub mod balance;
pub mod scheduler;
