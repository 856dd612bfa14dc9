//! `kharden refcount ...` (placeholder until the refcount crate lands).
use clap::Args as ClapArgs;

#[derive(ClapArgs)]
pub struct Args {}

pub fn run(_args: Args) -> kharden::Result<()> {
    Err(kharden::Error::new("refcount: not built yet"))
}
