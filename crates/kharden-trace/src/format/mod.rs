//! kharden's trace format: a magic and version header, a JSON metadata block, then a stream
//! of compact records (varint-encoded deltas) ending in an `End` record. See FORMAT.md.
//!
//! [`TraceWriter`] writes events; [`TraceReader`] is an iterator over them. The reader keeps
//! only the live tasks, the string table and one block, so its memory is bounded by what is
//! alive at one time, not by the trace's length.
//!
//! Files: block.rs (checksummed framing), writer.rs and reader.rs (the header and the record
//! loop), then one file per family of record types, each holding that family's encoding and
//! decoding with its semantic checks: task.rs, sched.rs, syscall.rs, memory.rs; what a
//! recording knows beyond its events (the tracer's own cost, the untraced runs, descriptor
//! kinds) is in record_meta.rs.

mod block;
mod memory;
mod reader;
mod record_meta;
mod sched;
mod syscall;
mod task;
mod varint;
mod writer;

pub use block::MAX_BLOCK_BYTES;
pub use reader::{TraceError, TraceReader};
pub use record_meta::{CpuSamples, FdKind, Target, TracerCost, Untraced, UntracedRun};
pub use writer::TraceWriter;

use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub const MAGIC: &[u8; 8] = b"KHTRACE\0";
/// The version written. Version 3 added the syscall arguments to SysEnter and the kind of
/// the descriptor a syscall used to SysExit; version 2 (the same records without them) is
/// still read, its syscalls with no arguments and unknown descriptors. Version 2 added the
/// metadata checksum and checksummed blocks; version 1 is refused.
pub const VERSION: u16 = 3;
/// The oldest version read.
pub const OLDEST_READ: u16 = 2;

/// Limits a reader enforces so that no input can make it allocate without bound.
pub const MAX_META_BYTES: u32 = 1 << 20;
pub const MAX_STRING_BYTES: u64 = 4096;
pub const MAX_STRING_TABLE_BYTES: u64 = 64 << 20;
pub const MAX_SLOTS: u64 = 1 << 20;
pub const MAX_CPU: u64 = 1 << 16;
/// Largest page order: Linux's buddy allocator stops at MAX_PAGE_ORDER (10 on x86-64,
/// include/linux/mmzone.h; at most 15 on any configuration), gigantic 1 GiB pages are order
/// 18 with 4 KiB pages; 20 leaves room and keeps 2^order small enough to count.
pub const MAX_ORDER: u8 = 20;
/// Latest event time: 2^52 ns (52 days) is far beyond any recording, keeps every time exact
/// in an f64, and leaves sums of durations far from overflowing.
pub const MAX_TIME_NS: u64 = 1 << 52;
/// Largest ranged flush: 2^36 4 KiB pages cover a 48-bit address space (u64::MAX = all).
pub const MAX_FLUSH_PAGES: u64 = 1 << 36;
/// Largest sum of Lost counts: 2^48 events (no recording holds more).
pub const MAX_LOST_TOTAL: u64 = 1 << 48;

/// Record opcodes (FORMAT.md, "Records").
mod op {
    pub const END: u8 = 0x00;
    pub const STR_DEF: u8 = 0x01;
    pub const SYS_NAME: u8 = 0x02;
    pub const TASK_NEW: u8 = 0x03;
    pub const EXEC: u8 = 0x04;
    pub const EXIT: u8 = 0x05;
    pub const SWITCH_IN: u8 = 0x06;
    pub const SWITCH_OUT: u8 = 0x07;
    pub const MIGRATE: u8 = 0x08;
    pub const SYS_ENTER: u8 = 0x09;
    pub const SYS_EXIT: u8 = 0x0a;
    pub const PAGE_ALLOC: u8 = 0x0b;
    pub const PAGE_FREE: u8 = 0x0c;
    pub const TLB_FLUSH: u8 = 0x0d;
    pub const PAGE_FAULT: u8 = 0x0e;
    pub const LOST: u8 = 0x0f;
}

fn op_name(o: u8) -> &'static str {
    match o {
        op::END => "End",
        op::STR_DEF => "StrDef",
        op::SYS_NAME => "SysName",
        op::TASK_NEW => "TaskNew",
        op::EXEC => "Exec",
        op::EXIT => "Exit",
        op::SWITCH_IN => "SwitchIn",
        op::SWITCH_OUT => "SwitchOut",
        op::MIGRATE => "Migrate",
        op::SYS_ENTER => "SysEnter",
        op::SYS_EXIT => "SysExit",
        op::PAGE_ALLOC => "PageAlloc",
        op::PAGE_FREE => "PageFree",
        op::TLB_FLUSH => "TlbFlush",
        op::PAGE_FAULT => "PageFault",
        op::LOST => "Lost",
        _ => "unknown",
    }
}

/// What the recording was: free-form facts kept in the header as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The recorded command line.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub hostname: String,
    /// Kernel release the trace was recorded on (`uname -r`).
    #[serde(default)]
    pub kernel: String,
    #[serde(default)]
    pub perf_version: String,
    #[serde(default)]
    pub nr_cpus: u32,
    /// perf's timestamp (CLOCK_MONOTONIC ns) of time 0 of the trace.
    #[serde(default)]
    pub base_time_ns: u64,
    /// The tracepoints perf recorded.
    #[serde(default)]
    pub tracepoints: Vec<String>,
    /// How GFP flags were decoded into classes (bit positions, and where they came from).
    #[serde(default)]
    pub gfp_bits: String,
    /// The recorder's own cost on the recording host, measured when the trace was recorded
    /// (None: not measured; a replay then takes the intervals as recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracer: Option<TracerCost>,
    /// The command run without tracepoints: what a replay on the recording host should
    /// give back (None: not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untraced: Option<Untraced>,
    /// The recording's cpu-clock samples of the command by mode (None: not sampled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_samples: Option<CpuSamples>,
    /// How the kinds of the descriptors syscalls used were found (FORMAT.md, "Descriptor
    /// kinds"); empty when they were not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fd_kinds: String,
}

/// The allocation classes the simulator's page allocator knows (FORMAT.md, "GFP classes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GfpClass {
    /// Anonymous user memory (zeroed anon pages, COW copies, THP, shmem).
    UserAnon,
    /// Page cache (file reads, readahead, writes).
    PageCache,
    /// Everything not movable: slab, page tables, kernel stacks, pipe buffers, ...
    Kernel,
}

impl GfpClass {
    pub const ALL: [GfpClass; 3] = [GfpClass::UserAnon, GfpClass::PageCache, GfpClass::Kernel];
    pub fn code(self) -> u8 {
        match self {
            GfpClass::UserAnon => 0,
            GfpClass::PageCache => 1,
            GfpClass::Kernel => 2,
        }
    }
    pub fn from_code(c: u64) -> Option<GfpClass> {
        match c {
            0 => Some(GfpClass::UserAnon),
            1 => Some(GfpClass::PageCache),
            2 => Some(GfpClass::Kernel),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            GfpClass::UserAnon => "user-anon",
            GfpClass::PageCache => "page-cache",
            GfpClass::Kernel => "kernel",
        }
    }
}

/// Linux's `enum tlb_flush_reason` (include/linux/mm_types.h), as recorded by `tlb:tlb_flush`.
pub fn tlb_flush_reason_name(reason: u32) -> &'static str {
    match reason {
        0 => "flush on task switch",
        1 => "remote shootdown",
        2 => "local shootdown",
        3 => "local MM shootdown",
        4 => "remote IPI send",
        5 => "remote wrong CPU",
        _ => "unknown reason",
    }
}

/// `prev_state` of `sched_switch` as the kernel reports it: 0 means the task was preempted
/// while runnable; other values are TASK_* bits (1 = S, 2 = D, 0x10/0x20 = X/Z, ...).
pub fn task_state_letter(state: u64) -> char {
    if state == 0 {
        return 'R';
    }
    // Lowest set bit, in the kernel's TASK_REPORT order "SDTtXZPI".
    let letters = ['S', 'D', 'T', 't', 'X', 'Z', 'P', 'I'];
    let i = state.trailing_zeros() as usize;
    letters.get(i).copied().unwrap_or('?')
}

/// One thing a task did. Strings are shared (`Arc<str>`); nothing else allocates.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The task appeared: forked from `parent` (a tid; `None` for the recorded command itself).
    /// `pid` is its thread-group id: `pid != tid` means a thread sharing its group's mm.
    TaskNew {
        pid: u32,
        parent: Option<u32>,
        comm: Arc<str>,
    },
    /// `execve` succeeded with this file name.
    Exec {
        filename: Arc<str>,
    },
    /// The task is gone (recorded at its last switch-out; nothing follows for this tid).
    Exit,
    /// The task started running on `cpu`.
    SwitchIn {
        cpu: u32,
    },
    /// The task stopped running; `state` is sched_switch's `prev_state` (0 = preempted).
    SwitchOut {
        state: u64,
    },
    /// The scheduler moved the task.
    Migrate {
        from: u32,
        to: u32,
    },
    /// `raw_syscalls:sys_enter`: the syscall's number and its six arguments (all zero in a
    /// version 2 trace).
    SysEnter {
        nr: u32,
        args: [u64; 6],
    },
    /// `raw_syscalls:sys_exit`: its return value, and what its descriptor referred to (the
    /// descriptor argument's, or for a call that makes one, the new descriptor's).
    SysExit {
        nr: u32,
        ret: i64,
        target: Target,
    },
    /// Pages allocated in the task's context (`kmem:mm_page_alloc`): 2^order pages at `pfn`.
    PageAlloc {
        pfn: u64,
        order: u8,
        gfp: u64,
        class: GfpClass,
    },
    PageFree {
        pfn: u64,
        order: u8,
    },
    /// `tlb:tlb_flush` on `cpu` (the task was running there, or it was the CPU's lazy-TLB mm
    /// owner while idle). `pages == u64::MAX` is TLB_FLUSH_ALL.
    TlbFlush {
        cpu: u32,
        reason: u32,
        pages: u64,
    },
    /// `exceptions:page_fault_{user,kernel}`.
    PageFault {
        user: bool,
        address: u64,
        error_code: u64,
    },
    /// perf lost this many events (ring buffer overflow); `tid` is 0.
    Lost {
        count: u64,
    },
}

impl Op {
    /// A SysEnter whose arguments do not matter.
    pub fn sys_enter(nr: u32) -> Op {
        Op::SysEnter { nr, args: [0; 6] }
    }

    /// A SysExit whose descriptor is unknown.
    pub fn sys_exit(nr: u32, ret: i64) -> Op {
        Op::SysExit {
            nr,
            ret,
            target: Target::default(),
        }
    }
}

/// One record of a trace. `time_ns` counts from the trace's start (`Meta::base_time_ns`).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub time_ns: u64,
    pub tid: u32,
    pub op: Op,
}

/// Opens a trace file for streaming.
pub fn open(
    path: &std::path::Path,
) -> Result<TraceReader<std::io::BufReader<std::fs::File>>, TraceError> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| TraceError::Io {
        name: name.clone(),
        msg: e.to_string(),
    })?;
    TraceReader::new(std::io::BufReader::new(f), &name)
}

/// Appends one checksummed block holding `payload` (tests build damaged traces with it).
#[doc(hidden)]
pub fn write_raw_block(out: &mut Vec<u8>, payload: &[u8]) {
    block::write_block(out, payload).expect("writing to a Vec");
}

/// Reads `data` as a trace to its end or its first error (the fuzz target's body). Returns
/// the number of events read. Never panics.
#[doc(hidden)]
pub fn fuzz_read(data: &[u8]) -> u64 {
    let Ok(r) = TraceReader::new(data, "fuzz") else {
        return 0;
    };
    let mut n = 0;
    for e in r {
        match e {
            Ok(_) => n += 1,
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.contains('\n'), "error message spans lines: {msg}");
                break;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests;
