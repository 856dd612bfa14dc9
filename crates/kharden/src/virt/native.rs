//! A minimal guest driven through the KVM API on this host: 16-bit code that toggles
//! CR0.WP in a loop of `toggles_per_exit` writes, then leaves through an OUT to port 0x10;
//! the host times the KVM_RUN round trips. What each toggle costs here depends on the host
//! kernel: since Linux 6.4 (VMX, with EPT) the guest owns CR0.WP and the write does not
//! exit; on SVM every toggle exits through the selective CR0 write intercept KVM always sets.
//! The same loop with a register move in place of the CR0 write is timed too: a host that
//! cannot run real-mode code directly (no unrestricted guest, or a software flavour of
//! /dev/kvm) emulates every guest instruction, and then that loop is as slow as the other.

use crate::error::{Error, Result};
use std::time::Instant;

const KVM_CREATE_VM: libc::c_ulong = 0xAE01;
const KVM_GET_VCPU_MMAP_SIZE: libc::c_ulong = 0xAE04;
const KVM_CREATE_VCPU: libc::c_ulong = 0xAE41;
/// _IOW(KVMIO, 0x46, struct kvm_userspace_memory_region) (32 bytes).
const KVM_SET_USER_MEMORY_REGION: libc::c_ulong = 0x4020_AE46;
const KVM_RUN: libc::c_ulong = 0xAE80;
const KVM_EXIT_IO: u32 = 2;
/// Guest memory: the 64 KiB below 4 GiB, so the reset vector (CS base 0xffff0000, IP
/// 0xfff0) is in it and no register setup is needed.
const MEM_GPA: u64 = 0xffff_0000;
const MEM_SIZE: usize = 0x1_0000;

#[repr(C)]
struct MemoryRegion {
    slot: u32,
    flags: u32,
    guest_phys_addr: u64,
    memory_size: u64,
    userspace_addr: u64,
}

/// What the native run measured.
#[derive(Debug, Clone)]
pub struct NativeResult {
    pub toggles: u64,
    /// ns per CR0.WP write beyond the same loop without it.
    pub ns_per_toggle: f64,
    /// ns per iteration of the loop with `mov ebx, eax` in place of `mov cr0, eax`: a few
    /// cycles where the guest runs on the CPU, hundreds of ns where the host emulates it.
    pub ns_per_plain_iteration: f64,
    /// ns per KVM_RUN round trip with no toggles (the OUT exit alone), subtracted above.
    pub ns_per_io_exit: f64,
}

struct Fd(libc::c_int);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned by this value and closed once.
        unsafe { libc::close(self.0) };
    }
}

fn sys(what: &str, r: libc::c_int) -> Result<libc::c_int> {
    if r < 0 {
        Err(Error::new(format!(
            "kvm bench: {what}: {}",
            std::io::Error::last_os_error()
        )))
    } else {
        Ok(r)
    }
}

/// The guest's code at offset 0 of the 64 KiB segment, and the reset-vector jump to it;
/// without `write_cr0` the loop moves EAX to EBX instead (the same length and count).
fn guest_code(toggles_per_exit: u32, write_cr0: bool) -> Vec<u8> {
    let mut code = vec![];
    // start: mov ecx, N
    code.extend([0x66, 0xB9]);
    code.extend(toggles_per_exit.to_le_bytes());
    // loop: mov eax, cr0 / xor eax, 0x10000 (WP) / mov cr0, eax (or mov ebx, eax) /
    // dec ecx / jnz loop
    let lp = code.len();
    code.extend([0x0F, 0x20, 0xC0, 0x66, 0x35, 0x00, 0x00, 0x01, 0x00]);
    code.extend(if write_cr0 {
        [0x0F, 0x22, 0xC0]
    } else {
        [0x66, 0x89, 0xC3]
    });
    code.extend([0x66, 0x49, 0x75]);
    code.push((lp as i32 - (code.len() as i32 + 1)) as u8);
    // out 0x10, al / jmp start
    code.extend([0xE6, 0x10, 0xEB]);
    code.push((0i32 - (code.len() as i32 + 1)) as u8);
    code
}

/// Runs the guest for `exits` KVM_RUN round trips of `toggles_per_exit` loop iterations.
fn time_runs(toggles_per_exit: u32, write_cr0: bool, exits: u64) -> Result<f64> {
    let kvm = std::ffi::CString::new("/dev/kvm").unwrap();
    // SAFETY: plain syscalls on descriptors this function owns; the shared kvm_run page is
    // mapped with the size KVM reports and unmapped before return, the guest memory is a
    // host_mem::Map that lives until then.
    unsafe {
        let sys_fd = Fd(sys(
            "open /dev/kvm",
            libc::open(kvm.as_ptr(), libc::O_RDWR),
        )?);
        let vm = Fd(sys(
            "KVM_CREATE_VM",
            libc::ioctl(sys_fd.0, KVM_CREATE_VM, 0),
        )?);
        let guest_mem = crate::host_mem::Map::new(MEM_SIZE, false)
            .ok_or_else(|| Error::new("kvm bench: mmap of guest memory failed"))?;
        let mem = guest_mem.ptr;
        let code = guest_code(toggles_per_exit, write_cr0);
        std::ptr::copy_nonoverlapping(code.as_ptr(), mem, code.len());
        // Reset vector at 0xfff0: jmp near to offset 0 (E9 rel16).
        let rel = (0i32 - 0xfff3) as i16;
        let jump = [0xE9, rel as u8, (rel >> 8) as u8];
        std::ptr::copy_nonoverlapping(jump.as_ptr(), mem.add(0xfff0), 3);
        let region = MemoryRegion {
            slot: 0,
            flags: 0,
            guest_phys_addr: MEM_GPA,
            memory_size: MEM_SIZE as u64,
            userspace_addr: mem as u64,
        };
        let r = libc::ioctl(vm.0, KVM_SET_USER_MEMORY_REGION, &region);
        (|| {
            sys("KVM_SET_USER_MEMORY_REGION", r)?;
            let vcpu = Fd(sys(
                "KVM_CREATE_VCPU",
                libc::ioctl(vm.0, KVM_CREATE_VCPU, 0),
            )?);
            let size = sys(
                "KVM_GET_VCPU_MMAP_SIZE",
                libc::ioctl(sys_fd.0, KVM_GET_VCPU_MMAP_SIZE, 0),
            )? as usize;
            let run = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                vcpu.0,
                0,
            );
            if run == libc::MAP_FAILED {
                return Err(Error::new("kvm bench: mmap of kvm_run failed"));
            }
            let exit_reason = (run as *const u8).add(8) as *const u32;
            let go = || -> Result<()> {
                sys("KVM_RUN", libc::ioctl(vcpu.0, KVM_RUN, 0))?;
                let reason = std::ptr::read_volatile(exit_reason);
                if reason != KVM_EXIT_IO {
                    return Err(Error::new(format!(
                        "kvm bench: guest exited with reason {reason}, expected KVM_EXIT_IO (2)"
                    )));
                }
                Ok(())
            };
            // Warm up (the first run includes vCPU setup), then time.
            for _ in 0..16 {
                go()?;
            }
            let t = Instant::now();
            for _ in 0..exits {
                go()?;
            }
            let ns = t.elapsed().as_nanos() as f64 / exits as f64;
            libc::munmap(run, size);
            Ok(ns)
        })()
    }
}

/// Times CR0.WP toggles natively: round trips with `toggles_per_exit` iterations minus the
/// same round trips with one, per extra iteration, with and without the CR0 write.
pub fn bench(toggles_per_exit: u32, exits: u64) -> Result<NativeResult> {
    if toggles_per_exit < 2 {
        return Err(Error::new("kvm bench: --toggles must be at least 2"));
    }
    let per_iteration = |write_cr0| -> Result<(f64, f64)> {
        let base = time_runs(1, write_cr0, exits)?;
        let loaded = time_runs(toggles_per_exit, write_cr0, exits)?;
        Ok(((loaded - base) / (toggles_per_exit - 1) as f64, base))
    };
    let (toggle_iteration, base) = per_iteration(true)?;
    let (plain_iteration, _) = per_iteration(false)?;
    Ok(NativeResult {
        toggles: toggles_per_exit as u64 * exits,
        ns_per_toggle: toggle_iteration - plain_iteration,
        ns_per_plain_iteration: plain_iteration,
        ns_per_io_exit: base,
    })
}
