//! The kernel model as a KVM guest with EPT (`Kernel::run_in_vm`): its CPUs are vCPUs in
//! VMX non-root operation, one per host CPU, and every TLB miss is a two-dimensional walk
//! (arch/x86/ept.rs). What exits: the EPT violations of first touches, each charged as an
//! exit, KVM's fault handling and an entry. What does not: MOV to CR3 (no CR3-load exiting
//! under EPT), INVLPG and INVPCID (KVM passes both through under EPT), syscalls and the
//! guest's own page faults. Not modelled yet, so refused for workloads that need them:
//! exits on the guest's IPIs (an x2APIC ICR write) and timer (TSC deadline writes), and
//! the guest's CR0 toggles (the ssdd workload's path model has those).

use super::params::KvmCosts;
use super::vmx::VirtHardware;
use super::MmuFlavour;
use crate::arch::x86::ept::Ept;
use crate::arch::x86::PageSize;
use crate::error::{Error, Result};
use crate::machine::MachineProfile;
use crate::params::Params;

pub struct KernelVm {
    pub ept: Ept,
    pub hw: VirtHardware,
    pub costs: KvmCosts,
}

impl KernelVm {
    /// A VM on `m` under KVM's `flavour` MMU, its RAM backed by `backing` host pages.
    pub fn new(
        m: &MachineProfile,
        flavour: MmuFlavour,
        params: &Params,
        backing: PageSize,
    ) -> Result<KernelVm> {
        if !flavour.direct() {
            return Err(Error::new(format!(
                "--mmu {}: the kernel model runs in a guest with EPT/NPT only (tdp or legacy); shadow paging is modelled for the ssdd workload",
                flavour.name()
            )));
        }
        let hw = super::ssdd::check_support(m, flavour)?;
        Ok(KernelVm {
            ept: Ept::new(backing),
            hw,
            costs: KvmCosts::from(params),
        })
    }

    /// Cycles of the exits the EPT violations since the last call took: per violation the
    /// hardware exit and entry, KVM's exit path and its fault handling, and per EPT table
    /// page allocated its clearing.
    pub fn take_exit_cycles(&mut self) -> f64 {
        let (violations, tables) = (self.ept.unpaid_violations, self.ept.unpaid_tables);
        self.ept.unpaid_violations = 0;
        self.ept.unpaid_tables = 0;
        let per_exit = self.hw.vmexit_cycles
            + self.hw.vmentry_cycles
            + self.costs.exit_software_cycles
            + self.costs.ept_violation_cycles;
        violations as f64 * per_exit + tables as f64 * self.costs.table_alloc_cycles
    }
}

/// `--ept-page`: the host page size backing guest RAM.
pub fn parse_backing(s: &str) -> Result<PageSize> {
    match s {
        "4k" => Ok(PageSize::Size4K),
        "2m" => Ok(PageSize::Size2M),
        "1g" => Ok(PageSize::Size1G),
        other => Err(Error::new(format!(
            "--ept-page: expected 4k, 2m or 1g, got \"{other}\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86::PageSize;
    use crate::kernel::Kernel;
    use crate::oracle::OracleMode;
    use crate::sim::Counter;
    use crate::workload::SyscallLoop;

    /// ns per getppid and the loop's stats under FreeBSD-style PTI without PCID (every
    /// entry and exit flushes the TLB), bare metal or in a guest backed by `backing` pages.
    fn getppid(backing: Option<PageSize>) -> (f64, crate::sim::Stats) {
        let m = crate::machine::load("skylake-i7-6700k").unwrap();
        let params = Params::linux();
        let defenses = crate::defense::parse_list("pti:freebsd,nopcid").unwrap();
        let mut k = Kernel::boot_with(m.clone(), defenses, &params, OracleMode::Every);
        if let Some(b) = backing {
            k.run_in_vm(KernelVm::new(&m, MmuFlavour::Tdp, &params, b).unwrap());
        }
        let mut lp = SyscallLoop::new("getppid", 2000).unwrap();
        lp.start(&mut k).unwrap();
        for _ in 0..lp.warmup {
            lp.measure(&mut k, 1).unwrap();
        }
        let r = lp.measure(&mut k, 2000).unwrap();
        assert!(k.violations.is_empty(), "PTI holds in the guest too");
        (r.elapsed.secs() * 1e9 / 2000.0, r.stats)
    }

    #[test]
    fn small_ept_pages_make_every_refill_a_longer_walk() {
        let (bare, bare_stats) = getppid(None);
        let (thp, thp_stats) = getppid(Some(PageSize::Size2M));
        let (small, small_stats) = getppid(Some(PageSize::Size4K));
        // Backed by 2 MiB pages, the loop's guest-physical pages all fit the mapping cache:
        // the same walks as on bare metal, and no exit once warm.
        assert_eq!(
            thp_stats.counter(Counter::PageWalks),
            bare_stats.counter(Counter::PageWalks)
        );
        assert_eq!(thp_stats.counter(Counter::EptViolations), 0);
        assert!((thp - bare).abs() < 1e-9, "{thp} vs {bare}");
        // Backed by 4 KiB pages: 2 MiB guest mappings splinter into more TLB entries, and
        // the guest-physical pages overflow the mapping cache, so refills walk the EPT.
        assert!(small_stats.counter(Counter::PageWalks) > bare_stats.counter(Counter::PageWalks));
        assert!(small_stats.counter(Counter::EptWalks) > 0);
        assert!(small > bare * 1.2, "{small} vs {bare}");
    }

    #[test]
    fn impossible_guests_are_one_line_errors() {
        let params = Params::linux();
        let sky = crate::machine::load("skylake-i7-6700k").unwrap();
        let e = KernelVm::new(&sky, MmuFlavour::Shadow, &params, PageSize::Size2M);
        assert!(e.err().unwrap().to_string().contains("EPT/NPT only"));
        let no_virt = crate::machine::load("xeon-e5-2690v3-2s").unwrap();
        let e = KernelVm::new(&no_virt, MmuFlavour::Tdp, &params, PageSize::Size2M);
        assert!(e.err().unwrap().to_string().contains("[virt]"));
        assert!(parse_backing("3m").is_err());
    }
}
