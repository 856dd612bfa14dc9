//! An ssdd run as `kharden run --workload ssdd` and a sweep file's ssdd points choose it:
//! KVM's MMU and CR0 variant, the guest model, vCPUs and the EPT page size, checked
//! together, and the run they choose (the path-model guest of ssdd.rs, or the kernel model
//! of kernel_guest.rs). Both callers go through here, so a point of a sweep is the run
//! `kharden run` makes with the same words.

use super::kernel_guest::GuestVmOptions;
use super::kernel_ssdd::{self, KernelSsdd};
use super::kvm_mmu::MmuStats;
use super::params::GuestParams;
use super::ssdd::{run_ssdd, SsddConfig, SsddResult};
use super::{MmuFlavour, Variant};
use crate::arch::x86::PageSize;
use crate::error::{Error, Result};
use crate::machine::MachineProfile;
use crate::params::Params;

/// The guest that runs ssdd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestModel {
    /// The ssdd path model (virt/guest.rs): any MMU, any vCPU count.
    Path,
    /// The kernel model itself with KERNEXEC, one vCPU, under EPT/NPT.
    Kernel,
}

impl GuestModel {
    pub fn parse(s: &str) -> Result<GuestModel> {
        match s {
            "path" => Ok(GuestModel::Path),
            "kernel" => Ok(GuestModel::Kernel),
            other => Err(Error::new(format!(
                "expected path or kernel, got \"{other}\""
            ))),
        }
    }
}

/// The options as words, as the command line or a sweep file gives them, each None when not
/// given: the TDP MMU, the base variant, the path-model guest on one vCPU, and for the
/// kernel-model guest 2 MiB EPT pages.
#[derive(Debug, Clone, Copy, Default)]
pub struct SsddWords<'a> {
    pub mmu: Option<&'a str>,
    pub kvm_variant: Option<&'a str>,
    pub guest_model: Option<&'a str>,
    pub vcpus: Option<u64>,
    pub ept_page: Option<&'a str>,
}

/// KVM_MAX_VCPUS on x86 (Linux 6.x).
const MAX_VCPUS: u64 = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SsddOptions {
    pub flavour: MmuFlavour,
    pub variant: Variant,
    pub guest: GuestModel,
    pub vcpus: u64,
    /// Host pages backing guest RAM (the kernel model's EPT leaf size).
    pub backing: PageSize,
}

impl SsddOptions {
    /// Parses and checks the options; an error names the option as `name` spells it
    /// (`--mmu` on the command line, `mmu` in a sweep file).
    pub fn parse(w: &SsddWords, name: impl Fn(&str) -> String) -> Result<SsddOptions> {
        let at = |option: &str, e: Error| Error::at(name(option), e);
        let (flavour, variant) = super::kvm_mmu::parse_kvm(w.mmu, w.kvm_variant, &name)?;
        let guest =
            GuestModel::parse(w.guest_model.unwrap_or("path")).map_err(|e| at("guest_model", e))?;
        let vcpus = w.vcpus.unwrap_or(1);
        if !(1..=MAX_VCPUS).contains(&vcpus) {
            return Err(at(
                "vcpus",
                Error::new(format!("expected 1..{MAX_VCPUS}, got {vcpus}")),
            ));
        }
        let mut backing = PageSize::Size2M;
        if guest == GuestModel::Kernel {
            let vm = GuestVmOptions::with(flavour, variant, w.ept_page, &name)?;
            backing = vm.backing;
            if vcpus != 1 {
                return Err(at(
                    "vcpus",
                    Error::new("the kernel-model guest runs ssdd on one vCPU"),
                ));
            }
        } else if w.ept_page.is_some() {
            return Err(at(
                "ept_page",
                Error::new(
                    "sets the kernel-model guest's EPT pages; the path model maps guest RAM itself",
                ),
            ));
        }
        Ok(SsddOptions {
            flavour,
            variant,
            guest,
            vcpus,
            backing,
        })
    }

    /// Runs ssdd on `m` with `params` (the guest's work per step, KVM's costs).
    pub fn run(&self, m: &MachineProfile, params: &Params) -> Result<SsddOutcome> {
        let guest = GuestParams::from(params);
        match self.guest {
            GuestModel::Path => {
                let mut cfg = SsddConfig::new(self.flavour, self.variant, params);
                cfg.vcpus = self.vcpus;
                Ok(SsddOutcome::Path(Box::new(run_ssdd(m, &cfg)?)))
            }
            GuestModel::Kernel => Ok(SsddOutcome::Kernel(Box::new(kernel_ssdd::run_ssdd(
                m,
                self.flavour,
                self.variant,
                params,
                self.backing,
                guest.guest_work_cycles_per_step,
                (guest.pairs, guest.steps_per_pair),
                (200, 1000),
            )?))),
        }
    }
}

/// What either guest's run measured.
pub enum SsddOutcome {
    Path(Box<SsddResult>),
    Kernel(Box<KernelSsdd>),
}

impl SsddOutcome {
    /// The benchmark's run time, seconds.
    pub fn seconds(&self) -> f64 {
        match self {
            SsddOutcome::Path(r) => r.seconds,
            SsddOutcome::Kernel(r) => r.seconds,
        }
    }
    /// Steps simulated after the warm-up: the counts below are theirs.
    pub fn measured_steps(&self) -> u64 {
        match self {
            SsddOutcome::Path(r) => r.measured_steps,
            SsddOutcome::Kernel(r) => r.per_step.steps,
        }
    }
    /// Exits by reason, in ExitReason::ALL order.
    pub fn exits(&self) -> [u64; 3] {
        match self {
            SsddOutcome::Path(r) => r.counts.exits,
            SsddOutcome::Kernel(r) => r.counts.exits,
        }
    }
    pub fn cr0_writes(&self) -> u64 {
        match self {
            SsddOutcome::Path(r) => r.counts.cr0_writes,
            SsddOutcome::Kernel(r) => r.counts.cr0_writes,
        }
    }
    pub fn mmu(&self) -> &MmuStats {
        match self {
            SsddOutcome::Path(r) => &r.mmu,
            SsddOutcome::Kernel(r) => &r.mmu,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words<'a>(mmu: &'a str, guest: &'a str, vcpus: u64, ept: Option<&'a str>) -> SsddWords<'a> {
        SsddWords {
            mmu: Some(mmu),
            kvm_variant: None,
            guest_model: Some(guest),
            vcpus: Some(vcpus),
            ept_page: ept,
        }
    }

    #[test]
    fn options_are_checked_together_and_errors_name_the_option() {
        let flag = |o: &str| format!("--{}", o.replace('_', "-"));
        let err = |w: SsddWords| SsddOptions::parse(&w, flag).unwrap_err().to_string();
        assert!(SsddOptions::parse(&words("tdp", "kernel", 1, Some("4k")), flag).is_ok());
        assert!(SsddOptions::parse(&words("shadow", "path", 4, None), flag).is_ok());
        assert!(err(words("ept", "path", 1, None)).starts_with("--mmu: expected legacy"));
        assert!(err(words("tdp", "vm", 1, None)).starts_with("--guest-model: expected path"));
        assert!(err(words("tdp", "path", 0, None)).starts_with("--vcpus: expected 1..1024"));
        assert!(err(words("tdp", "kernel", 2, None)).contains("one vCPU"));
        assert!(err(words("shadow", "kernel", 1, None)).starts_with("--mmu: the kernel-model"));
        assert!(err(words("tdp", "path", 1, Some("2m"))).starts_with("--ept-page: sets"));
        assert!(err(words("tdp", "kernel", 1, Some("3m"))).starts_with("--ept-page: expected 4k"));
        let v = SsddWords {
            kvm_variant: Some("fast"),
            ..words("tdp", "path", 1, None)
        };
        assert!(err(v).starts_with("--kvm-variant: expected base"));
    }
}
