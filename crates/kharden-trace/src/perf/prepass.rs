//! The conversion's first pass over perf.data: every task's calls that open a path (a
//! watched open event goes to a call by the task's later calls too: fds::match_opens), and
//! the command's cpu-clock samples by mode. A user-mode sample is the command's own work:
//! the recorder's runs in the kernel, so the samples measure the traced run's user time
//! without the recorder's share of the intervals (replay/split.rs scales the recorder's
//! measured cost on the user side to it).

use super::fds::{self, OpenCall};
use super::tracepoint::{Kind, Layout};
use crate::format::CpuSamples;
use kharden::{Error, Result};
use linux_perf_data::linux_perf_event_reader::{CpuMode, EventRecord};
use linux_perf_data::{PerfFileReader, PerfFileRecord};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The cpu-clock sampling period `record` asks for (ns of CPU time).
pub const SAMPLE_PERIOD_NS: u64 = 100_000;

pub(super) struct Prepass {
    pub(super) calls: HashMap<u32, Vec<OpenCall>>,
    pub(super) samples: Option<CpuSamples>,
}

pub(super) fn prepass(
    perf_data: &Path,
    layouts: &[(Kind, Layout)],
    names: &HashMap<u32, String>,
    perf_pid: Option<u32>,
) -> Result<Prepass> {
    let name = perf_data.display().to_string();
    let perr = |e: &dyn std::fmt::Display| Error::at(&name, format!("cannot parse perf.data: {e}"));
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = super::open_perf_data(perf_data)?;
    let sampled = layouts.iter().any(|(k, _)| *k == Kind::CpuClock);
    let mut entered: HashMap<u32, (u32, u64, u64)> = HashMap::new();
    let mut calls: HashMap<u32, Vec<OpenCall>> = HashMap::new();
    // The command's tree, as the conversion finds it (convert.rs): perf's child named
    // perf-exec, and every task forked from the tree.
    let mut parent_of: HashMap<u32, u32> = HashMap::new();
    let mut tree: HashSet<u32> = HashSet::new();
    let mut samples = CpuSamples {
        period_ns: SAMPLE_PERIOD_NS,
        ..Default::default()
    };
    while let Some(rec) = record_iter
        .next_record(&mut perf_file)
        .map_err(|e| perr(&e))?
    {
        let PerfFileRecord::EventRecord { attr_index, record } = rec else {
            continue;
        };
        let Ok(parsed) = record.parse() else {
            continue;
        };
        let s = match parsed {
            EventRecord::Fork(f) => {
                parent_of.insert(f.tid as u32, f.ptid as u32);
                if tree.contains(&(f.ptid as u32)) {
                    tree.insert(f.tid as u32);
                }
                continue;
            }
            EventRecord::Comm(c) => {
                let tid = c.tid as u32;
                let by_perf = perf_pid.is_none_or(|p| parent_of.get(&tid).is_none_or(|&q| q == p));
                if tree.is_empty()
                    && c.pid as u32 == tid
                    && &c.name.as_slice()[..] == b"perf-exec"
                    && by_perf
                {
                    tree.insert(tid);
                }
                continue;
            }
            EventRecord::Sample(s) => s,
            _ => continue,
        };
        let Some((kind, layout)) = layouts.get(attr_index) else {
            continue;
        };
        let Some(tid) = s.tid.map(|t| t as u32) else {
            continue;
        };
        match kind {
            Kind::CpuClock if tree.contains(&tid) => match s.cpu_mode {
                CpuMode::User => samples.user += 1,
                CpuMode::Kernel => samples.kernel += 1,
                _ => {}
            },
            Kind::SysEnter | Kind::SysExit => {
                let (Some(raw), Some(t)) = (&s.raw, s.timestamp) else {
                    continue;
                };
                let raw = raw.as_slice();
                let nr = layout.int(&raw, 0).unwrap_or(0) as u32;
                if *kind == Kind::SysEnter {
                    let args = layout.u64s::<6>(&raw, 1).unwrap_or([0; 6]);
                    match names.get(&nr).and_then(|n| fds::open_flags(n, &args)) {
                        Some(flags) => entered.insert(tid, (nr, t, flags)),
                        None => entered.remove(&tid),
                    };
                } else if let Some((enr, enter_ns, flags)) = entered.remove(&tid) {
                    if enr == nr {
                        let ret = layout.int(&raw, 1).unwrap_or(0) as i64;
                        calls.entry(tid).or_default().push(OpenCall {
                            enter_ns,
                            may_notify: ret >= 0 && flags & fds::O_PATH == 0,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    Ok(Prepass {
        calls,
        samples: sampled.then_some(samples),
    })
}
