//! rt-tests' ssdd on the kernel model in a one-vCPU KVM guest (virt/kernel_guest.rs): boots
//! the kernel with KERNEXEC, puts it in the VM, runs the workload (workload/ssdd.rs) and
//! reports its time and the VM's exits and MMU work per step.

use super::kernel_guest::{KernelVm, VmCounts};
use super::kvm_mmu::{MmuStats, Variant};
use super::MmuFlavour;
use crate::arch::x86::PageSize;
use crate::error::{Error, Result};
use crate::machine::MachineProfile;
use crate::params::Params;

/// A guest of one vCPU on `m`: the host's caches, TLBs and latencies, one CPU. (ssdd's
/// TDP rows need the last reference to a root to go at each toggle, so one vCPU: see
/// docs/design/kvm.md, "vCPUs".)
pub fn one_vcpu(m: &MachineProfile) -> MachineProfile {
    let mut g = m.clone();
    g.topology.sockets = 1;
    g.topology.cores_per_socket = 1;
    g.topology.threads_per_core = 1;
    g.topology.numa_nodes_per_socket = 1;
    g
}

/// What a kernel-model ssdd run measured, per step.
pub struct KernelSsdd {
    /// The benchmark's seconds: the steps of every pair on the one vCPU.
    pub seconds: f64,
    pub per_step: crate::workload::ssdd::SsddRun,
    pub counts: VmCounts,
    pub mmu: MmuStats,
}

/// rt-tests' ssdd (`pairs` x `steps_per_pair` steps) on the kernel model with KERNEXEC, in
/// a one-vCPU KVM guest on `m` with `flavour` and `variant`; `sample` steps are simulated
/// after `warmup`, and the benchmark's time is their mean times every step.
#[allow(clippy::too_many_arguments)]
pub fn run_ssdd(
    m: &MachineProfile,
    flavour: MmuFlavour,
    variant: Variant,
    params: &Params,
    backing: PageSize,
    guest_work_cycles: f64,
    (pairs, steps_per_pair): (u64, u64),
    (warmup, sample): (u64, u64),
) -> Result<KernelSsdd> {
    let guest = one_vcpu(m);
    let vm = KernelVm::new(&guest, flavour, variant, params, backing)?;
    let defenses = crate::defense::parse_list("kernexec")?;
    let mut k = crate::kernel::Kernel::boot_with(
        guest,
        defenses,
        params,
        crate::oracle::OracleMode::default(),
    );
    k.run_in_vm(vm);
    let mut ssdd = crate::workload::ssdd::Ssdd::start(&mut k, pairs)?;
    ssdd.guest_work_cycles = guest_work_cycles;
    ssdd.run(&mut k, warmup)?;
    let vm = k.vm_as::<KernelVm>().expect("runs in a VM");
    let (counts0, mmu0) = (vm.counts.clone(), vm.mmu.stats.clone());
    let per_step = ssdd.run(&mut k, sample)?;
    if let Some(v) = k.violations.first() {
        return Err(Error::new(format!(
            "ssdd: security oracle violation: {}",
            v.what
        )));
    }
    let vm = k.vm_as::<KernelVm>().expect("runs in a VM");
    let mut counts = vm.counts.clone();
    for (a, b) in counts.exits.iter_mut().zip(counts0.exits) {
        *a -= b;
    }
    counts.cr0_writes -= counts0.cr0_writes;
    counts.flushes -= counts0.flushes;
    let mmu = super::ssdd::diff(&vm.mmu.stats, &mmu0);
    let steps = (pairs * steps_per_pair) as f64;
    Ok(KernelSsdd {
        seconds: per_step.elapsed.secs() / sample as f64 * steps,
        per_step,
        counts,
        mmu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Counter;

    fn ssdd(mmu: MmuFlavour, variant: Variant) -> KernelSsdd {
        let m = crate::machine::load("skylake-i7-6700k").unwrap();
        let p = Params::linux();
        run_ssdd(
            &m,
            mmu,
            variant,
            &p,
            PageSize::Size2M,
            0.0,
            (10, 10000),
            (20, 50),
        )
        .unwrap()
    }

    /// The seed's mechanism on the kernel model: KERNEXEC's toggles at each of the step's
    /// two switches exit; without the patch each unloads the root, which the TDP MMU then
    /// zaps (one vCPU, last reference) and rebuilds through EPT violations, while the legacy
    /// MMU finds it again; with the patch the roots stay; a guest-owned WP does not exit.
    #[test]
    fn cr0_toggles_unload_and_rebuild_roots_as_kvm_does() {
        let n = 50.0;
        let per = |v: u64| v as f64 / n;
        let tdp = ssdd(MmuFlavour::Tdp, Variant::Base);
        let pairs = Params::linux().num("guest.wp_pairs_per_context_switch");
        assert_eq!(per(tdp.counts.cr0_writes), 2.0 * 2.0 * pairs);
        assert_eq!(per(tdp.counts.exits[0]), per(tdp.counts.cr0_writes));
        assert_eq!(per(tdp.counts.exits[1]), 1.0, "the #DB");
        assert_eq!(per(tdp.mmu.roots_built), per(tdp.counts.cr0_writes));
        assert!(tdp.per_step.stats.counter(Counter::EptViolations) > 0);
        let legacy = ssdd(MmuFlavour::Legacy, Variant::Base);
        assert_eq!(legacy.mmu.roots_built, 0);
        assert_eq!(legacy.per_step.stats.counter(Counter::EptViolations), 0);
        assert!(tdp.seconds > legacy.seconds);
        let patched = ssdd(MmuFlavour::Tdp, Variant::KeepRoots);
        assert_eq!((patched.mmu.roots_freed, patched.counts.flushes), (0, 0));
        assert!(patched.seconds < legacy.seconds);
        let owned = ssdd(MmuFlavour::Tdp, Variant::GuestOwnedWp);
        assert_eq!(owned.counts.exits[0], 0);
        assert!(owned.seconds < patched.seconds);
    }

    #[test]
    fn the_kernel_model_runs_ssdd_on_one_vcpu_only() {
        let m = crate::machine::load("skylake-i7-6700k").unwrap();
        let mut k = crate::kernel::Kernel::boot(m, vec![]);
        let e = crate::workload::ssdd::Ssdd::start(&mut k, 10)
            .err()
            .unwrap();
        assert!(e.to_string().contains("one vCPU"), "{e}");
    }
}
