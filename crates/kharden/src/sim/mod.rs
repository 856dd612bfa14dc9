//! The engine: simulated time, the event queue, the seeded RNG and the stats registry.

pub mod queue;
pub mod rng;
pub mod stats;
pub mod time;

pub use queue::EventQueue;
pub use rng::Pcg32;
pub use stats::{Counter, FlushReason, Stats, TimeCategory};
pub use time::{Clock, Time};
