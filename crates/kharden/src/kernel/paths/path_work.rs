//! Running a recorded path by name, charged the work its caller chooses: the measured
//! work, that less a page copy the caller models itself, a parameter's cycles, or the work a
//! native latency timed apart gives (kernel/paths/table.rs derives the work).

use crate::error::{Error, Result};
use crate::kernel::{CpuId, Kernel};

/// The work a recorded path is charged.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Work {
    /// Its measured work (kernel/paths/table.rs).
    Measured,
    /// Its measured work less the time its recording loop spent in the named page-copy
    /// (or clear) function: the caller models that copy.
    MeasuredLess(&'static str),
    /// A parameter's cycles (the path has no latency of its own in the recording).
    Cycles(f64),
    /// The work derived from a native latency in ns timed apart from the recording (as
    /// the recording's are derived: kernel/paths/table.rs).
    NativeNs(f64),
}

impl Kernel {
    /// Runs the recorded path `name` (kernel/paths/run.rs) with `work`.
    pub(crate) fn run_known_path(&mut self, cpu: CpuId, name: &str, work: Work) -> Result<()> {
        let id = self
            .paths
            .id(name)
            .ok_or_else(|| Error::new(format!("kernel path {name} is not in the footprints")))?;
        let path = self.paths.get(id);
        let measured = path.work_cycles;
        let cycles = match work {
            Work::Measured => measured,
            // The recorded loop copied or zeroed one page in `copy`, which copy_page()
            // charges (its cycles and the lines it waits for); what the loop's copy took
            // is measured, so that is what leaves the work.
            Work::MeasuredLess(copy) => match (measured, path.native_cycles_in(copy)) {
                (Some(w), Some(c)) => Some((w - c).max(0.0)),
                (None, _) => None,
                (Some(_), None) => {
                    return Err(Error::new(format!(
                        "kernel path {name}: its recording has no samples in {copy}, the page copy the model charges on its own"
                    )))
                }
            },
            Work::Cycles(c) => return self.run_path(cpu, id, Some(c)),
            Work::NativeNs(ns) => Some(self.paths.work_from_native_ns(id, ns)),
        };
        // Recorded work (a given figure above is the target's own).
        let cycles = cycles.map(|w| self.work_on_this_kernel(cpu, id, w));
        self.run_path(cpu, id, cycles)
    }
}
