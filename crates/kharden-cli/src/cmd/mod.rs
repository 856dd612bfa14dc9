//! One module per subcommand.
pub mod check;
pub mod defenses;
pub mod evict_fault;
pub mod footprint_data;
pub mod kernel;
pub mod kvm;
pub mod machines;
pub mod params;
pub mod refcount;
pub mod replay;
pub mod reproduce;
pub mod run;
pub mod sweep;
pub mod sweep_file;
pub mod trace;
pub mod validate;
