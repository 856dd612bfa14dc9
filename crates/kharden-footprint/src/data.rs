//! The data side of a path's footprint. Object sizes are read from the running kernel
//! (/sys/kernel/slab/CACHE/object_size); which objects a path touches is an ESTIMATE read
//! from the Linux source (the functions the recorder saw sampled name the subsystems), since
//! cpu-clock samples instruction pointers, not data addresses.

/// Kernel objects a path may touch: (name, slab cache whose object_size gives its bytes, or
/// None with a fixed size and its source).
pub const OBJECTS: &[(&str, Option<&str>, u64, &str)] = &[
    ("task_struct", Some("task_struct"), 0, "slab"),
    ("mm_struct", Some("mm_struct"), 0, "slab"),
    ("vm_area_struct", Some("vm_area_struct"), 0, "slab"),
    ("maple_node", Some("maple_node"), 0, "slab (the VMA tree)"),
    ("file", Some("filp"), 0, "slab"),
    ("dentry", Some("dentry"), 0, "slab"),
    ("inode", Some("ext4_inode_cache"), 0, "slab (ext4)"),
    ("files_struct", Some("files_cache"), 0, "slab"),
    ("signal_struct", Some("signal_cache"), 0, "slab"),
    ("sighand_struct", Some("sighand_cache"), 0, "slab"),
    ("anon_vma", Some("anon_vma"), 0, "slab"),
    (
        "names_cache",
        Some("names_cache"),
        0,
        "slab (getname's path buffer)",
    ),
    // ESTIMATE: a syscall's deepest frames are a few hundred bytes to ~1.5 KiB of the
    // 16 KiB stack (x86-64 THREAD_SIZE, arch/x86/include/asm/page_64_types.h); 1 KiB.
    (
        "kernel_stack",
        None,
        1024,
        "ESTIMATE: used part of the 16 KiB stack",
    ),
    // ESTIMATE: current_task, cpu_tss_rw (the entry stack), the runqueue and per-CPU
    // counters: 8 lines of the per-CPU area (arch/x86/include/asm/current.h, processor.h).
    ("percpu", None, 512, "ESTIMATE: 8 lines of the per-CPU area"),
    (
        "page_cache_page",
        None,
        4096,
        "one 4 KiB page copied to or from user",
    ),
    (
        "user_page",
        None,
        4096,
        "one 4 KiB user page zeroed or copied",
    ),
    // A fault walks PGD/P4D/PUD/PMD/PTE: one line of each of 4 levels (x86-64, 4-level).
    ("page_table_lines", None, 256, "4 levels x one 64-byte line"),
];

/// Which objects each path touches. ESTIMATE from the source of the paths the samples show
/// (kernel/sys.c, fs/read_write.c, fs/open.c, fs/namei.c, mm/mmap.c, mm/memory.c,
/// kernel/fork.c, kernel/exit.c, kernel/sched/core.c).
pub fn objects(path: &str) -> Vec<&'static str> {
    // Every path from user mode: current, its stack, this CPU's area.
    const ENTRY: &[&str] = &["task_struct", "kernel_stack", "percpu"];
    const FD: &[&str] = &["files_struct", "file"];
    const PAGE_CACHE: &[&str] = &["inode", "page_cache_page"];
    const LOOKUP: &[&str] = &["dentry", "inode", "names_cache"];
    const VM: &[&str] = &["mm_struct", "vm_area_struct", "maple_node"];
    const WALK: &[&str] = &["page_table_lines"];
    const PROCESS: &[&str] = &[
        "files_struct",
        "signal_struct",
        "sighand_struct",
        "anon_vma",
    ];
    let groups: &[&[&str]] = match path {
        "rt_sigaction" => &[ENTRY, &["sighand_struct"]],
        "lseek" | "read-1" | "read-8k" | "write-1" | "fcntl" | "close" => &[ENTRY, FD],
        "read-4k-file" | "write-4k-file" | "pread64-4k" | "pwrite64-4k" | "read-4k-tmpfs"
        | "write-4k-tmpfs" | "read-pipe-4k" | "write-pipe-4k" => &[ENTRY, FD, PAGE_CACHE],
        "openat-1" | "newfstatat-1" | "openat-enoent" => &[ENTRY, FD, LOOKUP],
        "getdents64-small" | "getdents64-large" => &[ENTRY, FD, &["dentry", "inode"]],
        "open-close" | "openat" | "newfstatat" | "access" | "readlink" | "getcwd" => {
            &[ENTRY, FD, LOOKUP]
        }
        "mmap" | "munmap" | "mprotect" | "brk" | "mprotect-shootdown" => &[ENTRY, VM, WALK],
        "ipi-tlb-flush" => &[&["kernel_stack", "percpu", "mm_struct"]],
        "fault-anon" | "fault-cow" => &[ENTRY, VM, &["anon_vma"], WALK, &["user_page"]],
        "fault-file" => &[ENTRY, VM, &["inode"], WALK],
        "context-switch" => &[ENTRY, &["mm_struct"]],
        "fork" | "exit" | "wait4" | "execve" => &[ENTRY, VM, PROCESS, WALK],
        // ptrace_check_attach, ptrace_resume and wake_up_state on the tracee; do_wait and
        // wait_task_stopped on the tracee's task and signal state; the switches' mm.
        "ptrace-singlestep" => &[ENTRY, &["signal_struct", "sighand_struct", "mm_struct"]],
        // exc_debug_user → send_sigtrap → ptrace_stop → do_notify_parent_cldstop: both
        // tasks' signal state, the switch to the tracer.
        "ptrace-stop" => &[ENTRY, &["signal_struct", "sighand_struct", "mm_struct"]],
        // kill_pid_info → do_send_sig_info → lock_task_sighand, the sigqueue on the target's
        // shared pending list (signal_struct), complete_signal, try_to_wake_up (the other
        // CPU's runqueue is per-CPU data).
        "kill" => &[ENTRY, &["signal_struct", "sighand_struct"]],
        // get_signal under siglock: the action (sighand_struct), the pending lists
        // (signal_struct and the task's own), the new blocked mask; the frame on the user
        // stack (siginfo, ucontext, the XSAVE area) is user memory the model does not charge.
        "signal-deliver" => &[ENTRY, &["signal_struct", "sighand_struct"]],
        // restore_sigcontext, restore_altstack, set_current_blocked under siglock.
        "rt_sigreturn" => &[ENTRY, &["sighand_struct"]],
        // The target's lookup (getname, path walk); the new mount, super_block and procfs
        // root have no object of their own in [objects]: the dentry and inode lines stand
        // for them.
        "mount-proc" | "umount" => &[ENTRY, LOOKUP],
        // mmap's, then the populate's fault on a zeroed page (fault-anon's objects).
        "mmap-locked" => &[ENTRY, VM, &["anon_vma"], WALK, &["user_page"]],
        _ => &[ENTRY],
    };
    let mut names: Vec<&str> = Vec::new();
    for name in groups.iter().flat_map(|g| g.iter()) {
        if !names.contains(name) {
            names.push(name);
        }
    }
    names
}

/// The bytes of each object on this host (slab object sizes read now; fixed ones as listed).
pub fn object_sizes() -> Vec<(&'static str, u64, String)> {
    OBJECTS
        .iter()
        .map(|&(name, cache, fixed, source)| match cache {
            Some(c) => {
                let file = format!("/sys/kernel/slab/{c}/object_size");
                match std::fs::read_to_string(&file)
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                {
                    Some(bytes) => (name, bytes, format!("{file} on the recording host")),
                    None => (name, 0, format!("{file} unreadable: unknown")),
                }
            }
            None => (name, fixed, source.to_string()),
        })
        .collect()
}
