//! Bugs that reviews and fixes found in the real mechanisms, one per mechanism where the
//! record has one the model can express: the code before the fix as a broken variant, the
//! fixed code beside it, and the scenario that exposes the difference. `kharden check
//! --all-historical` runs them; docs/design/historical-bugs.md tells each story.

use crate::error::{Error, Result};
use crate::kernel::paths::syscall;
use crate::kernel::Kernel;
use crate::machine::{self, MachineProfile};
use crate::oracle::{scenario, OracleMode};
use crate::params::Params;
use crate::virt::ssdd::emulated_store_after_wp_toggle;
use crate::workload::SyscallLoop;

/// Who sees the bug: the oracle's general invariant in runs that were not written for it
/// (kharden check's syscall loops, its staged scenarios, the CR0 probe), or only a scenario
/// shaped after the bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    General,
    Targeted,
}

impl Exposure {
    pub fn name(self) -> &'static str {
        match self {
            Exposure::General => "general invariant",
            Exposure::Targeted => "targeted scenario",
        }
    }
}

/// One historical bug.
pub struct Case {
    pub mechanism: &'static str,
    /// The fix: its commit title, or the series change that fixed it.
    pub fix: &'static str,
    /// Where the fix is: commit id or message-id.
    pub reference: &'static str,
    /// The variant that stands for the code before the fix.
    pub broken: &'static str,
    /// The variant that stands for the code after it.
    pub fixed: &'static str,
    pub machine: &'static str,
    /// What the run does.
    pub scenario: &'static str,
    pub exposure: Exposure,
    /// Runs the scenario under a variant; returns the violations found.
    pub run: fn(variant: &str, machine: &MachineProfile, params: &Params) -> Result<Vec<String>>,
}

/// What running a case found.
pub struct Outcome {
    /// The broken variant's violations (the first is shown).
    pub broken: Vec<String>,
    pub fixed: Vec<String>,
}

impl Outcome {
    /// The oracle caught the bug: the code before the fix violates, the code after holds.
    pub fn caught(&self) -> bool {
        !self.broken.is_empty() && self.fixed.is_empty()
    }
}

impl Case {
    pub fn run(&self, params: &Params) -> Result<Outcome> {
        let m = machine::load(self.machine)?;
        Ok(Outcome {
            broken: (self.run)(self.broken, &m, params)?,
            fixed: (self.run)(self.fixed, &m, params)?,
        })
    }
}

pub const ALL: &[Case] = &[
    Case {
        mechanism: "kvm-cr0wp",
        fix: "KVM: x86/mmu: Refresh CR0.WP prior to checking for emulated permission faults",
        reference: "cf9f4c0eb169 (<20230405002608.418442-1-seanjc@google.com>), fixing fb509f76acc8",
        broken: "kvm-cr0wp:broken-before-refresh-cr0wp",
        fixed: "kvm-cr0wp:guest-owned-wp",
        machine: "skylake-i7-6700k",
        scenario: "a guest whose last exiting CR0 write set WP clears WP (guest-owned: no exit), then KVM emulates its LTR, which stores to the read-only GDT (Mathias Krause's trace), on each MMU",
        exposure: Exposure::General,
        run: kvm_emulated_store,
    },
    Case {
        mechanism: "pti",
        fix: "x86/mm/pti: Clear Global bit more aggressively",
        reference: "Linux 4.18.5; [PATCH 1/7] of Dave Hansen's \"x86/mm/pti: close two Meltdown leaks with Global kernel mapping\" (LKML, 2 Aug 2018)",
        broken: "pti:broken-before-clear-global",
        fixed: "pti:linux",
        machine: "nehalem-i7-920",
        scenario: "every system call of the table, 20 times, on a CPU without PCID",
        exposure: Exposure::General,
        run: pti_syscalls,
    },
    Case {
        mechanism: "xpfo",
        fix: "XPFO v6: \"use flush_tlb_kernel_range() instead of __flush_tlb_one, so we flush the tlb entry on all CPUs when unmapping it in kunmap\"",
        reference: "<20170907173609.22696-4-tycho@docker.com> (v6 3/11)",
        broken: "xpfo:broken-before-flush-kernel-range",
        fixed: "xpfo:immediate",
        machine: "ivybridge-i5-3550",
        scenario: "kmap-two-cpus: two threads kmap the same page of theirs on two CPUs, the last kunmap unmaps it, the other thread returns to user mode",
        exposure: Exposure::Targeted,
        run: xpfo_kmap_two_cpus,
    },
];

fn kvm_emulated_store(variant: &str, m: &MachineProfile, params: &Params) -> Result<Vec<String>> {
    let name = variant.strip_prefix("kvm-cr0wp:").unwrap_or(variant);
    let v = crate::virt::Variant::parse(name).map_err(|e| Error::at("kvm-cr0wp variant", e))?;
    // The built-in guest parameters, on the run's kernel recording.
    let guest = Params::linux().with_recording(params.recording().clone());
    Ok(emulated_store_after_wp_toggle(m, v, &guest)?
        .into_iter()
        .flat_map(|(f, found)| found.into_iter().map(move |w| format!("{}: {w}", f.name())))
        .collect())
}

fn pti_syscalls(variant: &str, m: &MachineProfile, params: &Params) -> Result<Vec<String>> {
    let mut found = vec![];
    for name in syscall::names() {
        let defenses = crate::defense::parse_list(variant)?;
        let mut k = Kernel::boot_with(m.clone(), defenses, params, OracleMode::Every);
        SyscallLoop::new(name, 20)?.run(&mut k)?;
        found.extend(
            k.violations
                .into_iter()
                .map(|v| format!("{name}: {}", v.what)),
        );
    }
    Ok(found)
}

fn xpfo_kmap_two_cpus(variant: &str, m: &MachineProfile, params: &Params) -> Result<Vec<String>> {
    let found = scenario::kmap_two_cpus(m, crate::defense::parse_list(variant)?, params)?;
    Ok(found.into_iter().map(|v| v.what).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_historical_bug_is_caught_and_its_fix_holds() {
        let params = Params::linux();
        for case in ALL {
            let out = case.run(&params).unwrap();
            assert!(!out.broken.is_empty(), "{}: not caught", case.broken);
            assert!(out.fixed.is_empty(), "{}: {:?}", case.fixed, out.fixed);
        }
    }

    /// The variants are marked broken where `kharden defenses` and sweeps look.
    #[test]
    fn historical_variants_are_marked_broken() {
        for case in ALL {
            let broken = match case.broken.strip_prefix("kvm-cr0wp:") {
                Some(v) => crate::virt::Variant::parse(v).unwrap().broken(),
                None => {
                    crate::defense::registry::variant(case.broken)
                        .unwrap()
                        .broken
                }
            };
            assert!(broken, "{}", case.broken);
        }
    }

    /// What each bug looks like to the oracle, as the real reports described it.
    #[test]
    fn each_violation_says_what_the_report_said() {
        let params = Params::linux();
        let first = |i: usize| ALL[i].run(&params).unwrap().broken[0].clone();
        // KVM injected #PF for a store the guest was allowed (the L2 triple fault).
        assert!(first(0).contains("got #PF with CR0.WP=0"), "{}", first(0));
        // Kernel data, global, survives the switch to the user tables.
        let pti = first(1);
        assert!(pti.contains("global TLB entry for kernel"), "{pti}");
        // The alias of the process's page is still in the other CPU's TLB.
        assert!(first(2).contains("direct-map alias"), "{}", first(2));
    }

    /// The PTI leak is what "x86/mm/pti: Clear Global bit more aggressively" says: kernel
    /// data global without PCID; with PCID the old code already cleared G.
    #[test]
    fn the_global_data_leak_needs_a_cpu_without_pcid() {
        let params = Params::linux();
        let m = machine::load("haswell-i7-4770").unwrap();
        assert!(pti_syscalls("pti:broken-before-clear-global", &m, &params)
            .unwrap()
            .is_empty());
        let found = pti_syscalls("pti:broken-before-clear-global,nopcid", &m, &params).unwrap();
        assert!(!found.is_empty());
    }
}
