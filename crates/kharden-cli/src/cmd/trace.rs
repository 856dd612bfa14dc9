//! `kharden record` and `kharden trace ...` (placeholder until the trace crate lands).
use clap::Args as ClapArgs;

#[derive(ClapArgs)]
pub struct RecordArgs {}

#[derive(ClapArgs)]
pub struct TraceArgs {}

pub fn record(_args: RecordArgs) -> kharden::Result<()> {
    Err(kharden::Error::new("record: not built yet"))
}

pub fn trace(_args: TraceArgs) -> kharden::Result<()> {
    Err(kharden::Error::new("trace: not built yet"))
}
