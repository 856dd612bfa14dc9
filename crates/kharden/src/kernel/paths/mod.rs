//! Kernel paths as the model runs them: the chosen recording compiled into a table of paths
//! (recording.rs, table.rs), running one through the TLBs and caches with its work (run.rs,
//! path_work.rs, l1_replay.rs), and the kernel operations built on them: entry and
//! exit with the syscall table (entry.rs, syscall.rs), faults, file pages and process life
//! (process.rs).

pub mod entry;
pub(super) mod l1_replay;
pub mod path_work;
pub mod process;
pub mod recording;
pub mod run;
pub mod syscall;
pub mod table;
