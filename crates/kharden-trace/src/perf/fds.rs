//! The recorded command's descriptor tables, rebuilt from its syscalls so that each syscall
//! can say what its descriptor referred to (FORMAT.md, "Descriptor kinds").
//!
//! A table belongs to a process (its threads share it) and is copied at fork. Descriptors
//! enter it from the command's start (the recorder's look at /proc, `InheritedFd`), from the
//! calls that open a path (their kind is the recorder's fanotify event for that open,
//! `OpenEvent`, matched to it by `match_opens`), and from the calls that return one (socket,
//! eventfd, dup, fcntl's F_DUPFD); pipe(2) and socketpair(2) write theirs to user memory, so
//! those are the two lowest free numbers, as the kernel's alloc_fd() picks them. exec drops
//! the close-on-exec ones. Memory: the live processes' open descriptors.

use crate::format::{FdKind, Target};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// One open of a path by a task, as the recorder's fanotify watch saw it (a task's events
/// in the order it made them). fanotify reports regular files and directories only: the
/// kernel opens character devices, FIFOs and sockets without notifying.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenEvent {
    pub tid: u32,
    pub kind: FdKind,
    /// The opened file's absolute path (empty when the recorder could not read it).
    pub path: Arc<str>,
    /// CLOCK_MONOTONIC ns when the watch read it (events read together share it).
    pub read_ns: u64,
}

/// A task's call that opens a path, as the trace records it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenCall {
    /// CLOCK_MONOTONIC ns of its sys_enter.
    pub enter_ns: u64,
    /// It succeeded and was not O_PATH: it notified, unless it opened a special file.
    pub may_notify: bool,
}

/// Gives each watched open event to the call that made it: among a task's calls that may
/// have notified and had entered when the watch read the event, after the call the
/// previous event went to, the latest ones (an event read with b others goes to the last
/// b such calls). The watch reads an event within microseconds of its making (its thread
/// runs at real-time priority), so an earlier call that entered before it and got no event
/// opened a special file; a call between two events' that entered before the second was
/// read is the one error this admits (a file opened within the watch's latency after a
/// special file). Returns the matches by (tid, sys_enter time) and the events left over.
pub fn match_opens(
    events: &[OpenEvent],
    calls: &HashMap<u32, Vec<OpenCall>>,
) -> (HashMap<(u32, u64), OpenEvent>, u64) {
    let mut by_tid: HashMap<u32, Vec<&OpenEvent>> = HashMap::new();
    for e in events {
        if calls.contains_key(&e.tid) {
            by_tid.entry(e.tid).or_default().push(e);
        }
    }
    let mut matched = HashMap::new();
    let mut left = 0;
    for (tid, evs) in by_tid {
        let calls: Vec<&OpenCall> = calls[&tid].iter().filter(|c| c.may_notify).collect();
        let mut next = 0;
        let mut at = 0;
        while at < evs.len() {
            let read = evs[at].read_ns;
            let batch = evs[at..].iter().take_while(|e| e.read_ns == read).count();
            let entered = calls[next..]
                .iter()
                .take_while(|c| c.enter_ns <= read)
                .count();
            let take = batch.min(entered);
            left += (batch - take) as u64;
            let first = next + entered - take;
            // Paired from the end: the batch's last events with the last calls.
            for (k, e) in evs[at + batch - take..at + batch].iter().enumerate() {
                matched.insert((tid, calls[first + k].enter_ns), (*e).clone());
            }
            next += entered;
            at += batch;
        }
    }
    (matched, left)
}

/// A descriptor the command started with.
#[derive(Debug, Clone, PartialEq)]
pub struct InheritedFd {
    pub fd: u32,
    pub kind: FdKind,
    pub cloexec: bool,
    pub path: Arc<str>,
}

/// A descriptor of one of the command's processes as the recorder's scan of /proc saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct FdSeen {
    pub pid: u32,
    pub fd: u32,
    pub kind: FdKind,
    pub path: Arc<str>,
    /// CLOCK_MONOTONIC ns of the look.
    pub at_ns: u64,
}

/// What the recorder saw beside perf: the command's descriptors and working directory at its
/// start, every open of a path on the host during the recording, and the command's
/// descriptors as a scan of /proc saw them.
#[derive(Debug, Clone, Default)]
pub struct Descriptors {
    pub inherited: Vec<InheritedFd>,
    pub cwd: Option<Arc<str>>,
    pub opens: Vec<OpenEvent>,
    pub seen: Vec<FdSeen>,
    /// Mounts the watch could not mark (their opens are not seen).
    pub unwatched_mounts: Vec<String>,
}

/// How long after a descriptor was made a scan's look at its number still counts as a look
/// at it, when the look came after the use in question (the scan looks every millisecond,
/// at a special file every 20 ms even when its name is unchanged; the number could have
/// been closed and reused meanwhile, which this bounds).
const SEEN_AFTER_NS: u64 = 30_000_000;

#[derive(Debug, Clone)]
struct Entry {
    kind: FdKind,
    cloexec: bool,
    path: Option<Arc<str>>,
    /// CLOCK_MONOTONIC ns of the call that made it (0: the command started with it).
    made_ns: u64,
}

#[derive(Debug, Clone, Default)]
struct Table {
    fds: BTreeMap<u32, Entry>,
    cwd: Option<Arc<str>>,
    /// Tasks using this table.
    users: u32,
}

impl Table {
    /// The lowest descriptor number not in use (the kernel's choice for a new one).
    fn lowest_free(&self) -> u32 {
        let mut n = 0;
        for &fd in self.fds.keys() {
            if fd != n {
                break;
            }
            n += 1;
        }
        n
    }
}

/// How well the descriptors were followed.
#[derive(Debug, Clone, Copy, Default)]
pub struct FdCounts {
    pub opens: u64,
    pub opens_matched: u64,
    /// Opens with O_DIRECTORY whose matched event was not a directory: an event given to
    /// the wrong call (see `match_opens`).
    pub opens_mismatched: u64,
    /// Watched events of the command's tasks that no call could have made.
    pub events_left: u64,
    pub unknown_uses: u64,
    pub uses: u64,
}

const O_CLOEXEC: u64 = 0o2000000;
const O_DIRECTORY: u64 = 0o200000;
pub const O_PATH: u64 = 0o10000000;
const AT_FDCWD: i32 = -100;
const AT_EMPTY_PATH: u64 = 0x1000;
const MAP_ANONYMOUS: u64 = 0x20;
const CLONE_FILES: u64 = 0x400;

/// The descriptor tables of the command's live processes.
#[derive(Default)]
pub struct FdTables {
    tables: HashMap<u32, Table>,
    /// Each task's table (its process's, keyed by the task that created it).
    table_of: HashMap<u32, u32>,
    /// The watch's events by the call that made them: (tid, sys_enter time).
    matched: HashMap<(u32, u64), OpenEvent>,
    /// The scan's looks by (pid, fd), in time order.
    seen: HashMap<(u32, u32), Vec<(u64, FdKind, Arc<str>)>>,
    pub counts: FdCounts,
    known: bool,
}

impl FdTables {
    /// Tables for a recording (`d` is empty for a conversion of someone else's perf.data),
    /// with the watch's events matched to the calls that made them.
    pub fn new(d: &Descriptors, matched: HashMap<(u32, u64), OpenEvent>, left: u64) -> FdTables {
        let mut seen: HashMap<(u32, u32), Vec<(u64, FdKind, Arc<str>)>> = HashMap::new();
        for s in &d.seen {
            seen.entry((s.pid, s.fd))
                .or_default()
                .push((s.at_ns, s.kind, s.path.clone()));
        }
        for v in seen.values_mut() {
            v.sort_by_key(|x| x.0);
        }
        FdTables {
            matched,
            seen,
            known: !d.inherited.is_empty(),
            counts: FdCounts {
                events_left: left,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The recorded command's first task, with the descriptors it started with (without a
    /// look at them, standard input, output and error, kinds unknown).
    pub fn root(&mut self, tid: u32, d: &Descriptors) {
        let mut t = Table {
            cwd: d.cwd.clone(),
            users: 1,
            ..Default::default()
        };
        if self.known {
            for f in &d.inherited {
                t.fds.insert(
                    f.fd,
                    Entry {
                        kind: f.kind,
                        cloexec: f.cloexec,
                        path: (!f.path.is_empty()).then(|| f.path.clone()),
                        made_ns: 0,
                    },
                );
            }
        } else {
            for fd in 0..3 {
                t.fds.insert(
                    fd,
                    Entry {
                        kind: FdKind::Unknown,
                        cloexec: false,
                        path: None,
                        made_ns: 0,
                    },
                );
            }
        }
        self.tables.insert(tid, t);
        self.table_of.insert(tid, tid);
    }

    /// `child` was created by `parent`: a thread (or a clone with CLONE_FILES, in
    /// `clone_flags`) shares its table, a process gets a copy.
    pub fn fork(&mut self, parent: u32, child: u32, thread: bool, clone_flags: u64) {
        let Some(&pt) = self.table_of.get(&parent) else {
            return;
        };
        if thread || clone_flags & CLONE_FILES != 0 {
            self.table_of.insert(child, pt);
            if let Some(t) = self.tables.get_mut(&pt) {
                t.users += 1;
            }
        } else if let Some(t) = self.tables.get(&pt) {
            let mut copy = t.clone();
            copy.users = 1;
            self.tables.insert(child, copy);
            self.table_of.insert(child, child);
        }
    }

    /// A successful execve: close-on-exec descriptors are closed.
    pub fn exec(&mut self, tid: u32) {
        if let Some(t) = self.table_mut(tid) {
            t.fds.retain(|_, e| !e.cloexec);
        }
    }

    /// The task is gone; its table goes with its last user.
    pub fn exit(&mut self, tid: u32) {
        let Some(id) = self.table_of.remove(&tid) else {
            return;
        };
        if let Some(t) = self.tables.get_mut(&id) {
            t.users = t.users.saturating_sub(1);
            if t.users == 0 {
                self.tables.remove(&id);
            }
        }
    }

    fn table_mut(&mut self, tid: u32) -> Option<&mut Table> {
        let id = *self.table_of.get(&tid)?;
        self.tables.get_mut(&id)
    }

    /// The kind of descriptor `fd` of `tid`'s process at `now_ns`: a descriptor of unknown
    /// kind (a special file, which fanotify does not report) takes the kind the scan of
    /// /proc saw under its number after it was made, if it saw it before this use or soon
    /// after it was made. A use the table did not see made is unknown, and stays in the
    /// table so that later numbers are right.
    fn use_fd(&mut self, tid: u32, fd: u64, now_ns: u64) -> Target {
        let Ok(fd) = u32::try_from(fd as i64) else {
            return Target::default();
        };
        self.counts.uses += 1;
        let Some(&id) = self.table_of.get(&tid) else {
            self.counts.unknown_uses += 1;
            return Target::default();
        };
        let Some(t) = self.tables.get_mut(&id) else {
            self.counts.unknown_uses += 1;
            return Target::default();
        };
        let e = t.fds.entry(fd).or_insert(Entry {
            kind: FdKind::Unknown,
            cloexec: false,
            path: None,
            made_ns: now_ns,
        });
        if e.kind == FdKind::Unknown {
            let look = self.seen.get(&(id, fd)).and_then(|v| {
                let i = v.partition_point(|x| x.0 < e.made_ns);
                v.get(i)
                    .filter(|x| x.0 <= now_ns || x.0 - e.made_ns <= SEEN_AFTER_NS)
            });
            if let Some((_, kind, path)) = look {
                e.kind = *kind;
                e.path = (!path.is_empty()).then(|| path.clone());
            }
        }
        if e.kind == FdKind::Unknown {
            self.counts.unknown_uses += 1;
        }
        Target::of(e.kind)
    }

    fn insert(
        &mut self,
        tid: u32,
        fd: u64,
        kind: FdKind,
        cloexec: bool,
        path: Option<Arc<str>>,
        made_ns: u64,
    ) {
        let Ok(fd) = u32::try_from(fd) else { return };
        if let Some(t) = self.table_mut(tid) {
            t.fds.insert(
                fd,
                Entry {
                    kind,
                    cloexec,
                    path,
                    made_ns,
                },
            );
        }
    }

    fn copy(&mut self, tid: u32, from: u64, to: u64, cloexec: bool, now_ns: u64) -> Target {
        let target = self.use_fd(tid, from, now_ns);
        let path = self
            .table_mut(tid)
            .and_then(|t| t.fds.get(&(from as u32)).and_then(|e| e.path.clone()));
        self.insert(tid, to, target.kind, cloexec, path, now_ns);
        target
    }

    /// The two lowest free descriptors become a pipe's or a socket pair's ends.
    fn pair(&mut self, tid: u32, kind: FdKind, cloexec: bool, now_ns: u64) {
        for _ in 0..2 {
            let Some(fd) = self.table_mut(tid).map(|t| t.lowest_free()) else {
                return;
            };
            self.insert(tid, fd as u64, kind, cloexec, None, now_ns);
        }
    }

    /// A successful open of a path (`call`: its task and sys_enter time) returned `fd`: its
    /// kind is the watch's event matched to it (none: a special file, or O_PATH), and the
    /// walk's depth is the path's components below where the walk started (the directory
    /// `dirfd` names, or the working directory) when the file lies under it, else all of
    /// them (an absolute path).
    fn open(&mut self, call: (u32, u64), dirfd: Option<i32>, flags: u64, fd: u64) -> Target {
        let tid = call.0;
        self.counts.opens += 1;
        let event = self.matched.remove(&call);
        let (kind, path) = match &event {
            Some(e) => {
                self.counts.opens_matched += 1;
                if flags & O_DIRECTORY != 0 && e.kind != FdKind::Dir {
                    self.counts.opens_mismatched += 1;
                }
                (e.kind, (!e.path.is_empty()).then(|| e.path.clone()))
            }
            None if flags & O_DIRECTORY != 0 => (FdKind::Dir, None),
            None => (FdKind::Unknown, None),
        };
        let base = match dirfd {
            Some(AT_FDCWD) | None => self.table_mut(tid).and_then(|t| t.cwd.clone()),
            Some(d) => self
                .table_mut(tid)
                .and_then(|t| t.fds.get(&(d as u32)).and_then(|e| e.path.clone())),
        };
        let depth = path
            .as_deref()
            .map_or(0, |p| walk_depth(p, base.as_deref()));
        self.insert(tid, fd, kind, flags & O_CLOEXEC != 0, path, call.1);
        if kind == FdKind::Unknown {
            // A special file (or an unwatched mount): the scan of /proc may have seen it.
            return self.use_fd(tid, fd, call.1);
        }
        Target { kind, depth }
    }

    /// What syscall `name` (its arguments, its return value; it entered at `enter_ns`) did
    /// to `tid`'s table, and what its descriptor referred to.
    pub fn syscall(
        &mut self,
        tid: u32,
        enter_ns: u64,
        name: &str,
        args: &[u64; 6],
        ret: i64,
    ) -> Target {
        let ok = ret >= 0;
        let r = ret as u64;
        let fd0 = args[0];
        let call = (tid, enter_ns);
        match name {
            "open" | "creat" if ok => self.open(call, None, open_flags(name, args).unwrap_or(0), r),
            "openat" | "openat2" | "open_by_handle_at" if ok => {
                let flags = open_flags(name, args).unwrap_or(0);
                self.open(call, Some(fd0 as i32), flags, r)
            }
            "close" => {
                let target = self.use_fd(tid, fd0, enter_ns);
                if let Some(t) = self.table_mut(tid) {
                    t.fds.remove(&(fd0 as u32));
                }
                target
            }
            "close_range" if ok => {
                let (first, last) = (fd0 as u32, args[1] as u32);
                if let Some(t) = self.table_mut(tid) {
                    if args[2] & 4 != 0 {
                        // CLOSE_RANGE_CLOEXEC
                        for (_, e) in t.fds.range_mut(first..=last) {
                            e.cloexec = true;
                        }
                    } else {
                        t.fds.retain(|&fd, _| fd < first || fd > last);
                    }
                }
                Target::default()
            }
            "dup" if ok => self.copy(tid, fd0, r, false, enter_ns),
            "dup2" if ok && fd0 != args[1] => self.copy(tid, fd0, args[1], false, enter_ns),
            "dup3" if ok => self.copy(tid, fd0, args[1], args[2] & O_CLOEXEC != 0, enter_ns),
            "fcntl" => match args[1] {
                0 if ok => self.copy(tid, fd0, r, false, enter_ns), // F_DUPFD
                1030 if ok => self.copy(tid, fd0, r, true, enter_ns), // F_DUPFD_CLOEXEC
                2 if ok => {
                    // F_SETFD
                    let target = self.use_fd(tid, fd0, enter_ns);
                    if let Some(e) = self
                        .table_mut(tid)
                        .and_then(|t| t.fds.get_mut(&(fd0 as u32)))
                    {
                        e.cloexec = args[2] & 1 != 0;
                    }
                    target
                }
                _ => self.use_fd(tid, fd0, enter_ns),
            },
            "pipe" if ok => {
                self.pair(tid, FdKind::Pipe, false, enter_ns);
                Target::of(FdKind::Pipe)
            }
            "pipe2" if ok => {
                self.pair(tid, FdKind::Pipe, args[1] & O_CLOEXEC != 0, enter_ns);
                Target::of(FdKind::Pipe)
            }
            "socketpair" if ok => {
                self.pair(tid, FdKind::Socket, args[1] & O_CLOEXEC != 0, enter_ns);
                Target::of(FdKind::Socket)
            }
            "socket" if ok => {
                self.insert(
                    tid,
                    r,
                    FdKind::Socket,
                    args[1] & O_CLOEXEC != 0,
                    None,
                    enter_ns,
                );
                Target::of(FdKind::Socket)
            }
            "accept" | "accept4" if ok => {
                let cloexec = name == "accept4" && args[3] & O_CLOEXEC != 0;
                self.insert(tid, r, FdKind::Socket, cloexec, None, enter_ns);
                Target::of(FdKind::Socket)
            }
            "memfd_create" if ok => {
                self.insert(tid, r, FdKind::Tmpfs, args[1] & 1 != 0, None, enter_ns);
                Target::of(FdKind::Tmpfs)
            }
            "eventfd" | "eventfd2" | "epoll_create" | "epoll_create1" | "timerfd_create"
            | "inotify_init" | "inotify_init1" | "fanotify_init" | "userfaultfd" | "pidfd_open"
            | "perf_event_open" | "io_uring_setup" | "signalfd" | "signalfd4"
                if ok =>
            {
                let flags = match name {
                    "eventfd2" | "timerfd_create" => args[1],
                    "epoll_create1" | "inotify_init1" | "fanotify_init" | "userfaultfd" => args[0],
                    "signalfd4" => args[3],
                    _ => 0,
                };
                self.insert(
                    tid,
                    r,
                    FdKind::AnonInode,
                    flags & O_CLOEXEC != 0,
                    None,
                    enter_ns,
                );
                Target::of(FdKind::AnonInode)
            }
            "fchdir" => {
                let target = self.use_fd(tid, fd0, enter_ns);
                if let Some(t) = self.table_mut(tid) {
                    let path = t.fds.get(&(fd0 as u32)).and_then(|e| e.path.clone());
                    if ok {
                        t.cwd = path;
                    }
                }
                target
            }
            "chdir" if ok => {
                // The new directory's name is in user memory: unknown from here on.
                if let Some(t) = self.table_mut(tid) {
                    t.cwd = None;
                }
                Target::default()
            }
            "mmap" if args[3] & MAP_ANONYMOUS == 0 => self.use_fd(tid, args[4], enter_ns),
            "newfstatat" if args[3] & AT_EMPTY_PATH != 0 => self.use_fd(tid, fd0, enter_ns),
            "statx" if args[2] & AT_EMPTY_PATH != 0 => self.use_fd(tid, fd0, enter_ns),
            "newfstatat" | "statx" | "faccessat" | "faccessat2" | "readlinkat" | "unlinkat"
            | "mkdirat" | "fchmodat" | "fchownat" | "utimensat" | "renameat" | "renameat2"
            | "linkat" | "symlinkat" | "mknodat"
                if fd0 as i32 != AT_FDCWD =>
            {
                self.use_fd(tid, fd0, enter_ns)
            }
            "read" | "write" | "pread64" | "pwrite64" | "readv" | "writev" | "preadv"
            | "pwritev" | "preadv2" | "pwritev2" | "lseek" | "fstat" | "getdents"
            | "getdents64" | "fsync" | "fdatasync" | "ftruncate" | "fadvise64" | "ioctl"
            | "fstatfs" | "fchmod" | "fchown" | "flock" | "sendfile" | "splice" | "tee"
            | "recvfrom" | "sendto" | "recvmsg" | "sendmsg" | "connect" | "bind" | "listen"
            | "shutdown" | "getsockopt" | "setsockopt" | "getsockname" | "getpeername"
            | "fgetxattr" | "fsetxattr" | "flistxattr" | "fremovexattr" | "syncfs"
            | "readahead" | "sync_file_range" | "fallocate" | "copy_file_range" | "epoll_ctl"
            | "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => self.use_fd(tid, fd0, enter_ns),
            _ => Target::default(),
        }
    }
}

/// The open flags of a call that opens a path (None for other calls; openat2's are in user
/// memory: 0).
pub fn open_flags(name: &str, args: &[u64; 6]) -> Option<u64> {
    match name {
        "open" => Some(args[1]),
        "openat" | "open_by_handle_at" => Some(args[2]),
        "creat" | "openat2" => Some(0),
        _ => None,
    }
}

/// Components walked to reach `path` from `base` (the directory the walk started in): the
/// components below it when `path` lies under it, else all of `path`'s.
pub fn walk_depth(path: &str, base: Option<&str>) -> u16 {
    let components = |p: &str| p.split('/').filter(|c| !c.is_empty()).count();
    let below = base.and_then(|b| {
        let b = b.trim_end_matches('/');
        path.strip_prefix(b)
            .filter(|rest| rest.starts_with('/'))
            .map(components)
    });
    below
        .unwrap_or_else(|| components(path))
        .min(u16::MAX as usize) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: u64 = (AT_FDCWD as i64) as u64;

    fn inherited() -> Descriptors {
        let fd = |fd, kind, cloexec, path: &str| InheritedFd {
            fd,
            kind,
            cloexec,
            path: Arc::from(path),
        };
        Descriptors {
            inherited: vec![
                fd(0, FdKind::Device, false, "/dev/pts/0"),
                fd(1, FdKind::Pipe, false, ""),
                fd(2, FdKind::DevNull, false, "/dev/null"),
                fd(4, FdKind::AnonInode, true, ""),
            ],
            cwd: Some(Arc::from("/home/u/src")),
            ..Default::default()
        }
    }

    fn event(tid: u32, kind: FdKind, path: &str, read_ns: u64) -> OpenEvent {
        OpenEvent {
            tid,
            kind,
            path: Arc::from(path),
            read_ns,
        }
    }

    /// Tables whose task `tid` makes `calls` (their sys_enter times), the watch saw `events`
    /// and the scan of /proc `seen`.
    fn tables_seen(tid: u32, calls: &[u64], events: &[OpenEvent], seen: Vec<FdSeen>) -> FdTables {
        let d = Descriptors {
            seen,
            ..inherited()
        };
        let calls: HashMap<u32, Vec<OpenCall>> = [(
            tid,
            calls
                .iter()
                .map(|&enter_ns| OpenCall {
                    enter_ns,
                    may_notify: true,
                })
                .collect(),
        )]
        .into();
        let (matched, left) = match_opens(events, &calls);
        let mut t = FdTables::new(&d, matched, left);
        t.root(tid, &d);
        t
    }

    fn tables(tid: u32, calls: &[u64], events: &[OpenEvent]) -> FdTables {
        tables_seen(tid, calls, events, vec![])
    }

    fn kind(t: &mut FdTables, tid: u32, name: &str, fd: u64) -> FdKind {
        t.syscall(tid, 5000, name, &[fd, 0, 0, 0, 0, 0], 0).kind
    }

    /// dd's descriptors: /dev/zero opened onto 0 after closing it (no watched event: a
    /// special file; the scan of /proc saw it soon after), /dev/null onto 3 and dup'ed onto
    /// 1 (the scan saw fd 1 before the write), then a file whose event the watch read 20 us
    /// after its open entered; reads and writes then say what they used.
    #[test]
    fn opens_give_their_descriptors_the_watched_kind() {
        let seen = |fd, kind, path: &str, at_ns| FdSeen {
            pid: 7,
            fd,
            kind,
            path: Arc::from(path),
            at_ns,
        };
        let mut t = tables_seen(
            7,
            &[1000, 2000, 3000],
            &[event(7, FdKind::File, "/tmp/x", 3020)],
            vec![
                seen(0, FdKind::Device, "/dev/pts/0", 500),
                seen(0, FdKind::DevZero, "/dev/zero", 1500),
                seen(1, FdKind::DevNull, "/dev/null", 4000),
                seen(3, FdKind::DevNull, "/dev/null", 39_000_000),
            ],
        );
        t.exec(7);
        assert_eq!(
            kind(&mut t, 7, "write", 4),
            FdKind::Unknown,
            "fd 4 was close-on-exec"
        );
        t.syscall(7, 900, "close", &[0; 6], 0);
        let z = t.syscall(7, 1000, "openat", &[AT, 0x1000, 0, 0, 0, 0], 0);
        assert_eq!(
            z.kind,
            FdKind::DevZero,
            "no event; seen 0.5 us after it was made"
        );
        let n = t.syscall(7, 2000, "openat", &[AT, 0x1000, 0o1101, 0, 0, 0], 3);
        assert_eq!(
            n.kind,
            FdKind::Unknown,
            "seen 39 ms after: too late to be sure"
        );
        t.syscall(7, 2100, "dup2", &[3, 1, 0, 0, 0, 0], 1);
        assert_eq!(
            kind(&mut t, 7, "write", 1),
            FdKind::DevNull,
            "seen under its new number"
        );
        assert_eq!(kind(&mut t, 7, "read", 0), FdKind::DevZero);
        assert_eq!(kind(&mut t, 7, "write", 2), FdKind::DevNull, "inherited");
        let f = t.syscall(7, 3000, "openat", &[AT, 0x1000, 0, 0, 0, 0], 5);
        assert_eq!(
            f,
            Target {
                kind: FdKind::File,
                depth: 2
            }
        );
        assert_eq!(kind(&mut t, 7, "read", 5), FdKind::File);
        assert_eq!(t.counts.opens_matched, 1);
    }

    /// An event goes to the latest call that had entered when the watch read it; events
    /// read together go to the last calls; an event read before any unmatched call entered
    /// is left over.
    #[test]
    fn events_go_to_the_latest_calls_entered_before_they_were_read() {
        let calls: HashMap<u32, Vec<OpenCall>> = [(
            1,
            [100, 200, 300, 400, 500]
                .iter()
                .map(|&enter_ns| OpenCall {
                    enter_ns,
                    may_notify: enter_ns != 400,
                })
                .collect(),
        )]
        .into();
        let e = |path: &str, read_ns| event(1, FdKind::File, path, read_ns);
        let events = [
            e("/a", 50),
            e("/b", 250),
            e("/c", 360),
            e("/d", 360),
            e("/e", 600),
        ];
        let (m, left) = match_opens(&events, &calls);
        assert_eq!(left, 2, "/a was read before any call; /c had no call left");
        let path = |enter| m.get(&(1, enter)).map(|e| e.path.to_string());
        assert_eq!(
            path(100),
            None,
            "a special file: 200 entered before /b was read"
        );
        assert_eq!(path(200).as_deref(), Some("/b"));
        assert_eq!(
            path(300).as_deref(),
            Some("/d"),
            "read together: the last two calls"
        );
        assert_eq!(path(400), None, "O_PATH cannot notify");
        assert_eq!(path(500).as_deref(), Some("/e"));
    }

    /// A shell's pipeline: pipe2 takes the two lowest free numbers; the child's copy of the
    /// table follows its own dup2 and close, the parent's does not change; exec drops the
    /// close-on-exec end.
    #[test]
    fn pipes_take_the_lowest_free_numbers_and_children_copy_the_table() {
        let mut t = tables(1, &[], &[]);
        t.exec(1); // fd 4 closed: 3 and 4 are free
        t.syscall(1, 0, "pipe2", &[0x7ffd_0000, O_CLOEXEC, 0, 0, 0, 0], 0);
        assert_eq!(kind(&mut t, 1, "read", 3), FdKind::Pipe);
        assert_eq!(kind(&mut t, 1, "write", 4), FdKind::Pipe);
        t.fork(1, 2, false, 0);
        t.syscall(2, 0, "dup2", &[4, 1, 0, 0, 0, 0], 1);
        t.exec(2);
        assert_eq!(kind(&mut t, 2, "write", 1), FdKind::Pipe);
        assert_eq!(
            kind(&mut t, 2, "read", 3),
            FdKind::Unknown,
            "closed at exec"
        );
        assert_eq!(
            kind(&mut t, 1, "write", 1),
            FdKind::Pipe,
            "the inherited pipe"
        );
        assert_eq!(
            kind(&mut t, 1, "read", 3),
            FdKind::Pipe,
            "the parent keeps its own"
        );
        t.fork(1, 3, true, 0);
        t.syscall(3, 0, "close", &[3, 0, 0, 0, 0, 0], 0);
        assert_eq!(
            kind(&mut t, 1, "read", 3),
            FdKind::Unknown,
            "threads share the table"
        );
        t.exit(2);
        t.exit(3);
        t.exit(1);
        assert!(t.tables.is_empty());
    }

    /// find's walk: a directory opened with O_DIRECTORY, then files opened relative to it,
    /// one component deep; F_DUPFD_CLOEXEC copies the directory.
    #[test]
    fn directories_and_relative_opens_count_the_components_walked() {
        let mut t = tables(
            5,
            &[10, 20, 30],
            &[
                event(5, FdKind::Dir, "/usr/share/doc", 15),
                event(5, FdKind::File, "/usr/share/doc/README.txt", 25),
                event(5, FdKind::File, "/usr/lib/libc.so.6", 35),
            ],
        );
        let dir = t.syscall(5, 10, "openat", &[AT, 1, O_DIRECTORY, 0, 0, 0], 3);
        assert_eq!(
            dir,
            Target {
                kind: FdKind::Dir,
                depth: 3
            }
        );
        t.syscall(5, 0, "fcntl", &[3, 1030, 0, 0, 0, 0], 5);
        assert_eq!(kind(&mut t, 5, "getdents64", 5), FdKind::Dir);
        let f = t.syscall(5, 20, "openat", &[3, 1, 0, 0, 0, 0], 4);
        assert_eq!(
            f,
            Target {
                kind: FdKind::File,
                depth: 1
            }
        );
        let abs = t.syscall(5, 30, "openat", &[3, 1, 0, 0, 0, 0], 6);
        assert_eq!(abs.depth, 3, "not under the directory: an absolute path");
        let st = t.syscall(5, 0, "newfstatat", &[4, 0, 0, AT_EMPTY_PATH, 0, 0], 0);
        assert_eq!(st.kind, FdKind::File);
        let anon = t.syscall(5, 0, "mmap", &[0, 4096, 1, 0x22, u64::MAX, 0], 0);
        assert_eq!(
            anon.kind,
            FdKind::Unknown,
            "anonymous mapping: no descriptor"
        );
        assert_eq!(walk_depth("/home/u/src/a.c", Some("/home/u/src")), 1);
        assert_eq!(walk_depth("/home/u/srcs/a.c", Some("/home/u/src")), 4);
    }
}
