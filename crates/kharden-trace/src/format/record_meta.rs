//! What a recording knows beyond its events: the kind of descriptor each syscall used
//! (carried by SysExit), the recorder's own cost measured on the recording host, and the
//! command's untraced runs (both in the metadata). FORMAT.md has the encodings.

use serde::{Deserialize, Serialize};

/// What a file descriptor referred to when a syscall used it (FORMAT.md, "Descriptor kinds").
/// The kernel runs different code for each: a read of /dev/zero clears the user buffer, a
/// read of a regular file copies page-cache pages, a pipe read takes the pipe's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum FdKind {
    /// Not known (no descriptor, a version 2 trace, or a descriptor whose origin the
    /// recorder did not see).
    #[default]
    Unknown,
    /// A regular file of a disk filesystem (ext4, xfs, btrfs, overlayfs): page cache.
    File,
    /// A regular file of tmpfs or shmem (memfd): page cache without a disk behind it.
    Tmpfs,
    Dir,
    /// A pipe or FIFO.
    Pipe,
    /// /dev/zero (character device 1:5).
    DevZero,
    /// /dev/null (character device 1:3).
    DevNull,
    /// Another character or block device (a terminal, /dev/urandom).
    Device,
    Socket,
    /// An anonymous inode: eventfd, epoll, timerfd, signalfd, pidfd.
    AnonInode,
    /// A file of a pseudo filesystem (procfs, sysfs, cgroupfs, debugfs).
    Pseudo,
}

impl FdKind {
    pub const ALL: [FdKind; 11] = [
        FdKind::Unknown,
        FdKind::File,
        FdKind::Tmpfs,
        FdKind::Dir,
        FdKind::Pipe,
        FdKind::DevZero,
        FdKind::DevNull,
        FdKind::Device,
        FdKind::Socket,
        FdKind::AnonInode,
        FdKind::Pseudo,
    ];

    pub fn code(self) -> u8 {
        FdKind::ALL.iter().position(|&k| k == self).expect("listed") as u8
    }

    pub fn from_code(c: u64) -> Option<FdKind> {
        FdKind::ALL.get(usize::try_from(c).ok()?).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            FdKind::Unknown => "unknown",
            FdKind::File => "file",
            FdKind::Tmpfs => "tmpfs",
            FdKind::Dir => "directory",
            FdKind::Pipe => "pipe",
            FdKind::DevZero => "/dev/zero",
            FdKind::DevNull => "/dev/null",
            FdKind::Device => "device",
            FdKind::Socket => "socket",
            FdKind::AnonInode => "anon-inode",
            FdKind::Pseudo => "pseudo-fs",
        }
    }

    /// The kind of an open file from its `st_mode`, `st_rdev` and its filesystem's magic
    /// (`statfs.f_type`, include/uapi/linux/magic.h).
    pub fn of_file(mode: u32, rdev: u64, fs_magic: u64) -> FdKind {
        const TMPFS: u64 = 0x0102_1994;
        const PSEUDO: &[u64] = &[
            0x9fa0,      // procfs
            0x6265_6572, // sysfs
            0x6367_7270, // cgroup2
            0x0027_e0eb, // cgroup
            0x6462_6720, // debugfs
            0x7472_6163, // tracefs
            0x1cd1,      // devpts
            0x7363_6673, // securityfs
            0xcafe_4a11, // bpf
            0x6265_6570, // configfs
        ];
        let (major, minor) = (libc::major(rdev), libc::minor(rdev));
        match mode & libc::S_IFMT {
            libc::S_IFDIR => FdKind::Dir,
            libc::S_IFIFO => FdKind::Pipe,
            libc::S_IFSOCK => FdKind::Socket,
            libc::S_IFCHR if (major, minor) == (1, 5) => FdKind::DevZero,
            libc::S_IFCHR if (major, minor) == (1, 3) => FdKind::DevNull,
            libc::S_IFCHR | libc::S_IFBLK => FdKind::Device,
            libc::S_IFREG if fs_magic == TMPFS => FdKind::Tmpfs,
            libc::S_IFREG if PSEUDO.contains(&fs_magic) => FdKind::Pseudo,
            libc::S_IFREG => FdKind::File,
            _ => FdKind::AnonInode,
        }
    }
}

/// What a syscall's descriptor referred to, and for a call that opened a path, how many
/// components the kernel walked to reach it (0: not an open, or not known).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Target {
    pub kind: FdKind,
    pub depth: u16,
}

impl Target {
    pub fn of(kind: FdKind) -> Target {
        Target { kind, depth: 0 }
    }
}

/// The recorder's own cost on the recording host, measured when the trace was recorded by
/// timing one loop with and without the recording's tracepoints (FORMAT.md, "The recorder's
/// cost"). Each figure comes with its standard error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracerCost {
    /// Time inside each syscall's recorded kernel interval (sys_enter to sys_exit) that the
    /// untraced call does not spend there: the two tracepoints' work on that side of their
    /// timestamps.
    pub syscall_kernel_ns: f64,
    pub syscall_kernel_se_ns: f64,
    /// Time in the user intervals around each syscall that is not user work untraced: the
    /// tracepoints' work on that side, and the entry and exit code outside them (which a
    /// replay's model charges as the syscall's).
    pub syscall_user_ns: f64,
    pub syscall_user_se_ns: f64,
    /// The cost of any other recorded event (a fault, a page allocation or free, a TLB
    /// flush, a context switch), in whichever interval it falls.
    pub event_ns: f64,
    pub event_se_ns: f64,
    /// What a process's life (fork, exec, exit) costs beyond its syscalls' and events'
    /// figures: the side-band records perf writes for a sampling event (the task's fork,
    /// comm, mappings and exit), charged to its exec. Zero in a trace recorded before it
    /// was measured, or where the loop found no /bin/true to run.
    #[serde(default)]
    pub process_ns: f64,
    #[serde(default)]
    pub process_se_ns: f64,
    /// The untraced empty syscall's round trip less the loop's own user work: the entry
    /// and exit code a replay's model charges per syscall.
    pub entry_exit_ns: f64,
    /// The calibration loop's user work per iteration, untraced.
    pub user_loop_ns: f64,
    /// How it was measured.
    pub method: String,
}

impl TracerCost {
    /// The per-call and per-event figures the calibration measured below zero (name,
    /// figure, its standard error): noise around a cost too small to see, which a replay
    /// takes as no cost and says so.
    pub fn negative(&self) -> Vec<(&'static str, f64, f64)> {
        [
            (
                "syscall kernel side",
                self.syscall_kernel_ns,
                self.syscall_kernel_se_ns,
            ),
            (
                "syscall user side",
                self.syscall_user_ns,
                self.syscall_user_se_ns,
            ),
            ("other events", self.event_ns, self.event_se_ns),
            ("each process", self.process_ns, self.process_se_ns),
            ("entry and exit", self.entry_exit_ns, 0.0),
        ]
        .into_iter()
        .filter(|&(_, ns, _)| ns < 0.0)
        .collect()
    }
}

/// One run of the command without tracepoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UntracedRun {
    pub elapsed_ns: u64,
    /// wait4()'s rusage of the command: its own CPU time and that of every child it waited
    /// for. The total is the scheduler's exact runtime; the split between user and system
    /// is the timer tick's sample (kernel/sched/cputime.c, cputime_adjust()).
    pub user_ns: u64,
    pub system_ns: u64,
    /// How long the run waited for a CPU (its cgroup's cpu.pressure "some" total: runnable
    /// but not running, other tenants' work on a shared host), when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait_ns: Option<u64>,
}

/// The command run without tracepoints, after the recording.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Untraced {
    pub runs: Vec<UntracedRun>,
    /// One more untraced run's cpu-clock samples by the mode they interrupted: the split
    /// between user and system that rusage only samples per process at the tick (a
    /// short-lived child with no kernel-mode tick is all user there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<CpuSamples>,
}

impl Untraced {
    /// The median run by elapsed time.
    pub fn median(&self) -> Option<UntracedRun> {
        let mut runs = self.runs.clone();
        runs.sort_by_key(|r| r.elapsed_ns);
        runs.get(runs.len() / 2).copied()
    }

    /// What an untraced run spends in user mode: the runs' median CPU time (the scheduler's
    /// exact runtime) times the sampled run's user share; without samples, the runs' median
    /// rusage user time.
    pub fn user_ns(&self) -> Option<f64> {
        let median = |mut v: Vec<u64>| {
            v.sort_unstable();
            v.get(v.len() / 2).map(|&x| x as f64)
        };
        match self.sampled.filter(|s| s.user + s.kernel > 0) {
            Some(s) => {
                let cpu = median(self.runs.iter().map(|r| r.user_ns + r.system_ns).collect())?;
                Some(cpu * s.user as f64 / (s.user + s.kernel) as f64)
            }
            None => median(self.runs.iter().map(|r| r.user_ns).collect()),
        }
    }
}

/// The recording's cpu-clock samples of the command, by the mode they interrupted: its user
/// time in the traced run (`user` samples of `period_ns` each), which the recorder's work,
/// all in the kernel, is never part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CpuSamples {
    pub period_ns: u64,
    pub user: u64,
    pub kernel: u64,
}

impl CpuSamples {
    /// The user time they measure, and its standard error (Poisson), in ns.
    pub fn user_ns(&self) -> (f64, f64) {
        let p = self.period_ns as f64;
        (self.user as f64 * p, (self.user as f64).sqrt() * p)
    }
}

#[cfg(test)]
mod tests {
    use super::{CpuSamples, TracerCost, Untraced, UntracedRun};

    #[test]
    fn untraced_user_time_is_the_sampled_share_of_the_median_cpu_else_rusage() {
        let run = |user_ns, system_ns| UntracedRun {
            elapsed_ns: 0,
            user_ns,
            system_ns,
            cpu_wait_ns: None,
        };
        let mut u = Untraced {
            runs: vec![run(90, 10), run(70, 10), run(100, 20)],
            sampled: None,
        };
        assert_eq!(u.user_ns(), Some(90.0), "rusage's median user time");
        u.sampled = Some(CpuSamples {
            period_ns: 1,
            user: 1,
            kernel: 3,
        });
        assert_eq!(
            u.user_ns(),
            Some(25.0),
            "a quarter of the median 100 ns of CPU"
        );
        assert_eq!(Untraced::default().user_ns(), None);
    }

    #[test]
    fn a_cost_measured_below_zero_is_named() {
        let t = TracerCost {
            syscall_kernel_ns: 120.0,
            syscall_kernel_se_ns: 3.0,
            syscall_user_ns: -4.0,
            syscall_user_se_ns: 5.0,
            event_ns: 0.0,
            event_se_ns: 1.0,
            process_ns: 0.0,
            process_se_ns: 0.0,
            entry_exit_ns: 90.0,
            user_loop_ns: 2.0,
            method: String::new(),
        };
        assert_eq!(t.negative(), vec![("syscall user side", -4.0, 5.0)]);
    }
}
