//! The engine: simulated time, the event queue, the seeded RNG, the stats registry, maps
//! keyed by integers and sets of CPUs.

pub mod canon;
pub mod cpuset;
pub mod int_map;
pub mod parallel;
pub mod queue;
pub mod rng;
pub mod stats;
pub mod time;

pub use canon::Canon;
pub use cpuset::CpuSet;
pub use int_map::IntMap;
pub use queue::EventQueue;
pub use rng::Pcg32;
pub use stats::{Counter, FlushReason, OwnedCounter, Stats, TimeCategory, OWNED_COUNTERS};
pub use time::{Clock, Time};
