//! The per-CPU PGD guest (guest.per_cpu_pgd): the clone of the user PGD entries at every
//! process switch is a run of plain stores under EPT and, under shadow paging, a write to a
//! write-protected guest page table per entry.

use super::guest::USER_PGD_SLOTS;
use super::{run_ssdd, MmuFlavour, SsddConfig, Variant};

fn run(flavour: MmuFlavour, per_cpu_pgd: bool) -> super::SsddResult {
    let m = crate::machine::load("skylake-i7-6700k").unwrap();
    let mut cfg = SsddConfig::new(flavour, Variant::Base, &crate::params::Params::linux());
    cfg.warmup_steps = 10;
    cfg.sample_steps = 20;
    cfg.oracle = true;
    cfg.guest.per_cpu_pgd = per_cpu_pgd;
    run_ssdd(&m, &cfg).unwrap()
}

#[test]
fn shadow_paging_faults_on_every_cloned_entry_and_ept_on_none() {
    let shadow = run(MmuFlavour::Shadow, true);
    assert!(shadow.violations.is_empty(), "{:?}", shadow.violations);
    // Two process switches per step, each cloning every user PGD entry.
    let n = shadow.measured_steps;
    assert_eq!(shadow.counts.pt_write_faults, 2 * USER_PGD_SLOTS as u64 * n);
    // Each write is emulated at once (a MOV: no retry, no unprotect), and the root stays:
    // the write-flooding count that would zap it is cleared by every fault's shadow walk.
    assert_eq!(shadow.mmu.roots_zapped, 0);
    assert!(shadow.per_step.emulation > 0.0);
    // The slots the processes use (text and data low, the stack high) were present in the
    // root: their zap flushes the TLB; the other 254 or so were empty.
    // A zapped user slot's child shadow table is linked again by the next fault through it,
    // lower SPTEs intact: one shadow #PF per slot a process touches after its switch in.
    let n_pf = shadow.counts.shadow_pf;
    assert!(n_pf <= 4 * n, "{n_pf} shadow #PFs in {n} steps");
    let flushes = shadow.counts.pt_write_flushes;
    assert!(
        flushes >= 2 * n && flushes <= 8 * n,
        "{flushes} flushes in {n} steps"
    );
    // KVM walks the guest's tables in software three times per emulated write (the fault's
    // walk_addr, the instruction fetch, the write's gva_to_gpa: no GPA from the exit under
    // shadow paging), three levels each down to the 2 MiB leaves over the PGD and the
    // text, and once per shadow #PF, four levels down to a user page's 4 KiB leaf.
    let writes = shadow.counts.pt_write_faults;
    assert_eq!(shadow.counts.sw_walks, 3 * writes + n_pf);
    assert_eq!(shadow.counts.sw_walk_levels, 9 * writes + 4 * n_pf);
    let plain = run(MmuFlavour::Shadow, false);
    assert_eq!(plain.counts.pt_write_faults, 0);
    assert!(shadow.seconds > 5.0 * plain.seconds);
    for f in [MmuFlavour::Legacy, MmuFlavour::Tdp] {
        let r = run(f, true);
        assert!(r.violations.is_empty(), "{f:?}: {:?}", r.violations);
        assert_eq!(
            r.counts.pt_write_faults, 0,
            "{f:?}: EPT does not protect guest tables"
        );
    }
}

#[test]
fn the_cpu_pgd_holds_the_running_process_user_half() {
    let p = crate::virt::params::GuestParams {
        per_cpu_pgd: true,
        ..crate::virt::params::GuestParams::from(&crate::params::Params::linux())
    };
    let mut g = super::guest::Guest::build(&p, 2, 1);
    let pgd = g.cpu_pgd.unwrap();
    assert_eq!(g.root_of(3), pgd, "every process runs on the CPU's PGD");
    for slot in 0..USER_PGD_SLOTS {
        g.clone_pgd_slot(3, slot);
    }
    for slot in 0..512 {
        let want = if slot < USER_PGD_SLOTS {
            g.procs[3].root
        } else {
            pgd
        };
        assert_eq!(g.mem.read(pgd, slot), g.mem.read(want, slot), "slot {slot}");
    }
}

/// On SVM the guest cannot own CR0.WP: KVM's selective CR0 write intercept makes every toggle
/// exit, so "guest-owned" runs as the seed's patch does; on VMX with EPT no toggle exits.
#[test]
fn only_vmx_lets_the_guest_own_cr0_wp() {
    let run_on = |machine: &str, variant| {
        let m = crate::machine::load(machine).unwrap();
        let mut cfg = SsddConfig::new(MmuFlavour::Tdp, variant, &crate::params::Params::linux());
        cfg.warmup_steps = 10;
        cfg.sample_steps = 20;
        cfg.oracle = true;
        let r = run_ssdd(&m, &cfg).unwrap();
        assert!(r.violations.is_empty(), "{machine}: {:?}", r.violations);
        r
    };
    let cr_exits =
        |r: &super::SsddResult| r.counts.exits[super::vmx::ExitReason::CrAccess as usize];
    let vmx = run_on("skylake-i7-6700k", Variant::GuestOwnedWp);
    assert_eq!(cr_exits(&vmx), 0);
    let svm = run_on("epyc-7763-2s", Variant::GuestOwnedWp);
    assert_eq!(cr_exits(&svm), svm.counts.cr0_writes);
    assert!(svm.counts.cr0_writes > 0);
    let patch = run_on("epyc-7763-2s", Variant::KeepRoots);
    assert_eq!(svm.seconds, patch.seconds);
}
