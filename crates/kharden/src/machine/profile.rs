//! The machine profile: hardware facts only, one TOML file per machine in `machines/`.
//!
//! Every field is a fact about the hardware (a datasheet value, a published measurement or a
//! `kharden machine detect` reading); the TOML files carry the source of each number as a
//! comment. Nothing here may be tuned to a reproduction target.

use serde::{Deserialize, Serialize};

/// Instruction-set family; decides which MMU model runs the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    X86_64,
    Aarch64,
}

/// A whole machine: topology, core features, translation hardware and the costs of the
/// operations a kernel performs on it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineProfile {
    /// Short identifier used on the command line (`--machine NAME`); equals the file stem.
    pub name: String,
    /// Human description: vendor, model, microarchitecture.
    pub description: String,
    pub arch: Arch,
    /// Where the profile is an assumption (e.g. the seed did not name the exact model), say so.
    #[serde(default)]
    pub assumption: Option<String>,
    pub topology: Topology,
    pub cpu: Cpu,
    /// Translation lookaside buffers, one entry per physical array.
    pub tlb: Vec<TlbArray>,
    pub paging_structure_cache: PagingStructureCache,
    pub memory: Memory,
    pub costs: Costs,
    /// Idle states, shallowest first (intel_idle's tables, ACPI _CST, or arm64 PSCI states).
    /// Empty: an idle CPU polls and wakes at once.
    #[serde(default, rename = "cstate")]
    pub cstates: Vec<CState>,
    /// What `kharden machine detect` measured from user space on a real host. Library profiles
    /// built from published sources leave it out. Informational: the simulator's inputs stay the
    /// fields above; these readings are kept so a profile shows the evidence behind them.
    #[serde(default)]
    pub measured: Option<HostMeasurements>,
    /// Hardware virtualization (VMX/SVM exits, EPT, VPID), for KVM guests (virt/).
    #[serde(default)]
    pub virt: Option<VirtHardware>,
}

/// One idle state: how long leaving it takes, and how long an idle period must be for the
/// governor to choose it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CState {
    pub name: String,
    pub exit_latency_us: f64,
    pub target_residency_us: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub sockets: u32,
    pub cores_per_socket: u32,
    /// SMT threads per core (1 = no SMT).
    pub threads_per_core: u32,
    /// NUMA nodes per socket (sub-NUMA clustering / multi-die packages give > 1).
    pub numa_nodes_per_socket: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    /// Marketing model name, e.g. "Intel Core i7-4770".
    pub model: String,
    /// Microarchitecture, e.g. "Haswell".
    pub microarchitecture: String,
    /// Clock the simulation converts cycles with (sustained all-core or single-core turbo,
    /// as the source states).
    pub frequency_ghz: f64,
    pub features: Features,
}

/// Architectural features that change which kernel path or flush primitive is available.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Features {
    /// x86: process-context identifiers (CR4.PCIDE); 12-bit tags.
    #[serde(default)]
    pub pcid: bool,
    /// x86: the INVPCID instruction (types 0-3).
    #[serde(default)]
    pub invpcid: bool,
    /// x86: global pages (CR4.PGE).
    #[serde(default)]
    pub global_pages: bool,
    /// AMD: INVLPGB broadcast invalidation + TLBSYNC.
    #[serde(default)]
    pub invlpgb: bool,
    /// x86: 1 GiB pages (PDPE1GB).
    #[serde(default)]
    pub gbpages: bool,
    /// arm64: TLBI ... IS broadcasts invalidations to the inner-shareable domain.
    #[serde(default)]
    pub tlbi_broadcast: bool,
    /// arm64: Large System Extensions (single-instruction atomics).
    #[serde(default)]
    pub lse_atomics: bool,
    /// arm64: ASID width in bits (8 or 16); 0 on x86.
    #[serde(default)]
    pub asid_bits: u32,
    /// x86: the core is affected by L1 Terminal Fault (Linux X86_BUG_L1TF), so a mitigation
    /// that protects data across a domain change flushes the L1D there (ASI's taint policy).
    #[serde(default)]
    pub l1tf: bool,
}

/// Which accesses a TLB array serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TlbServes {
    Data,
    Instruction,
    Unified,
}

/// Page sizes as they appear in TOML: "4k", "2m", "1g" (arm64 64K granules are not modelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PageSizeName {
    #[serde(rename = "4k")]
    Size4K,
    #[serde(rename = "2m")]
    Size2M,
    #[serde(rename = "1g")]
    Size1G,
}

impl PageSizeName {
    /// The size as TOML spells it.
    pub fn toml_name(self) -> &'static str {
        match self {
            PageSizeName::Size4K => "4k",
            PageSizeName::Size2M => "2m",
            PageSizeName::Size1G => "1g",
        }
    }
}

impl TlbServes {
    /// The side as TOML spells it.
    pub fn toml_name(self) -> &'static str {
        match self {
            TlbServes::Data => "data",
            TlbServes::Instruction => "instruction",
            TlbServes::Unified => "unified",
        }
    }
}

/// One set-associative TLB array. `ways == entries` means fully associative.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlbArray {
    /// e.g. "l1d-4k", "stlb".
    pub name: String,
    /// 1 = first level (looked up in parallel with the cache), 2 = second level (STLB).
    pub level: u8,
    pub serves: TlbServes,
    pub page_sizes: Vec<PageSizeName>,
    pub entries: u32,
    pub ways: u32,
    /// Extra cycles a hit in this array costs over an L1 hit (0 for first level).
    pub hit_cycles: u32,
    /// True when each SMT thread has its own copy (entries is then per thread).
    #[serde(default)]
    pub per_thread: bool,
}

/// Paging-structure caches (Intel SDM 4.10.3): entries that let a walk skip upper levels.
/// Intel does not publish sizes; sources are reverse-engineering measurements.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagingStructureCache {
    /// PML4E cache entries (skip level 4 only).
    pub pml4e_entries: u32,
    /// PDPTE cache entries (skip levels 4 and 3).
    pub pdpte_entries: u32,
    /// PDE cache entries (skip levels 4, 3 and 2: one read left).
    pub pde_entries: u32,
}

/// The memory hierarchy: page-walk loads and kernel data go through the data caches, kernel
/// text through the instruction cache, both backed by L2, the LLC and DRAM.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub l1d_kib: u32,
    pub l1d_ways: u32,
    pub l1d_hit_cycles: u32,
    /// L1 instruction cache. A fetch that hits costs nothing beyond the path's own work
    /// (fetch is pipelined); a miss waits for the level below, as a data load would.
    pub l1i_kib: u32,
    pub l1i_ways: u32,
    pub l2_kib: u32,
    pub l2_ways: u32,
    pub l2_hit_cycles: u32,
    /// Last-level cache per socket.
    pub llc_kib_per_socket: u32,
    pub llc_ways: u32,
    pub llc_hit_cycles: u32,
    /// Idle load-to-use latency of DRAM on the local node.
    pub dram_local_ns: f64,
    /// Idle latency to another node's DRAM (equal to local on one-node machines).
    pub dram_remote_ns: f64,
    /// Lines one core's stream of stores (a page clear or copy) keeps in flight to DRAM:
    /// its L1D fill buffers, or what `machine detect` times. By Little's law such a stream
    /// takes its lines' DRAM latency divided by this.
    pub lines_in_flight: u32,
    /// LLC hits a kernel path's text fetches and data loads overlap (instruction fetch
    /// running ahead, out-of-order loads): each such line stalls its latency over this.
    /// 1: every one waits in full.
    pub llc_miss_overlap: f64,
    /// The same for lines from DRAM.
    pub dram_miss_overlap: f64,
}

/// Costs of the privileged operations kernels perform. Cycles are core clocks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    /// SYSCALL + SYSRET (x86) or SVC + ERET (arm64) round trip, instruction cost only.
    pub syscall_roundtrip_cycles: u32,
    /// x86: MOV to CR3 that keeps TLB entries (PCID with bit 63 set); arm64: TTBR0 write + ISB.
    pub cr3_write_noflush_cycles: u32,
    /// x86: MOV to CR3 that flushes (no PCID, or bit 63 clear); the cost of the instruction only,
    /// the refill is simulated.
    pub cr3_write_flush_cycles: u32,
    /// x86: INVLPG of one page; arm64: TLBI VAE1 (local).
    pub invlpg_cycles: u32,
    /// INVPCID type 0 (individual address); absent when the CPU has no INVPCID.
    #[serde(default)]
    pub invpcid_individual_cycles: Option<u32>,
    /// INVPCID type 1 (single context).
    #[serde(default)]
    pub invpcid_single_context_cycles: Option<u32>,
    /// INVPCID type 2 (all contexts, including globals).
    #[serde(default)]
    pub invpcid_all_incl_global_cycles: Option<u32>,
    /// INVPCID type 3 (all contexts, except globals).
    #[serde(default)]
    pub invpcid_all_non_global_cycles: Option<u32>,
    /// AMD INVLPGB + TLBSYNC, one broadcast invalidation; absent without INVLPGB.
    #[serde(default)]
    pub invlpgb_ns: Option<f64>,
    /// arm64: TLBI ...IS + DSB ISH broadcast invalidation; absent on x86.
    #[serde(default)]
    pub tlbi_broadcast_ns: Option<f64>,
    /// x86: what a kernel's return thunk (SRSO's Safe RET on AMD Zen) adds to each return,
    /// where the machine's kernel runs one (kernel/mitigations.rs).
    #[serde(default)]
    pub return_thunk_cycles: Option<f64>,
    /// x86: what a retpoline adds to each indirect call over a predicted indirect call.
    #[serde(default)]
    pub retpoline_call_cycles: Option<f64>,
    /// Hardware interrupt entry + IRET (or exception entry + ERET).
    pub interrupt_entry_cycles: u32,
    /// Sending one IPI (ICR write in x2APIC mode, or GIC SGI register write).
    pub ipi_send_cycles: u32,
    /// One locked read-modify-write on a line in L1, back to back on the same line (x86
    /// `lock add`/`xadd`/`bts`; arm64 an LSE atomic, or an exclusive pair without LSE): what
    /// a bit op, an atomic counter or an uncontended spin_lock costs the CPU that runs it.
    /// Absent: the measured `atomic_increment_ns` where `machine detect` took one, else
    /// nothing is charged for the locked operations a defense adds.
    #[serde(default)]
    pub locked_rmw_cycles: Option<f64>,
    /// CPUs one such write can address, from the kernel's APIC driver: 1 in physical
    /// destination mode (a write per target), 16 in x2APIC cluster mode (a write per cluster
    /// of 16 APIC IDs holding a target), 8 in xAPIC flat logical mode (one write for up to
    /// 8 CPUs). Absent: 1.
    #[serde(default)]
    pub ipi_cpus_per_write: Option<u32>,
    /// IPI delivery latency from sender to handler start, per distance.
    pub ipi_latency_ns: IpiLatency,
    /// Moving a modified cache line to another CPU (core-to-core latency), per distance; each
    /// value is optional. Missing values fall back to an L2 hit between SMT siblings, an LLC
    /// hit within a socket and a remote-memory access across sockets.
    #[serde(default)]
    pub line_transfer_ns: LineTransfer,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineTransfer {
    #[serde(default)]
    pub same_core_ns: Option<f64>,
    #[serde(default)]
    pub same_socket_ns: Option<f64>,
    #[serde(default)]
    pub remote_socket_ns: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpiLatency {
    /// Sibling hyperthread of the same core.
    pub same_core_ns: f64,
    pub same_socket_ns: f64,
    pub remote_socket_ns: f64,
}

/// User-space measurements of a host (`kharden machine detect`). Each is optional: a reading that
/// could not be taken (one CPU, no permission, timer too coarse) is left out, never guessed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostMeasurements {
    /// `getppid` through the raw syscall instruction, round trip, median of batches (includes
    /// the kernel's entry code, the syscall body and whatever mitigations the running kernel uses).
    #[serde(default)]
    pub syscall_getppid_ns: Option<f64>,
    /// First write to a fresh anonymous 4 KiB page: fault entry, page allocation and zeroing, PTE
    /// install, return.
    #[serde(default)]
    pub minor_fault_ns: Option<f64>,
    /// Extra cost of one `mprotect` permission change on a page of a mm that also runs on a second
    /// CPU (so the kernel must shoot down that CPU's TLB) over the same change in a single-threaded mm.
    #[serde(default)]
    pub tlb_shootdown_ns: Option<f64>,
    /// Latency of one atomic increment (x86 LOCK XADD, arm64 LDADD or LL/SC loop) in a dependent chain.
    #[serde(default)]
    pub atomic_increment_ns: Option<f64>,
    /// Extra latency of a load whose translation misses the first-level DTLB and hits the second level.
    #[serde(default)]
    pub stlb_hit_ns: Option<f64>,
}

/// Which hardware virtualization a profile has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VirtFlavour {
    /// Intel VT-x: CR0 writes exit per the guest/host mask; EPT; VPID.
    Vmx,
    /// AMD-V: no per-bit CR0 mask. KVM always sets the selective CR0 write intercept, which
    /// exits on a change of any bit but TS and MP (it drops only the full CR0 intercepts
    /// under NPT, svm_set_cr0), so every CR0.WP toggle exits; NPT.
    Svm,
}

/// The `[virt]` section of a machine profile: hardware facts, each sourced in the TOML (the
/// VMX/SVM model, virt/vmx.rs, uses them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtHardware {
    pub flavour: VirtFlavour,
    /// Two-dimensional paging (EPT / NPT).
    pub ept: bool,
    /// TLB entries tagged by VPID (ASID on SVM), so exits and entries do not flush.
    pub vpid: bool,
    /// Cycles of the hardware VM exit (guest state saved, host state loaded).
    pub vmexit_cycles: f64,
    /// Cycles of the hardware VM entry (VMRESUME with its checks and guest state load).
    pub vmentry_cycles: f64,
    /// Cycles of INVEPT single-context (the instruction; refills are simulated).
    pub invept_cycles: f64,
    /// Cycles of INVVPID single-context.
    pub invvpid_cycles: f64,
}
