//! One module per subcommand.
pub mod machines;
pub mod refcount;
pub mod trace;
