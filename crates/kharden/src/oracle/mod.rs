//! The security oracle: each defense's property as an invariant checked during a run.

pub mod asi;
pub mod historical;
pub mod pti;
pub mod scenario;
pub mod xpfo;

pub use crate::kernel::hooks::{OracleMode, Violation};

#[cfg(test)]
mod tests {
    use crate::kernel::paths::syscall;
    use crate::kernel::Kernel;
    use crate::oracle::OracleMode;
    use crate::workload::SyscallLoop;
    use crate::{defense, machine};

    /// Runs every syscall of the table under `defenses` on `machine`, checking at every
    /// return to user mode; returns the first violation found.
    fn first_violation(machine: &str, defenses: &str) -> Option<String> {
        first_violation_on(machine::load(machine).unwrap(), defenses)
    }

    fn first_violation_on(m: machine::MachineProfile, defenses: &str) -> Option<String> {
        for name in syscall::names() {
            let mut k = Kernel::boot_with(
                m.clone(),
                defense::parse_list(defenses).unwrap(),
                &crate::params::Params::linux(),
                OracleMode::Every,
            );
            SyscallLoop::new(name, 20).unwrap().run(&mut k).unwrap();
            if let Some(v) = k.violations.first() {
                return Some(format!("{name}: {}", v.what));
            }
        }
        None
    }

    #[test]
    fn correct_pti_variants_pass_with_and_without_pcid() {
        for d in [
            "pti:freebsd",
            "pti:linux",
            "pti:freebsd,nopcid",
            "pti:linux,nopcid",
        ] {
            assert_eq!(first_violation("haswell-i7-4770", d), None, "{d}");
        }
    }

    #[test]
    fn no_pti_is_flagged_only_when_pti_is_claimed() {
        // Without PTI nothing claims isolation: no check runs, no violation.
        assert_eq!(first_violation("haswell-i7-4770", "none"), None);
    }

    #[test]
    fn global_kernel_text_under_pcid_is_caught() {
        let v =
            first_violation("haswell-i7-4770", "pti:broken-global-text").expect("must be caught");
        assert!(v.contains("global TLB entry for kernel"), "{v}");
    }

    #[test]
    fn user_page_tables_mapping_the_kernel_are_caught() {
        let v = first_violation("haswell-i7-4770", "pti:broken-user-maps-kernel")
            .expect("must be caught");
        assert!(v.contains("user page tables map kernel"), "{v}");
    }

    #[test]
    fn forgetting_the_user_pcid_flush_is_caught() {
        let v =
            first_violation("haswell-i7-4770", "pti:broken-no-user-flush").expect("must be caught");
        assert!(v.contains("stale TLB entry"), "{v}");
        // Without INVPCID the correct variant defers the flush to the next exit; it must
        // still be coherent, and the broken one still caught.
        let mut no_invpcid = machine::load("haswell-i7-4770").unwrap();
        no_invpcid.cpu.features.invpcid = false;
        let c = &mut no_invpcid.costs;
        (
            c.invpcid_individual_cycles,
            c.invpcid_single_context_cycles,
            c.invpcid_all_incl_global_cycles,
            c.invpcid_all_non_global_cycles,
        ) = (None, None, None, None);
        no_invpcid.validate().unwrap();
        assert_eq!(first_violation_on(no_invpcid.clone(), "pti:linux"), None);
        assert!(first_violation_on(no_invpcid, "pti:broken-no-user-flush").is_some());
    }

    #[test]
    fn global_text_without_pcid_is_caught_for_freebsd_layout() {
        // Without PCID a global text entry also survives every CR3 write: the broken variant
        // must be caught there too (its user tables do not map the text).
        let v = first_violation("haswell-i7-4770", "pti:broken-global-text,nopcid")
            .expect("must be caught");
        assert!(v.contains("global TLB entry"), "{v}");
    }
}
