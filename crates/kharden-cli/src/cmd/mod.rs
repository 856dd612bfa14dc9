//! One module per subcommand.
pub mod machines;
pub mod refcount;
pub mod trace;
pub mod check;
pub mod defenses;
pub mod reproduce;
pub mod run;
pub mod sweep;
pub mod replay;
