//! The kernel's virtual address layout (Linux x86-64, Documentation/arch/x86/x86_64/mm.rst,
//! 4-level paging) and the user layout of a typical ELF process.

use crate::arch::x86::VirtAddr;
use crate::kernel::CpuId;

/// Direct mapping of all physical memory (page_offset_base without KASLR).
pub const DIRECT_MAP: u64 = 0xffff_8880_0000_0000;
/// vmalloc space, where Linux puts kernel stacks (CONFIG_VMAP_STACK).
pub const VMALLOC: u64 = 0xffff_c900_0000_0000;
/// cpu_entry_area: per-CPU entry trampoline, entry stack and TSS; mapped in user page tables
/// under PTI.
pub const CPU_ENTRY_AREA: u64 = 0xffff_fe00_0000_0000;
/// Bytes of cpu_entry_area per CPU (entry text page, entry stack page, TSS page, spare).
pub const CPU_ENTRY_AREA_PER_CPU: u64 = 4 * 4096;
/// Kernel image: text from __START_KERNEL_map + 16 MiB, room for the recorded kernel's
/// 18.9 MB of text (kernels/linux-*.toml), in 2 MiB pages (Debian's 6.1 kernel maps 99.95%
/// of its text so, its rodata 90% and its data 100%: scripts/kernel_text_mapping/).
pub const KERNEL_TEXT: u64 = 0xffff_ffff_8100_0000;
pub const KERNEL_TEXT_BYTES: u64 = 20 << 20;
/// Rodata (with .data..ro_after_init): Debian's 6.1 image has 8.9 MiB
/// (kernels/linux-6.1.0-47-amd64-memtrace.toml).
pub const KERNEL_RODATA: u64 = KERNEL_TEXT + KERNEL_TEXT_BYTES;
pub const KERNEL_RODATA_BYTES: u64 = 10 << 20;
/// Data, then bss from `KERNEL_BSS` (Debian's 6.1: 2.3 MiB of data, 17 MiB of bss).
pub const KERNEL_DATA: u64 = KERNEL_RODATA + KERNEL_RODATA_BYTES;
pub const KERNEL_DATA_BYTES: u64 = 30 << 20;
pub const KERNEL_BSS: u64 = KERNEL_DATA + (8 << 20);
/// Kernel stacks are 16 KiB (THREAD_SIZE on x86-64), with a guard gap.
pub const KERNEL_STACK_BYTES: u64 = 16 << 10;
pub const KERNEL_STACK_STRIDE: u64 = 32 << 10;

/// User layout: a non-PIE executable's text, its data, the C library, the stack.
pub const USER_TEXT: u64 = 0x0040_0000;
pub const USER_DATA: u64 = 0x0060_0000;
pub const USER_LIBC: u64 = 0x7fff_f7a0_0000;
pub const USER_STACK_TOP: u64 = 0x7fff_ffff_f000;
/// The heap of simulated processes (brk and large anonymous mappings).
pub const USER_HEAP: u64 = 0x0000_5555_0000_0000;
/// Where anonymous mmap()s of the workload are placed.
pub const USER_MMAP: u64 = 0x7fff_e000_0000;

pub fn cpu_entry_area(cpu: usize) -> VirtAddr {
    VirtAddr(CPU_ENTRY_AREA + cpu as u64 * CPU_ENTRY_AREA_PER_CPU)
}

pub fn kernel_stack(task: usize) -> VirtAddr {
    VirtAddr(VMALLOC + task as u64 * KERNEL_STACK_STRIDE)
}

pub fn direct_map(pa: u64) -> VirtAddr {
    VirtAddr(DIRECT_MAP + pa)
}

/// True for addresses of the kernel image (text, rodata, data).
pub fn in_kernel_text(va: VirtAddr) -> bool {
    (KERNEL_TEXT..KERNEL_TEXT + KERNEL_TEXT_BYTES).contains(&va.0)
}

/// The CPU's per-CPU page. Per-CPU variables live in the kernel image's .data..percpu for the
/// boot CPU and in per-CPU chunks after it; a path touches one page of its CPU's chunk (room
/// for 4096 CPUs below the end of the data segment).
pub fn per_cpu_page(cpu: CpuId) -> VirtAddr {
    VirtAddr(KERNEL_DATA + 0x40_0000 + cpu as u64 * 0x1000)
}
