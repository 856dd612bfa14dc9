//! The speculation mitigations in a recorded path's work, and which of them a simulated
//! kernel runs (docs/design/footprints.md section 5).
//!
//! The recording host's kernel ran retpolines on every indirect call and SRSO's Safe RET
//! return thunk on every return; both are in each path's measured latency and so in its
//! work. A path's footprint counts its returns and indirect calls, the host's profile says
//! what one of each costs there, and a kernel that did not run a mitigation runs its paths
//! without that share of their work.

use crate::machine::{Arch, MachineProfile};

/// A mitigation a recording's kernel may have run on its paths (`kernel.speculation_mitigations`
/// of a footprint file names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mitigation {
    /// Every indirect call through a retpoline thunk (spectre_v2=retpoline).
    Retpoline,
    /// Every return through SRSO's Safe RET thunk (spec_rstack_overflow=safe-ret, AMD Zen 1-4).
    SafeRet,
}

impl Mitigation {
    pub const ALL: [Mitigation; 2] = [Mitigation::Retpoline, Mitigation::SafeRet];

    /// Its name in a footprint file.
    pub fn name(self) -> &'static str {
        match self {
            Mitigation::Retpoline => "retpoline",
            Mitigation::SafeRet => "safe-ret",
        }
    }

    pub fn named(name: &str) -> Option<Mitigation> {
        Mitigation::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// What a simulated kernel runs of the recording's mitigations: the parameter
/// `kernel.speculation_mitigations` names it in kebab case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelMitigations {
    /// Decided by the machine: a profile `machine detect` wrote (it has `measured` readings)
    /// describes a host running a current kernel, taken to run what the recording's ran; an
    /// arm64 machine runs neither (they are x86 thunks); any other x86 machine runs
    /// retpolines only, Linux's choice on Intel parts without enhanced IBRS from 4.15 on.
    Auto,
    /// Everything the recording's kernel ran.
    Recorded,
    /// Retpolines, no return thunk.
    Retpoline,
    /// Neither (mitigations=off, or a kernel of before 2018).
    None,
}

impl KernelMitigations {
    pub const WORDS: [&'static str; 4] = ["auto", "recorded", "retpoline", "none"];

    pub fn named(word: &str) -> Option<KernelMitigations> {
        let all = [
            KernelMitigations::Auto,
            KernelMitigations::Recorded,
            KernelMitigations::Retpoline,
            KernelMitigations::None,
        ];
        KernelMitigations::WORDS
            .iter()
            .position(|w| *w == word)
            .map(|i| all[i])
    }

    /// Whether a kernel of this choice on `machine` runs `m` (when the recording ran it).
    pub fn runs(self, m: Mitigation, machine: &MachineProfile) -> bool {
        match self {
            KernelMitigations::Auto if machine.measured.is_some() => true,
            KernelMitigations::Auto if machine.arch == Arch::Aarch64 => false,
            KernelMitigations::Auto => m == Mitigation::Retpoline,
            KernelMitigations::Recorded => true,
            KernelMitigations::Retpoline => m == Mitigation::Retpoline,
            KernelMitigations::None => false,
        }
    }
}

/// The recording host's cycles of a path's work that each mitigation took, beyond the
/// empty syscall's (whose own share a target charges as its syscall round trip).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MitigationCycles {
    pub retpoline: f64,
    pub safe_ret: f64,
}

impl MitigationCycles {
    pub fn of(&self, m: Mitigation) -> f64 {
        match m {
            Mitigation::Retpoline => self.retpoline,
            Mitigation::SafeRet => self.safe_ret,
        }
    }

    /// `work`, the recording host's cycles, less the mitigations a kernel of `choice` on
    /// `machine` does not run.
    pub fn work_without_unrun(
        &self,
        work: f64,
        choice: KernelMitigations,
        machine: &MachineProfile,
    ) -> f64 {
        let unrun: f64 = Mitigation::ALL
            .into_iter()
            .filter(|&m| !choice.runs(m, machine))
            .map(|m| self.of(m))
            .sum();
        (work - unrun).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str) -> MachineProfile {
        crate::machine::load(name).unwrap()
    }

    /// The seeds' Intel machines keep retpolines and lose Safe RET; the recording host, whose
    /// profile has `machine detect` readings, keeps both; arm64 keeps neither.
    #[test]
    fn auto_runs_what_each_machines_kernel_ran() {
        let auto = KernelMitigations::Auto;
        let runs = |m: &str| {
            let p = machine(m);
            Mitigation::ALL.map(|x| auto.runs(x, &p))
        };
        assert_eq!(runs("xeon-platinum-8160"), [true, false]);
        assert_eq!(runs("recording-host-epyc-zen4-kvm"), [true, true]);
        assert_eq!(runs("thunderx2-cn9980-2s"), [false, false]);
    }

    #[test]
    fn work_loses_only_what_the_kernel_does_not_run_and_never_goes_negative() {
        let c = MitigationCycles {
            retpoline: 30.0,
            safe_ret: 100.0,
        };
        let intel = machine("xeon-platinum-8160");
        for (work, choice, kept) in [
            (500.0, KernelMitigations::Auto, 400.0),
            (500.0, KernelMitigations::Recorded, 500.0),
            (500.0, KernelMitigations::None, 370.0),
            (50.0, KernelMitigations::None, 0.0),
        ] {
            assert_eq!(
                c.work_without_unrun(work, choice, &intel),
                kept,
                "{choice:?}"
            );
        }
    }

    #[test]
    fn every_word_names_a_choice_and_a_mitigation_name_round_trips() {
        for w in KernelMitigations::WORDS {
            assert!(KernelMitigations::named(w).is_some(), "{w}");
        }
        for m in Mitigation::ALL {
            assert_eq!(Mitigation::named(m.name()), Some(m));
        }
    }
}
