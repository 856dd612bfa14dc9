//! Seed 001's published table (`published/seed001.toml`): the rows the reproduction
//! compares and the one the exclusive pair's cost is fitted to.

use kharden::{Error, Result};
use serde::Deserialize;

const PUBLISHED: &str = include_str!("../../published/seed001.toml");

#[derive(Debug, Clone, Deserialize)]
pub(super) struct PublishedRow {
    pub(super) label: String,
    pub(super) implementation: String,
    pub(super) seconds: f64,
    pub(super) cycles: f64,
    pub(super) instructions: f64,
    /// perf's branch-misses: what rules out store-exclusive failures and mispredictions.
    pub(super) branch_misses: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct Published {
    pub(super) source: String,
    pub(super) core: String,
    pub(super) variant: String,
    pub(super) lkdtm_bound: u64,
    pub(super) row: Vec<PublishedRow>,
}

pub(super) fn published() -> Result<Published> {
    toml::from_str(PUBLISHED).map_err(|e| Error::at("published/seed001.toml", e.message().trim()))
}
