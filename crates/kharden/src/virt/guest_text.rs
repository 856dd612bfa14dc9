//! The guest kernel's code per phase of an ssdd step, from the kernel path footprints
//! measured on a real kernel (kernels/linux-6.18.44-fc-v669.toml, kernel/footprints/footprint.rs): the
//! estimated lines of every function each path ran, grouped by 4 KiB text page. A phase's
//! text is what its path runs and the phases before it in the step have not already listed,
//! so the step's text working set is the union of the paths' (docs/design/kvm.md).

use crate::kernel::footprints::footprint::Footprints;
use crate::kernel::footprints::path_footprint::{LINE_BYTES, PAGE_BYTES};
use std::collections::{BTreeMap, BTreeSet};

/// One 4 KiB page of guest kernel text a phase runs, and which of its 64 lines.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextPage {
    /// Bytes from the start of the kernel text.
    pub offset: u64,
    /// Bit i: line i of the page.
    pub lines: u64,
}

/// The text of each phase of an ssdd step.
#[derive(Debug, Clone, Default)]
pub struct GuestText {
    /// Bytes of kernel text (_etext - _text).
    pub bytes: u64,
    /// Every kernel entry and exit (entry_SYSCALL_64, do_syscall_64, the sysret path).
    pub entry: Vec<TextPage>,
    /// __schedule -> context_switch -> switch_mm_irqs_off, __switch_to.
    pub switch: Vec<TextPage>,
    /// The tracer's waitpid: do_wait, wait_consider_task (wait4's code the ssdd recording ran).
    pub wait: Vec<TextPage>,
    /// The tracer's ptrace(PTRACE_SINGLESTEP): ptrace_check_attach, user_enable_single_step,
    /// ptrace_resume, wake_up_state; the rest of its recorded path.
    pub ptrace: Vec<TextPage>,
    /// The tracee's #DB, SIGTRAP, ptrace_stop and do_notify_parent_cldstop.
    pub trap: Vec<TextPage>,
}

/// The paths a step runs (footprint names).
pub const PATHS: [&str; 5] = [
    "syscall-entry-exit",
    "context-switch",
    "wait4",
    "ptrace-singlestep",
    "ptrace-stop",
];

impl GuestText {
    /// The phases' text from `f`; an error names a path the recording lacks.
    pub fn from(f: &Footprints) -> crate::Result<GuestText> {
        let lines = |name: &str| -> crate::Result<BTreeSet<u64>> {
            f.path(name).map(|p| p.estimated_lines()).ok_or_else(|| {
                crate::Error::new(format!(
                    "kernel footprints: no path '{name}' (the guest's ssdd step needs {})",
                    PATHS.join(", ")
                ))
            })
        };
        let entry = lines(PATHS[0])?;
        let switch = lines(PATHS[1])?;
        let singlestep = lines(PATHS[3])?;
        let stop = lines(PATHS[4])?;
        // The code ssdd's waitpid runs: what the wait4 recording and the tracer's share.
        let wait: BTreeSet<u64> = lines(PATHS[2])?
            .intersection(&singlestep)
            .copied()
            .collect();
        let mut seen = BTreeSet::new();
        let mut phase = |set: &BTreeSet<u64>| {
            let own: BTreeSet<u64> = set.difference(&seen).copied().collect();
            seen.extend(own.iter().copied());
            pages(&own)
        };
        Ok(GuestText {
            bytes: f.kernel.text_bytes,
            entry: phase(&entry),
            switch: phase(&switch),
            wait: phase(&wait),
            ptrace: phase(&singlestep),
            trap: phase(&stop),
        })
    }

    /// Distinct 4 KiB text pages of the whole step.
    pub fn pages(&self) -> usize {
        [
            &self.entry,
            &self.switch,
            &self.wait,
            &self.ptrace,
            &self.trap,
        ]
        .iter()
        .flat_map(|p| p.iter().map(|t| t.offset))
        .collect::<BTreeSet<u64>>()
        .len()
    }
}

/// Lines grouped by page, in address order.
fn pages(lines: &BTreeSet<u64>) -> Vec<TextPage> {
    let per_page = PAGE_BYTES / LINE_BYTES;
    let mut by_page: BTreeMap<u64, u64> = BTreeMap::new();
    for l in lines {
        *by_page.entry(l / per_page).or_default() |= 1 << (l % per_page);
    }
    by_page
        .into_iter()
        .map(|(page, lines)| TextPage {
            offset: page * PAGE_BYTES,
            lines,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_partition_the_recorded_paths() {
        let t = GuestText::from(Footprints::builtin()).unwrap();
        assert!(t.entry.len() >= 2 && t.switch.len() >= 10 && t.trap.len() >= 10);
        assert!(t.ptrace.len() >= 20, "{}", t.ptrace.len());
        // The union has every page of the tracee's recorded path.
        let f = Footprints::builtin();
        let stop = f.path("ptrace-stop").unwrap();
        let all: BTreeSet<u64> = [&t.entry, &t.switch, &t.wait, &t.ptrace, &t.trap]
            .iter()
            .flat_map(|p| p.iter().map(|x| x.offset / PAGE_BYTES))
            .collect();
        for l in stop.estimated_lines() {
            assert!(all.contains(&(l * LINE_BYTES / PAGE_BYTES)));
        }
        assert!(t.pages() <= 400, "{}", t.pages());
    }
}
