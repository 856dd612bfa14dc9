//! The table of kernel paths, built once per recording (paths/recording.rs) from its
//! footprints (kernels/linux-*.toml, kernel/footprints/footprint.rs): each path laid out for
//! the simulator, its text lines by 4 KiB page, the image's rodata, data and bss lines and the
//! direct-map lines measured for it under qemu (kernel/footprints/image_data.rs), placed in a
//! kernel heap, or, for a path the trace did not see, the kernel objects chosen for it from
//! the source (ESTIMATE). paths/run.rs runs them.
//!
//! A path's time beyond what its touches cost on a machine is its work: its native latency on
//! the recording host, minus what an empty syscall costs there (a target machine charges that
//! as its own SYSCALL round trip), minus the modelled memory time of the same warm loop on
//! the recording host's caches (the rule of docs/design/kernel-paths.md section 3). Work is
//! carried in core cycles, unchanged from machine to machine: the instructions are the same,
//! and the recording host's IPC stands for the target's (an ESTIMATE the design note
//! discusses).

use crate::arch::caches::CacheHierarchy;
use crate::error::{Error, Result};
use crate::kernel::footprints::footprint::Footprints;
use crate::kernel::footprints::image_data::{ImageData, PathData};
use crate::kernel::footprints::path_footprint::{PathFootprint, LINE_BYTES, PAGE_BYTES};
use crate::kernel::memory::layout::{
    KERNEL_BSS, KERNEL_DATA, KERNEL_DATA_BYTES, KERNEL_RODATA, KERNEL_RODATA_BYTES,
    KERNEL_STACK_BYTES, KERNEL_TEXT, KERNEL_TEXT_BYTES,
};
use crate::kernel::mitigations::{Mitigation, MitigationCycles};
use crate::machine::MachineProfile;

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
pub(super) const SLOT_LINES: u64 = 8;
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

    /// The 2 MiB page of kernel text that holds the entry code (the only kernel text that
    /// user page tables map under PTI unless the whole image is cloned).
    pub fn entry_text_page(&self) -> crate::arch::x86::VirtAddr {
        crate::arch::x86::VirtAddr(KERNEL_TEXT + self.entry_text_offset)
            .align_down(crate::arch::x86::PageSize::Size2M)
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
                stall += caches.line_stall(h, i > 0 && lines[i - 1] + 1 == l);
            }
        }
        for (i, &(_, lines)) in p.data.iter().enumerate() {
            for l in 0..lines {
                let pa = data_base + i as u64 * PAGE_BYTES + l * LINE_BYTES;
                let h = caches.load(0, 0, pa, false);
                stall += caches.line_stall(h, false);
            }
        }
        for &l in p.image.iter().flat_map(|(_, lines)| lines) {
            let h = caches.load(0, 0, l * LINE_BYTES - KERNEL_TEXT, false);
            stall += caches.line_stall(h, false);
        }
        for &l in &p.heap.lines {
            let h = caches.load(0, 0, heap_base + l * LINE_BYTES, false);
            stall += caches.line_stall(h, false);
        }
        stall
    };
    run(caches);
    run(caches);
    run(caches)
}

#[cfg(test)]
mod tests {

    /// A latency timed apart from the recording gives a path the work its recorded latency
    /// would: the recorded one gives back the path's own work, and each ns more is a
    /// recording-host cycle's worth more work.
    #[test]
    fn a_latency_timed_apart_derives_work_by_the_recordings_rule() {
        let committed = crate::kernel::paths::recording::Recording::committed();
        let (paths, ghz) = (&committed.paths, committed.footprints.kernel.host_ghz);
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

    /// Each path carries the image lines measured for it under qemu, inside the modelled
    /// rodata, data and bss; a derived path carries those of the path it comes from.
    #[test]
    fn paths_carry_their_measured_image_lines_and_derived_ones_their_sources() {
        use super::{KERNEL_RODATA, LINE_BYTES};
        use crate::kernel::footprints::image_data::ImageData;
        use crate::kernel::memory::layout::{KERNEL_DATA, KERNEL_DATA_BYTES};
        let paths = &crate::kernel::paths::recording::Recording::committed().paths;
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
        let paths = &crate::kernel::paths::recording::Recording::committed().paths;
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
}
