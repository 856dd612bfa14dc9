//! Kernel paths that run their measured footprint (kernels/linux-*.toml, kernel/footprints/footprint.rs).
//!
//! A path fetches its text through the ITLB (one translation per 4 KiB text page) and the
//! instruction cache (one fetch per 64-byte line), and touches its data through the DTLB and
//! the data caches: the image's rodata, data and bss lines, the direct-map lines (slab
//! objects, per-CPU data, the task) and the stack lines measured for it under qemu
//! (kernel/footprints/image_data.rs), or, for a path the trace did not see, the kernel objects chosen
//! for it from the source (ESTIMATE). What the TLBs and caches
//! hold then decides what a path costs on a machine: PTI's CR3 writes, global kernel pages, PCIDs, the direct map's
//! page size and the node a line lives on all act on these touches. The rest of the path's
//! time is its work: its native latency on the recording host, minus what an empty syscall
//! costs there (a target machine charges that as its own SYSCALL round trip), minus the
//! modelled memory time of the same warm loop on the recording host's caches (the
//! rule of docs/design/kernel-paths.md section 3). Work is carried in core cycles, unchanged from machine to
//! machine: the instructions are the same, and the recording host's IPC stands for the
//! target's (an ESTIMATE the design note discusses).

use crate::arch::caches::{CacheHierarchy, HitLevel, L1Side};
use crate::arch::x86::{Access, VirtAddr};
use crate::error::{Error, Result};
use crate::kernel::footprints::footprint::Footprints;
use crate::kernel::footprints::image_data::{ImageData, PathData};
use crate::kernel::footprints::path_footprint::{PathFootprint, LINE_BYTES, PAGE_BYTES};
use crate::kernel::memory::layout::{
    direct_map, KERNEL_BSS, KERNEL_DATA, KERNEL_DATA_BYTES, KERNEL_RODATA, KERNEL_RODATA_BYTES,
    KERNEL_STACK_BYTES, KERNEL_TEXT, KERNEL_TEXT_BYTES,
};
use crate::kernel::mitigations::{Mitigation, MitigationCycles};
use crate::kernel::{CpuId, Kernel};
use crate::machine::MachineProfile;
use crate::sim::{Counter, TimeCategory};

/// The path whose native latency is an empty syscall's (entry, dispatch, exit).
pub const EMPTY_SYSCALL: &str = "syscall-entry-exit";
/// The syscall entry point, which PTI maps into user page tables.
const ENTRY_SYMBOL: &str = "entry_SYSCALL_64";
/// The machine profile of the host the committed footprints were recorded on (their
/// `host_machine`, which a test holds to this).
pub const RECORDING_HOST: &str = "recording-host-epyc-zen4-kvm";

/// Lines of a slab object a path touches (a few fields of a large structure, not all of
/// it): ESTIMATE, the "a few lines of task_struct"; objects whose recorded size is
/// already the used part (stack, per-CPU area) are touched whole.
pub const LINES_PER_SLAB_OBJECT: u64 = 4;

/// A kernel object a path touches, resolved against the running task and CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    TaskStruct,
    /// The top of the current kernel stack.
    KernelStack,
    /// This CPU's per-CPU area.
    PerCpu,
    /// A slab object of the current process (mm_struct, files_struct, a file, a dentry...),
    /// in its slot of the process's object page.
    Process(u8),
}

/// Objects with a slot in a process's object page, 8 lines (512 bytes) per slot.
const PROCESS_OBJECTS: &[&str] = &[
    "mm_struct",
    "vm_area_struct",
    "maple_node",
    "anon_vma",
    "files_struct",
    "signal_struct",
    "sighand_struct",
    "file",
    "dentry",
    "inode",
    "names_cache",
];
const SLOT_LINES: u64 = 8;
/// Pages of a process's object area (allocated with its mm, freed with it).
pub const PROCESS_OBJECT_PAGES: usize =
    (PROCESS_OBJECTS.len() * (SLOT_LINES * LINE_BYTES) as usize).div_ceil(PAGE_BYTES as usize);

/// Objects the simulator models by mechanism rather than as touches (page copies, walks).
const MODELLED_ELSEWHERE: &[&str] = &["page_cache_page", "user_page", "page_table_lines"];

/// One path, laid out for the simulator.
#[derive(Debug, Clone)]
pub struct KernelPath {
    pub name: String,
    /// Text pages touched, each with its lines: (page offset from _text / 4096, lines as
    /// offset / 64), pages ascending.
    pub text: Vec<(u64, Vec<u64>)>,
    /// Objects touched and how many lines of each: the stack's measured lines, or for a
    /// path without measured direct-map lines the objects estimated from the source.
    pub data: Vec<(Object, u64)>,
    /// Direct-map lines measured for the path, in the kernel heap (`KernelHeap`).
    pub heap: HeapLines,
    /// Lines of the image's rodata, data and bss every run reads or writes (measured on
    /// another kernel, kernel/footprints/image_data.rs), grouped by 4 KiB page: (page address, line
    /// addresses / 64), ascending.
    pub image: Vec<(u64, Vec<u64>)>,
    /// Native cycles on the recording host (low percentile), when it was measured.
    pub native_cycles: Option<f64>,
    /// The path's own work in core cycles (module doc), when it was measured.
    pub work_cycles: Option<f64>,
    /// What of that work the recording host's speculation mitigations took, which a kernel
    /// that does not run them leaves out (kernel/mitigations.rs; zero where the recording
    /// counted no returns or indirect calls for the path).
    pub mitigation_cycles: MitigationCycles,
    /// Samples of each function (sorted by name: a binary search on every fault), and of
    /// the whole path (the recording host's own BPF programs included, whose time is in the
    /// latency): what a function's share of the native latency is.
    function_samples: Vec<(String, u64)>,
    samples: f64,
}

impl KernelPath {
    pub fn text_lines(&self) -> usize {
        self.text.iter().map(|(_, l)| l.len()).sum()
    }

    pub fn image_lines(&self) -> usize {
        self.image.iter().map(|(_, l)| l.len()).sum()
    }

    pub fn heap_lines(&self) -> usize {
        self.heap.lines.len()
    }

    /// Distinct 4 KiB pages of the heap the path touches.
    pub fn heap_pages(&self) -> usize {
        self.heap.pages.len()
    }

    /// Native cycles the recording loop spent in `function` (its share of the path's
    /// samples times the latency); None when the latency was not measured or the function
    /// has no samples.
    pub fn native_cycles_in(&self, function: &str) -> Option<f64> {
        let i = self
            .function_samples
            .binary_search_by(|(f, _)| f.as_str().cmp(function))
            .ok()?;
        let n = self.function_samples[i].1;
        self.native_cycles
            .map(|c| c * n as f64 / self.samples.max(1.0))
    }
}

/// A path's lines in the kernel heap: the 4 KiB pages whose translations the DTLB is asked
/// for, and the lines, one group for the caches (each node's heap is physically contiguous
/// and the direct map's address is the physical one plus a constant, so where a line lies
/// is known without its translation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeapLines {
    /// Heap offsets of the 4 KiB pages touched, ascending.
    pub pages: Vec<u64>,
    /// Heap offsets / 64 of the lines touched, ascending.
    pub lines: Vec<u64>,
}

/// Every recorded path, compiled.
#[derive(Debug)]
pub struct KernelPaths {
    pub paths: Vec<KernelPath>,
    pub kernel_release: String,
    /// Where the syscall entry code (entry_SYSCALL_64) lies, as an offset from _text.
    pub entry_text_offset: u64,
    /// Bytes of each kernel object the recording names ([objects]).
    pub object_bytes: std::collections::BTreeMap<String, u64>,
    /// Where the measured direct-map lines lie.
    pub heap: KernelHeap,
    /// What every path's work is derived against (`work_from_native_ns`).
    work_basis: WorkBasis,
}

/// The recording host's figures a path's work is derived against: its clock, the empty
/// syscall's native cycles and modelled memory time, and each path's modelled memory time
/// in a warm loop.
#[derive(Debug, Clone)]
struct WorkBasis {
    host_ghz: f64,
    base_native: f64,
    base_stall: f64,
    stall: Vec<f64>,
}

/// The kernel heap: the measured direct-map lines of every path, kept at their guest
/// physical offsets so that a line two paths share (per-CPU data, the task, a dentry) is one
/// line in the model too, and each 2 MiB region of the guest's that holds any becomes one
/// 2 MiB region here, in address order (what a large direct-map page covers is then what it
/// covered in the guest). Each node has its own copy: SLUB and the per-CPU allocator hand a
/// CPU memory of its own node, and one driver process ran on one CPU.
#[derive(Debug, Clone, Default)]
pub struct KernelHeap {
    /// The guest's 2 MiB regions (physical address >> 21) that hold a measured line,
    /// ascending; region i lies at heap offset i x 2 MiB.
    regions: Vec<u64>,
}

const HEAP_REGION_BYTES: u64 = 2 << 20;

impl KernelHeap {
    fn of(image: &ImageData) -> KernelHeap {
        let mut regions: Vec<u64> = image
            .paths
            .values()
            .flat_map(|p| &p.direct_map_lines)
            .map(|l| l * LINE_BYTES / HEAP_REGION_BYTES)
            .collect();
        regions.sort_unstable();
        regions.dedup();
        KernelHeap { regions }
    }

    /// Bytes of each node's copy.
    pub fn bytes(&self) -> u64 {
        self.regions.len() as u64 * HEAP_REGION_BYTES
    }

    /// The heap offset / 64 of guest physical line `line` (one of the measured lines).
    fn line(&self, line: u64) -> u64 {
        let pa = line * LINE_BYTES;
        let region = self
            .regions
            .binary_search(&(pa / HEAP_REGION_BYTES))
            .expect("every measured line's region is in the heap");
        (region as u64 * HEAP_REGION_BYTES + pa % HEAP_REGION_BYTES) / LINE_BYTES
    }
}

impl KernelPaths {
    /// Lays out every path of `f` and derives its work on `host`, the recording host.
    pub fn compile(f: &Footprints, host: &MachineProfile) -> Result<KernelPaths> {
        if f.kernel.text_bytes > KERNEL_TEXT_BYTES {
            return Err(Error::new(format!(
                "footprints of kernel {}: {} text bytes do not fit the modelled {} MiB of kernel text",
                f.kernel.release,
                f.kernel.text_bytes,
                KERNEL_TEXT_BYTES >> 20
            )));
        }
        let image = ImageData::builtin();
        let bases = section_bases(image)?;
        let heap = KernelHeap::of(image);
        let mut paths: Vec<KernelPath> = f
            .path
            .iter()
            .map(|p| layout(p, f, image, &bases, &heap))
            .collect::<Result<_>>()?;
        let ghz = f.kernel.host_ghz;
        for p in paths.iter_mut() {
            p.native_cycles = f.path(&p.name).and_then(|r| r.latency_cycles(ghz));
        }
        let mut caches = CacheHierarchy::new(host);
        let stall: Vec<f64> = paths
            .iter()
            .map(|p| warm_stall_cycles(p, &mut caches))
            .collect();
        let base = paths.iter().position(|p| p.name == EMPTY_SYSCALL);
        let (base_native, base_stall) = match base {
            Some(i) => (paths[i].native_cycles.unwrap_or(0.0), stall[i]),
            None => (0.0, 0.0),
        };
        let work_basis = WorkBasis {
            host_ghz: ghz,
            base_native,
            base_stall,
            stall,
        };
        for (i, p) in paths.iter_mut().enumerate() {
            p.work_cycles = p.native_cycles.map(|n| work_basis.work(i, n));
        }
        for (p, cycles) in paths.iter_mut().zip(mitigation_cycles(f, host)?) {
            p.mitigation_cycles = cycles;
        }
        let entry_text_offset = f
            .path
            .iter()
            .flat_map(|p| &p.functions)
            .find(|func| func.name() == ENTRY_SYMBOL)
            .map(|func| func.offset())
            .ok_or_else(|| {
                Error::new(format!(
                    "footprints of kernel {}: no path runs {ENTRY_SYMBOL}",
                    f.kernel.release
                ))
            })?;
        Ok(KernelPaths {
            paths,
            kernel_release: f.kernel.release.clone(),
            entry_text_offset,
            object_bytes: f.objects.clone(),
            heap,
            work_basis,
        })
    }

    /// The work of path `id` had its native latency on the recording host been `ns` (a
    /// latency timed apart from the recording, as exit's): derived by the same rule as a
    /// recorded latency's.
    pub fn work_from_native_ns(&self, id: PathId, ns: f64) -> f64 {
        self.work_basis.work(id.0, ns * self.work_basis.host_ghz)
    }

    /// Recorded path `name`'s native latency on the recording host (low percentile), in ns.
    pub fn native_ns(&self, name: &str) -> Option<f64> {
        let p = self.get(self.id(name)?);
        p.native_cycles.map(|c| c / self.work_basis.host_ghz)
    }

    pub fn id(&self, name: &str) -> Option<PathId> {
        self.paths.iter().position(|p| p.name == name).map(PathId)
    }

    pub fn get(&self, id: PathId) -> &KernelPath {
        &self.paths[id.0]
    }

    /// Bytes of kernel object `name` in the recording (0 when it names none).
    pub fn objects_bytes(&self, name: &str) -> u64 {
        self.object_bytes.get(name).copied().unwrap_or(0)
    }
}

/// Each path's cycles of the mitigations the recording ran (`f.kernel.speculation_mitigations`),
/// at the recording host's cost of each, for its returns and indirect calls beyond the
/// empty syscall's; in the order of `f.path`.
fn mitigation_cycles(f: &Footprints, host: &MachineProfile) -> Result<Vec<MitigationCycles>> {
    let ran: Vec<Mitigation> = f
        .kernel
        .speculation_mitigations
        .iter()
        .filter_map(|m| Mitigation::named(m))
        .collect();
    let cost = |m: Mitigation| -> Result<f64> {
        let (c, field) = match m {
            Mitigation::Retpoline => (host.costs.retpoline_call_cycles, "retpoline_call_cycles"),
            Mitigation::SafeRet => (host.costs.return_thunk_cycles, "return_thunk_cycles"),
        };
        match c {
            Some(c) if ran.contains(&m) => Ok(c),
            None if ran.contains(&m) => Err(Error::new(format!(
                "footprints of kernel {}: the recording ran {} but its host profile {} gives no costs.{field}",
                f.kernel.release,
                m.name(),
                host.name
            ))),
            _ => Ok(0.0),
        }
    };
    let (retpoline, safe_ret) = (cost(Mitigation::Retpoline)?, cost(Mitigation::SafeRet)?);
    let base = f.path(EMPTY_SYSCALL);
    let beyond = |count: Option<f64>, base: Option<f64>| match count {
        Some(c) => (c - base.unwrap_or(0.0)).max(0.0),
        None => 0.0,
    };
    Ok(f.path
        .iter()
        .map(|p| MitigationCycles {
            retpoline: retpoline * beyond(p.indirect_calls, base.and_then(|b| b.indirect_calls)),
            safe_ret: safe_ret * beyond(p.returns, base.and_then(|b| b.returns)),
        })
        .collect())
}

impl WorkBasis {
    /// Path `i`'s work from its native cycles: less the empty syscall's, and less the
    /// memory time the model gives the path beyond the empty syscall's (module doc).
    fn work(&self, i: usize, native: f64) -> f64 {
        (native - self.base_native - (self.stall[i] - self.base_stall)).max(0.0)
    }
}

/// Index of a path in `KernelPaths`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathId(pub usize);

/// Lines grouped by the 4 KiB page they lie in: (page, lines); `lines` ascending, as
/// offsets or addresses divided by 64 (a page is then its line * 64 / 4096).
fn by_page(lines: impl IntoIterator<Item = u64>) -> Vec<(u64, Vec<u64>)> {
    let mut pages: Vec<(u64, Vec<u64>)> = vec![];
    for line in lines {
        let page = line * LINE_BYTES / PAGE_BYTES;
        match pages.last_mut() {
            Some((pg, lines)) if *pg == page => lines.push(line),
            _ => pages.push((page, vec![line])),
        }
    }
    pages
}

/// Where each measured image section starts in the modelled image, checked to fit once.
type SectionBases = [(&'static str, u64); 3];

fn section_bases(image: &ImageData) -> Result<SectionBases> {
    let data_end = KERNEL_DATA + KERNEL_DATA_BYTES;
    for (section, room) in [
        ("rodata", KERNEL_RODATA_BYTES),
        ("data", KERNEL_BSS - KERNEL_DATA),
        ("bss", data_end - KERNEL_BSS),
    ] {
        if image.section_bytes(section) > room {
            return Err(Error::new(format!(
                "image data of kernel {}: its {section} ({} bytes) does not fit the modelled {} MiB",
                image.kernel_release,
                image.section_bytes(section),
                room >> 20
            )));
        }
    }
    Ok([
        ("rodata", KERNEL_RODATA),
        ("data", KERNEL_DATA),
        ("bss", KERNEL_BSS),
    ])
}

/// What the trace measured for `name`: for a recorded path of the same name, or for the path
/// a derived one comes from.
fn measured<'a>(name: &str, image: &'a ImageData) -> Option<&'a PathData> {
    let from = crate::kernel::footprints::derived::DERIVED
        .iter()
        .find(|d| d.name == name)
        .map_or(name, |d| d.from);
    image.path(from)
}

/// The image lines a path touches every run, at the modelled image's addresses.
fn image_lines(measured: Option<&PathData>, bases: &SectionBases) -> Vec<(u64, Vec<u64>)> {
    let Some(measured) = measured else {
        return vec![];
    };
    let lines = bases.iter().flat_map(|&(section, base)| {
        measured
            .lines(section)
            .iter()
            .map(move |l| base / LINE_BYTES + l)
    });
    by_page(lines)
        .into_iter()
        .map(|(page, lines)| (page * PAGE_BYTES, lines))
        .collect()
}

/// The direct-map lines a path touches every run, at their heap offsets.
fn heap_lines(measured: Option<&PathData>, heap: &KernelHeap) -> HeapLines {
    let mut lines: Vec<u64> = measured
        .map_or(&[][..], |m| &m.direct_map_lines)
        .iter()
        .map(|&l| heap.line(l))
        .collect();
    lines.sort_unstable();
    let mut pages: Vec<u64> = lines
        .iter()
        .map(|l| l * LINE_BYTES / PAGE_BYTES * PAGE_BYTES)
        .collect();
    pages.dedup();
    HeapLines { pages, lines }
}

/// The objects the recording lists for a path the trace did not see (ESTIMATE), and how many
/// lines of each it touches.
fn estimated_objects(p: &PathFootprint, f: &Footprints) -> Result<Vec<(Object, u64)>> {
    let mut data = vec![];
    for name in &p.data {
        let bytes = f.objects.get(name).copied().unwrap_or(0);
        let lines = bytes.div_ceil(LINE_BYTES);
        let object = match name.as_str() {
            "task_struct" => Object::TaskStruct,
            "kernel_stack" => Object::KernelStack,
            "percpu" => Object::PerCpu,
            n if MODELLED_ELSEWHERE.contains(&n) => continue,
            n => match PROCESS_OBJECTS.iter().position(|&o| o == n) {
                Some(slot) => Object::Process(slot as u8),
                None => {
                    return Err(Error::new(format!(
                        "path {}: no placement for kernel object '{n}'",
                        p.name
                    )))
                }
            },
        };
        let lines = match object {
            Object::KernelStack => lines.min(KERNEL_STACK_BYTES / LINE_BYTES),
            Object::PerCpu => lines.min(PAGE_BYTES / LINE_BYTES),
            Object::TaskStruct => lines.min(LINES_PER_SLAB_OBJECT),
            Object::Process(_) => lines.min(LINES_PER_SLAB_OBJECT),
        };
        data.push((object, lines));
    }
    Ok(data)
}

fn layout(
    p: &PathFootprint,
    f: &Footprints,
    image: &ImageData,
    bases: &SectionBases,
    heap: &KernelHeap,
) -> Result<KernelPath> {
    let text = by_page(p.estimated_lines());
    let measured = measured(&p.name, image);
    let heap = heap_lines(measured, heap);
    // Every path's object list is checked, whether or not the measurement replaces it.
    let estimated = estimated_objects(p, f)?;
    let data = if heap.lines.is_empty() {
        estimated
    } else {
        // The trace saw the path's objects: its direct-map and stack lines replace the
        // estimate.
        let stack = measured.map_or(0, |m| m.stack_lines.len() as u64);
        let stack = (stack > 0).then_some((Object::KernelStack, stack));
        stack.into_iter().collect()
    };
    let mut function_samples: Vec<(String, u64)> = p
        .functions
        .iter()
        .filter(|f| f.samples() > 0)
        .map(|f| (f.name().to_string(), f.samples()))
        .collect();
    function_samples.sort();
    Ok(KernelPath {
        name: p.name.clone(),
        text,
        data,
        heap,
        image: image_lines(measured, bases),
        native_cycles: None,
        work_cycles: None,
        mitigation_cycles: MitigationCycles::default(),
        function_samples,
        samples: p.samples as f64 / (1.0 - p.instrumentation_share()),
    })
}

/// Cycles a kernel path's line served at `h` waits beyond an L1 hit. The next-line
/// prefetcher every modelled core has (Intel's and AMD's optimization manuals) has asked L2
/// for a code line that follows the previous one in a straight run (`sequential`) before it
/// is needed, so such a line served by L2 costs nothing; other L2 hits wait in full; lines
/// from the LLC or DRAM wait their latency over the misses the core overlaps there (the
/// profile's llc_miss_overlap and dram_miss_overlap; `reproduce evict-fault` fits the
/// recording host's).
pub fn line_stall(caches: &CacheHierarchy, h: HitLevel, sequential: bool) -> f64 {
    let stall = caches.stall_cycles(h);
    match h {
        HitLevel::L1 => 0.0,
        HitLevel::L2 if sequential => 0.0,
        HitLevel::L2 => stall,
        HitLevel::Llc => stall / caches.llc_overlap,
        HitLevel::LocalDram | HitLevel::RemoteDram => stall / caches.dram_overlap,
    }
}

/// Cycles a warm loop of `p` waits beyond L1 hits on the recording host's `caches`: the
/// path run three times, the third counted (two runs put its lines in LRU order whatever
/// the caches held before). Text and data lines are given distinct addresses (text at its
/// offset, data after the image), which is all the caches need.
fn warm_stall_cycles(p: &KernelPath, caches: &mut CacheHierarchy) -> f64 {
    let data_base = KERNEL_TEXT_BYTES * 4;
    let heap_base = 1 << 40;
    let run = |caches: &mut CacheHierarchy| {
        let mut stall = 0.0;
        for (_, lines) in &p.text {
            for (i, &l) in lines.iter().enumerate() {
                let h = caches.fetch(0, 0, l * LINE_BYTES, false);
                stall += line_stall(caches, h, i > 0 && lines[i - 1] + 1 == l);
            }
        }
        for (i, &(_, lines)) in p.data.iter().enumerate() {
            for l in 0..lines {
                let pa = data_base + i as u64 * PAGE_BYTES + l * LINE_BYTES;
                let h = caches.load(0, 0, pa, false);
                stall += line_stall(caches, h, false);
            }
        }
        for &l in p.image.iter().flat_map(|(_, lines)| lines) {
            let h = caches.load(0, 0, l * LINE_BYTES - KERNEL_TEXT, false);
            stall += line_stall(caches, h, false);
        }
        for &l in &p.heap.lines {
            let h = caches.load(0, 0, heap_base + l * LINE_BYTES, false);
            stall += line_stall(caches, h, false);
        }
        stall
    };
    run(caches);
    run(caches);
    run(caches)
}

impl Kernel {
    /// `work`, recording-host cycles of path `id`'s work, less the recording's mitigations
    /// this kernel does not run (kernel/mitigations.rs), counted on `cpu` as left out.
    pub(crate) fn work_on_this_kernel(&mut self, cpu: CpuId, id: PathId, work: f64) -> f64 {
        let kept = self.paths.get(id).mitigation_cycles.work_without_unrun(
            work,
            self.params.speculation_mitigations,
            &self.machine,
        );
        let left_out = (work - kept).round() as u64;
        if left_out > 0 {
            self.cpus[cpu]
                .stats
                .add(Counter::MitigationCyclesLeftOut, left_out);
        }
        kept
    }

    /// Runs path `id` on `cpu`: its text through the ITLB and instruction cache, its data
    /// through the DTLB and data caches (both charged to kernel-cache-miss beyond L1 hits,
    /// translations to kernel-tlb-refill), then `work` cycles of its own work (the measured
    /// work when `None`). Lines still in L1 from the path's last run here are replayed as
    /// hits (kernel/paths/l1_replay.rs).
    pub fn run_path(&mut self, cpu: CpuId, id: PathId, work: Option<f64>) -> Result<()> {
        if self.fast_forward {
            return Ok(());
        }
        let paths = self.paths.clone();
        let p = paths.get(id);
        let memos = &mut self.cpus[cpu].path_memo;
        if memos.len() <= id.0 {
            memos.resize(paths.paths.len(), Default::default());
        }
        let mut memo = std::mem::take(&mut memos[id.0]);
        memo.text.shape(p.text.len(), p.text_lines());
        memo.data.shape(
            p.data.len() + p.image.len() + 1,
            p.data.iter().map(|d| d.1 as usize).sum::<usize>() + p.image_lines() + p.heap_lines(),
        );
        let mut stall = 0.0;
        let mut mapped = None;
        let mut first = 0;
        for (g, (page, lines)) in p.text.iter().enumerate() {
            let va = VirtAddr(KERNEL_TEXT + page * PAGE_BYTES);
            let base = self.kernel_page(cpu, p, va, Access::Exec, &mut mapped)?;
            let offsets = lines.iter().enumerate().map(|(i, &l)| {
                let sequential = i > 0 && lines[i - 1] + 1 == l;
                (l * LINE_BYTES - page * PAGE_BYTES, sequential)
            });
            let side = L1Side::Instruction;
            stall += self.run_lines(cpu, side, &mut memo.text, g, first, base, offsets);
            first += lines.len();
        }
        self.settle(cpu, L1Side::Instruction, &mut memo.text);
        first = 0;
        for (g, &(object, lines)) in p.data.iter().enumerate() {
            let va = self.object_va(cpu, object, lines);
            let t = self.touch_kernel(cpu, va, Access::Write).map_err(|f| {
                Error::new(format!(
                    "kernel fault in {} at {va} ({object:?}): {f:?}",
                    p.name
                ))
            })?;
            let base = t.page.0 + (va.0 & (t.size.bytes() - 1));
            let offsets = (0..lines as usize).map(|l| (l as u64 * LINE_BYTES, false));
            stall += self.run_lines(cpu, L1Side::Data, &mut memo.data, g, first, base, offsets);
            first += lines as usize;
        }
        mapped = None;
        for (g, (page, lines)) in p.image.iter().enumerate() {
            let base = self.kernel_page(cpu, p, VirtAddr(*page), Access::Read, &mut mapped)?;
            let offsets = lines.iter().map(|&l| (l * LINE_BYTES - page, false));
            let g = p.data.len() + g;
            stall += self.run_lines(cpu, L1Side::Data, &mut memo.data, g, first, base, offsets);
            first += lines.len();
        }
        mapped = None;
        let heap = self.kernel_heap[self.cpus[cpu].mmu.node() as usize];
        for &page in &p.heap.pages {
            let va = direct_map(heap + page);
            let pa = self.kernel_page(cpu, p, va, Access::Write, &mut mapped)?;
            debug_assert_eq!(pa, heap + page, "the direct map is linear");
        }
        let offsets = p.heap.lines.iter().map(|&l| (l * LINE_BYTES, false));
        let g = p.data.len() + p.image.len();
        stall += self.run_lines(cpu, L1Side::Data, &mut memo.data, g, first, heap, offsets);
        self.settle(cpu, L1Side::Data, &mut memo.data);
        self.cpus[cpu].path_memo[id.0] = memo;
        self.compute(cpu, stall, TimeCategory::KernelCacheMiss);
        self.compute(
            cpu,
            work.or(p.work_cycles).unwrap_or(0.0),
            TimeCategory::Kernel,
        );
        Ok(())
    }

    /// The physical address of kernel page `va` (text fetched, image data read, heap
    /// written), translated through the ITLB or DTLB once per entry it keeps (`mapped` keeps
    /// the last one: the pages of a 2 MiB mapping are one entry where the TLB holds 2 MiB
    /// pages, and the later ones would hit it; an ITLB of 4 KiB entries only, as
    /// Silvermont's, fractures the mapping and looks up each page).
    fn kernel_page(
        &mut self,
        cpu: CpuId,
        p: &KernelPath,
        va: VirtAddr,
        access: Access,
        mapped: &mut Option<(u64, u64, u64)>,
    ) -> Result<u64> {
        if let Some((start, len, pa)) = *mapped {
            if (start..start + len).contains(&va.0) {
                return Ok(pa + (va.0 - start));
            }
        }
        let t = self.touch_kernel(cpu, va, access).map_err(|f| {
            Error::new(format!(
                "kernel fault on {}'s page {va} ({access:?}): {f:?}",
                p.name
            ))
        })?;
        let exec = access == Access::Exec;
        let len = self.cpus[cpu].mmu.l1_entry_size(exec, t.size).bytes();
        let start = va.0 & !(len - 1);
        let pa = t.page.0 + (start & (t.size.bytes() - 1));
        *mapped = Some((start, len, pa));
        Ok(pa + (va.0 - start))
    }

    /// Loads (or fetches, for text) the lines at `offsets` from physical `base` on `cpu`'s
    /// caches, each flagged when it continues a straight run of code; records each line's
    /// address and L1 slot in `placed`; returns the cycles waited beyond L1 hits
    /// (line_stall).
    pub(super) fn fetch_lines(
        &mut self,
        cpu: CpuId,
        base: u64,
        offsets: impl Iterator<Item = (u64, bool)>,
        side: L1Side,
        placed: &mut [(u64, usize)],
    ) -> f64 {
        let (core, socket, remote) = self.line_place(cpu, base);
        let text = side == L1Side::Instruction;
        self.count_lines(cpu, side, placed.len() as u64);
        let stats = &mut self.cpus[cpu].stats;
        let mut stall = 0.0;
        for ((off, sequential), place) in offsets.zip(placed) {
            let pa = base + off;
            let (h, slot) = self.caches.access(side, core, socket, pa, remote);
            *place = (pa, slot);
            match h {
                HitLevel::L1 => {}
                HitLevel::L2 | HitLevel::Llc => stats.count(Counter::KernelLineL1Misses),
                HitLevel::LocalDram => {
                    stats.count(Counter::KernelLineL1Misses);
                    stats.count(Counter::KernelLinesFromMemory);
                    if text {
                        stats.count(Counter::KernelTextFromMemory);
                    }
                }
                HitLevel::RemoteDram => {
                    stats.count(Counter::KernelLineL1Misses);
                    stats.count(Counter::KernelLinesFromMemory);
                    stats.count(Counter::KernelLinesFromRemoteMemory);
                    if text {
                        stats.count(Counter::KernelTextFromMemory);
                        stats.count(Counter::KernelTextFromRemoteMemory);
                    }
                }
            }
            stall += line_stall(&self.caches, h, text && sequential);
        }
        stall
    }

    /// Counts `n` kernel text or data lines run on `cpu`.
    pub(super) fn count_lines(&mut self, cpu: CpuId, side: L1Side, n: u64) {
        let counter = match side {
            L1Side::Instruction => Counter::KernelTextLines,
            L1Side::Data => Counter::KernelDataLines,
        };
        self.cpus[cpu].stats.add(counter, n);
    }

    /// Where `cpu` reaches the memory at physical `pa` from: its core and socket (whose
    /// caches serve it), and whether `pa` lives on another node than the CPU's.
    pub(crate) fn line_place(&self, cpu: CpuId, pa: u64) -> (usize, usize, bool) {
        let mmu = &self.cpus[cpu].mmu;
        let remote = self.mem.node_of(crate::arch::x86::PhysAddr(pa).pfn()) != mmu.node();
        (mmu.core(), mmu.socket(), remote)
    }

    /// `cpu` loads the data line at physical `pa` from its line_place(): where it hit.
    pub(crate) fn load_line(&mut self, cpu: CpuId, pa: u64) -> HitLevel {
        let (core, socket, remote) = self.line_place(cpu, pa);
        self.caches.load(core, socket, pa, remote)
    }

    /// Stores to `lines` lines from physical `pa` (a clear, a copy, a new object): a stream
    /// (`stream_lines`), its DRAM lines counted as kernel_store_lines.memory. 64 x 67 ns /
    /// 10, about 430 ns, for a cold 4 KiB clear on haswell-i7-4770.
    pub fn store_lines(&mut self, cpu: CpuId, pa: u64, lines: u64) {
        let pas = (0..lines).map(|l| pa + l * LINE_BYTES);
        self.stream_lines(cpu, pas, Counter::KernelStoreLinesFromMemory);
    }

    /// Independent accesses to the lines at physical addresses `pas`: each is brought into
    /// `cpu`'s caches. Lines found in a cache cost nothing here (the copy's or the path's own
    /// cycles cover them). Lines from DRAM arrive at most lines_in_flight at a time, and a
    /// stream of them outruns the store buffer, so by Little's law the stream waits their
    /// summed latency over lines_in_flight (kernel-cache-miss); they are counted in
    /// `from_memory`.
    pub(in crate::kernel) fn stream_lines(
        &mut self,
        cpu: CpuId,
        pas: impl Iterator<Item = u64>,
        from_memory: Counter,
    ) {
        if self.fast_forward {
            return;
        }
        let (mut lines, mut waited) = (0, 0.0);
        for pa in pas {
            let h = self.load_line(cpu, pa);
            if h.is_dram() {
                lines += 1;
                waited += self.caches.stall_cycles(h);
            }
        }
        if lines > 0 {
            self.cpus[cpu].stats.add(from_memory, lines);
            let stall = waited / self.caches.lines_in_flight;
            self.compute(cpu, stall, TimeCategory::KernelCacheMiss);
        }
    }

    /// Where the first of the `lines` a path touches of `object` lies, for the task
    /// running on `cpu` (the stack's used part is its top).
    fn object_va(&self, cpu: CpuId, object: Object, lines: u64) -> VirtAddr {
        let task = self.cpus[cpu].current.map(|t| &self.tasks[t]);
        match (object, task) {
            (Object::PerCpu, _) => crate::kernel::memory::layout::per_cpu_page(cpu),
            (Object::KernelStack, Some(task)) => {
                task.stack.offset(KERNEL_STACK_BYTES - lines * LINE_BYTES)
            }
            // An interrupt on an idle CPU: its handler's stack is the CPU's hardirq stack,
            // which the model keeps at the end of the CPU's per-CPU page (Linux gives it 16
            // KiB of its own).
            (Object::KernelStack, None) => crate::kernel::memory::layout::per_cpu_page(cpu)
                .offset(PAGE_BYTES - lines.min(PAGE_BYTES / LINE_BYTES) * LINE_BYTES),
            (Object::TaskStruct, Some(task)) => task.task_struct,
            (Object::Process(slot), Some(task)) => {
                let slot = slot as u64;
                let per_page = PAGE_BYTES / (SLOT_LINES * LINE_BYTES);
                let page = self.mms[task.mm].objects[(slot / per_page) as usize];
                page.offset((slot % per_page) * SLOT_LINES * LINE_BYTES)
            }
            (Object::TaskStruct | Object::Process(_), None) => {
                panic!("a path with task objects ran on idle CPU {cpu}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::memory::page_alloc::Gfp;
    use crate::kernel::Kernel;
    use crate::sim::{Counter, TimeCategory};
    use crate::{defense, machine};

    /// A getppid on the seeds' Skylake-SP runs its recorded work less its Safe RET returns
    /// beyond the empty syscall's at the recording host's cost; told to run what the
    /// recording ran, the whole of it.
    #[test]
    fn a_syscall_runs_without_the_safe_ret_its_kernel_does_not_run() {
        use crate::kernel::footprints::footprint::Footprints;
        use crate::kernel::OracleMode;
        let f = Footprints::builtin();
        let returns = |p: &str| f.path(p).and_then(|p| p.returns).unwrap();
        let host = crate::machine::load(&f.kernel.host_machine).unwrap();
        let safe_ret = host.costs.return_thunk_cycles.unwrap()
            * (returns("getppid") - returns(super::EMPTY_SYSCALL));
        assert!(safe_ret > 0.0);
        let kernel_time = |choice: &str| {
            let params = crate::params::Params::linux()
                .with("kernel.speculation_mitigations", choice)
                .unwrap();
            let mut k = Kernel::boot_with(
                crate::machine::load("xeon-platinum-8160").unwrap(),
                vec![],
                &params,
                OracleMode::Every,
            );
            let t = k.spawn("caller", None);
            k.switch_to(0, t);
            k.enter_user(0);
            let spec = crate::kernel::paths::syscall::lookup("getppid").unwrap();
            k.syscall(0, &spec).unwrap();
            let before = k.cpus[0].stats.time(TimeCategory::Kernel);
            k.syscall(0, &spec).unwrap();
            k.cpus[0].stats.time(TimeCategory::Kernel) - before
        };
        let (auto, recorded) = (kernel_time("auto"), kernel_time("recorded"));
        let ghz = crate::machine::load("xeon-platinum-8160")
            .unwrap()
            .cpu
            .frequency_ghz;
        let cycles = |t: crate::sim::Time| t.0 as f64 * 1e-3 * ghz;
        assert!(
            (cycles(recorded - auto) - safe_ret).abs() < 1.0,
            "{} cycles apart, expected {safe_ret}",
            cycles(recorded - auto)
        );
    }

    /// A latency timed apart from the recording gives a path the work its recorded latency
    /// would: the recorded one gives back the path's own work, and each ns more is a
    /// recording-host cycle's worth more work.
    #[test]
    fn a_latency_timed_apart_derives_work_by_the_recordings_rule() {
        let paths = crate::kernel::paths::recording::paths();
        let ghz = crate::kernel::paths::recording::current()
            .footprints
            .kernel
            .host_ghz;
        let id = paths.id("getppid").unwrap();
        let p = paths.get(id);
        let ns = p.native_cycles.unwrap() / ghz;
        let work = paths.work_from_native_ns(id, ns);
        assert!(
            (work - p.work_cycles.unwrap()).abs() < 1e-6,
            "{work} cycles"
        );
        let more = paths.work_from_native_ns(id, ns + 1000.0) - work;
        assert!((more - 1000.0 * ghz).abs() < 1e-6, "{more} cycles for 1 us");
        assert_eq!(paths.work_from_native_ns(id, 0.0), 0.0, "never negative");
    }

    /// A path's kernel text, mapped by 2 MiB pages, walks once per 2 MiB page where the ITLB
    /// holds 2 MiB entries, and once per 4 KiB page where it holds 4 KiB entries only
    /// (Silvermont's, CPUID leaf 2): the large page is fractured there.
    #[test]
    fn text_walks_once_per_entry_the_itlb_keeps() {
        use crate::arch::x86::InvpcidType;
        use crate::machine::PageSizeName::{Size2M, Size4K};
        let walks_after_full_flush = |itlb_sizes: &[crate::machine::PageSizeName]| {
            let mut m = machine::load("atom-c2750").unwrap();
            let itlb = m.tlb.iter_mut().find(|a| a.name == "l1i").unwrap();
            itlb.page_sizes = itlb_sizes.to_vec();
            let mut k = Kernel::boot(m, defense::parse_list("none").unwrap());
            let task = k.spawn("t", None);
            k.switch_to(0, task);
            let id = k.paths.id("fork").expect("a recorded path");
            k.run_path(0, id, Some(0.0)).unwrap();
            k.cpus[0].mmu.invpcid(InvpcidType::AllInclGlobal);
            let before = k.cpus[0].stats.counter(Counter::PageWalks);
            k.run_path(0, id, Some(0.0)).unwrap();
            let text = &k.paths.get(id).text;
            let pages_4k = text.len() as u64;
            let mut pages_2m: Vec<u64> = text.iter().map(|(page, _)| page / 512).collect();
            pages_2m.dedup();
            let walks = k.cpus[0].stats.counter(Counter::PageWalks) - before;
            (walks, pages_4k, pages_2m.len() as u64)
        };
        let (fractured, pages_4k, pages_2m) = walks_after_full_flush(&[Size4K]);
        let (whole, _, _) = walks_after_full_flush(&[Size4K, Size2M]);
        assert!(
            pages_4k > pages_2m,
            "the path spans 4 KiB pages of some 2 MiB page twice"
        );
        assert_eq!(fractured - whole, pages_4k - pages_2m);
    }

    /// Each path carries the image lines measured for it under qemu, inside the modelled
    /// rodata, data and bss; a derived path carries those of the path it comes from.
    #[test]
    fn paths_carry_their_measured_image_lines_and_derived_ones_their_sources() {
        use super::{KERNEL_RODATA, LINE_BYTES};
        use crate::kernel::footprints::image_data::ImageData;
        use crate::kernel::memory::layout::{KERNEL_DATA, KERNEL_DATA_BYTES};
        let paths = crate::kernel::paths::recording::paths();
        let path = |n: &str| paths.get(paths.id(n).unwrap());
        for name in ["getppid", "fork", "mount-proc", "fault-anon"] {
            let m = ImageData::builtin().path(name).unwrap();
            let p = path(name);
            let want = m.rodata_lines.len() + m.data_lines.len() + m.bss_lines.len();
            assert_eq!(p.image_lines(), want, "{name}");
            for (page, lines) in &p.image {
                for &l in lines {
                    assert_eq!(l * LINE_BYTES / 4096 * 4096, *page);
                    let va = l * LINE_BYTES;
                    assert!((KERNEL_RODATA..KERNEL_DATA + KERNEL_DATA_BYTES).contains(&va));
                }
            }
        }
        assert_eq!(path("vfork").image, path("fork").image);
        assert_eq!(path("fault-zero").image, path("fault-anon").image);
    }

    /// A measured path runs its direct-map lines in the kernel heap, one model line per guest
    /// line (so two paths' common line, the task or per-CPU data, is one line in the caches),
    /// its stack's measured lines, and none of the estimated objects; a path the trace did
    /// not see keeps the estimate.
    #[test]
    fn measured_paths_run_their_direct_map_lines_in_the_shared_heap() {
        use super::{Object, LINE_BYTES};
        use crate::kernel::footprints::image_data::ImageData;
        use std::collections::BTreeSet;
        let paths = crate::kernel::paths::recording::paths();
        let path = |n: &str| paths.get(paths.id(n).unwrap());
        let heap_lines =
            |n: &str| -> BTreeSet<u64> { path(n).heap.lines.iter().copied().collect() };
        let guest_lines = |n: &str| -> BTreeSet<u64> {
            ImageData::builtin()
                .path(n)
                .unwrap()
                .direct_map_lines
                .iter()
                .copied()
                .collect()
        };
        for name in [
            "getppid",
            "getpid",
            "open-close",
            "fork",
            "exit",
            "ipi-tlb-flush",
        ] {
            let m = ImageData::builtin().path(name).unwrap();
            let p = path(name);
            assert_eq!(p.heap_lines(), m.direct_map_lines.len(), "{name}");
            assert_eq!(
                p.data,
                vec![(Object::KernelStack, m.stack_lines.len() as u64)]
            );
            for l in &p.heap.lines {
                let pa = l * LINE_BYTES;
                assert!(pa < paths.heap.bytes() && p.heap.pages.contains(&(pa / 4096 * 4096)));
            }
        }
        let common = |a: &str, b: &str| heap_lines(a).intersection(&heap_lines(b)).count();
        let guest_common = guest_lines("getppid")
            .intersection(&guest_lines("getpid"))
            .count();
        assert!(guest_common > 0);
        assert_eq!(common("getppid", "getpid"), guest_common);
        assert_eq!(path("vfork").heap, path("fork").heap);
        // Every recorded path has a window in the trace now: ptrace-stop laid out without
        // its entry stands for one that had none.
        let mut image = ImageData::builtin().clone();
        image.paths.remove("ptrace-stop");
        let f = super::Footprints::builtin();
        let bases = super::section_bases(&image).unwrap();
        let stop = f.path("ptrace-stop").unwrap();
        let unseen = super::layout(stop, f, &image, &bases, &super::KernelHeap::of(&image));
        let unseen = unseen.unwrap();
        assert!(unseen.heap.lines.is_empty());
        assert!(unseen.data.iter().any(|(o, _)| *o == Object::TaskStruct));
    }

    /// Each node has its own copy of the heap, and a path reads the copy of its CPU's node.
    #[test]
    fn a_path_reads_its_own_nodes_heap() {
        let m = machine::load("xeon-e5-2690v3-2s").unwrap();
        let mut k = Kernel::boot(m, defense::parse_list("none").unwrap());
        assert_eq!(k.kernel_heap.len(), 2);
        let id = k.paths.id("getppid").unwrap();
        let lines = k.paths.get(id).heap_lines() as u64;
        let t = k.spawn("t", None);
        for node in [0, 1] {
            let cpu = (0..k.cpus.len())
                .find(|&c| k.cpus[c].mmu.node() == node)
                .unwrap();
            k.switch_to(cpu, t);
            let heap = k.kernel_heap[node as usize];
            assert_eq!(k.mem.node_of(crate::arch::x86::PhysAddr(heap).pfn()), node);
            let heap_range = heap..heap + k.paths.heap.bytes();
            let p = k.paths.get(id).clone();
            k.run_path(cpu, id, Some(0.0)).unwrap();
            // Each line run is local, and now in L1 at its heap address.
            let mut found = 0;
            for &l in &p.heap.lines {
                let pa = heap_range.start + l * super::LINE_BYTES;
                let (core, socket, remote) = k.line_place(cpu, pa);
                assert!(!remote && heap_range.contains(&pa));
                let h = k.caches.load(core, socket, pa, remote);
                found += u64::from(h == crate::arch::caches::HitLevel::L1);
            }
            assert_eq!(found, lines, "node {node}");
        }
    }

    /// A page cleared with its lines in no cache waits 64 DRAM latencies over the core's
    /// lines in flight; cleared again, its lines are cached and the clear waits for nothing.
    #[test]
    fn cold_stores_wait_for_dram_at_the_rate_lines_in_flight_allow() {
        let mut m = machine::load("haswell-i7-4770").unwrap();
        for lines_in_flight in [10, 20] {
            m.memory.lines_in_flight = lines_in_flight;
            let mut k = Kernel::boot(m.clone(), defense::parse_list("none").unwrap());
            let pfn = k.alloc_page(0, Gfp::PageCache, None);
            let waited = |k: &Kernel| k.cpus[0].stats.time(TimeCategory::KernelCacheMiss);
            let before = waited(&k);
            k.store_lines(0, pfn.addr().0, 64);
            let cold = waited(&k) - before;
            let dram =
                m.memory.dram_local_ns * m.cpu.frequency_ghz - m.memory.l1d_hit_cycles as f64;
            let want = k.clock.cycles(64.0 * dram / lines_in_flight as f64);
            assert_eq!(cold, want, "{lines_in_flight} lines in flight");
            let stats = &k.cpus[0].stats;
            assert_eq!(stats.counter(Counter::KernelStoreLinesFromMemory), 64);
            let before = waited(&k);
            k.store_lines(0, pfn.addr().0, 64);
            assert_eq!(waited(&k) - before, crate::sim::Time::ZERO, "hot clear");
        }
    }
}
