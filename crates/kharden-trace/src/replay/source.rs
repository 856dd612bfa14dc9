//! Pass 2's programs: each task's op file, read as the scheduler runs the task (several
//! programs read one file when --scale-jobs copies a job).

use super::ops::{self, file_of, io, Visits};
use super::variant::{self, Variant};
use super::Split;
use kharden::kernel::paths::syscall::Effect;
use kharden::kernel::paths::table::KernelPaths;
use kharden::sim::Pcg32;
use kharden::workload::program::{Op, Program};
use kharden::{Error, Result};
use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

enum Record {
    /// User time as traced, and the costs accrued to come out of it.
    User(f64, f64),
    /// The call's variant, its recorded kernel ns and the recorder's cost taken out of it,
    /// whether it was a wait, pages it flushed from the address space.
    Syscall(Variant, f64, f64, bool, u64),
    /// Faults of a kind: 0 anonymous, 1 copy-on-write, 2 file.
    Faults(u8, u32),
    /// A new process, whether it was a vfork, and the call's recorded kernel ns and the
    /// recorder's cost taken out of it.
    Fork(u32, bool, f64, f64),
    Thread(u32),
    /// An exec, with the call's recorded kernel ns and the recorder's cost taken out.
    Exec(f64, f64),
    Exit,
}

/// What every task's program shares: the scratch directory, the clock of the recording
/// host, how many copies of each job a make forks (--scale-jobs) and which tasks are makes.
struct Shared {
    dir: PathBuf,
    /// Cycles per recorded nanosecond (the recording host's clock in GHz).
    host_ghz: f64,
    scale: u32,
    makes: HashSet<u32>,
    /// The recording measured the recorder's cost (variant::to_op's band is then known).
    measured: bool,
    /// The factor on the user intervals' costs (Recorded::user_scale).
    user_scale: f64,
    /// The recording of the kernel the programs run on (their syscalls' paths and work).
    paths: Arc<KernelPaths>,
}

/// One task's op file, read as the task runs.
pub struct FileSource {
    input: BufReader<Visits>,
    shared: Rc<Shared>,
    name: String,
    is_make: bool,
    pending: VecDeque<Op>,
    failed: bool,
    /// User-side costs not yet paid (ns): taken from the task's next user time.
    owed_ns: f64,
}

impl FileSource {
    fn open(shared: Rc<Shared>, seq: u32, name: String) -> FileSource {
        let path = file_of(&shared.dir, seq);
        FileSource {
            input: BufReader::with_capacity(4096, Visits::new(path)),
            is_make: shared.makes.contains(&seq),
            shared,
            name,
            pending: VecDeque::new(),
            failed: false,
            owed_ns: 0.0,
        }
    }

    fn path(&self) -> &std::path::Path {
        &self.input.get_ref().path
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.input
            .read_exact(&mut b)
            .map_err(|e| io(&self.input.get_ref().path, e))?;
        Ok(b)
    }

    /// The next byte, left unread; `None` at the end of the file.
    fn peek(&mut self) -> Result<Option<u8>> {
        match self.input.fill_buf() {
            Ok(buf) => Ok(buf.first().copied()),
            Err(e) => Err(io(self.path(), e)),
        }
    }

    fn read_record(&mut self) -> Result<Option<Record>> {
        let Some(tag) = self.peek()? else {
            return Ok(None);
        };
        self.input.consume(1);
        let rec = match tag {
            ops::USER => Record::User(
                f64::from_le_bytes(self.bytes()?),
                f64::from_le_bytes(self.bytes()?),
            ),
            ops::SYSCALL => {
                let [code]: [u8; 1] = self.bytes()?;
                let a = u64::from_le_bytes(self.bytes()?);
                let b = u32::from_le_bytes(self.bytes()?);
                let ns = f64::from_le_bytes(self.bytes()?);
                let removed = f64::from_le_bytes(self.bytes()?);
                let v = Variant::decode(code, a, b).ok_or_else(|| {
                    Error::at(
                        self.path().display(),
                        format!("corrupt replay file: syscall variant {code}"),
                    )
                })?;
                // Markers may follow: a wait, then the pages it flushed.
                let wait = self.take_marker(ops::WAIT)?;
                let flushed = if self.take_marker(ops::FLUSH)? {
                    u64::from_le_bytes(self.bytes()?)
                } else {
                    0
                };
                Record::Syscall(v, ns, removed, wait, flushed)
            }
            ops::FAULTS => {
                let [kind]: [u8; 1] = self.bytes()?;
                Record::Faults(kind, u32::from_le_bytes(self.bytes()?))
            }
            ops::FORK => {
                let b: [u8; 5] = self.bytes()?;
                let ns = f64::from_le_bytes(self.bytes()?);
                let removed = f64::from_le_bytes(self.bytes()?);
                let seq = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                Record::Fork(seq, b[4] != 0, ns, removed)
            }
            ops::THREAD => Record::Thread(u32::from_le_bytes(self.bytes()?)),
            ops::EXEC => Record::Exec(
                f64::from_le_bytes(self.bytes()?),
                f64::from_le_bytes(self.bytes()?),
            ),
            ops::EXIT => Record::Exit,
            t => {
                return Err(Error::at(
                    self.path().display(),
                    format!("corrupt replay file: tag {t}"),
                ))
            }
        };
        Ok(Some(rec))
    }

    /// Consumes the next byte if it is the marker `tag`.
    fn take_marker(&mut self, tag: u8) -> Result<bool> {
        let found = self.peek()? == Some(tag);
        if found {
            self.input.consume(1);
        }
        Ok(found)
    }

    /// What a call's recorded kernel time is uncertain by: the whole of the recorder's cost
    /// taken out of it (its two tracepoints' share and its events'), whose division between
    /// the two sides of the tracepoints moves with what the call does: a loop of 4 KiB reads
    /// of /dev/zero and dd's reads and writes put 100-150 ns more on the kernel side than the
    /// calibration's mean (docs/design/replay.md). None: the recorder's cost was not
    /// measured, and the variants stand.
    fn band(&self, removed: f64) -> Option<f64> {
        self.shared.measured.then_some(removed)
    }

    fn child(&self, seq: u32) -> FileSource {
        FileSource::open(self.shared.clone(), seq, format!("task {seq}"))
    }

    fn next_op(&mut self) -> Result<Op> {
        if let Some(op) = self.pending.pop_front() {
            return Ok(op);
        }
        let ghz = self.shared.host_ghz;
        // User time whose costs eat it whole gives no operation: read on.
        let rec = loop {
            let Some(rec) = self.read_record()? else {
                return Ok(Op::Exit);
            };
            if let Record::User(raw, due) = rec {
                self.owed_ns += due * self.shared.user_scale;
                let paid = raw.min(self.owed_ns);
                self.owed_ns -= paid;
                if raw - paid > 0.0 {
                    break Record::User(raw - paid, 0.0);
                }
                continue;
            }
            break rec;
        };
        Ok(match rec {
            // A trace records no cache behaviour of the user code.
            Record::User(ns, _) => Op::User {
                cycles: ns * ghz,
                touches: 8,
                l1_lines: Default::default(),
            },
            Record::Syscall(v, ns, removed, wait, flushed) => {
                // u64::MAX pages is TLB_FLUSH_ALL in both the trace and the model.
                let effect = (flushed > 0).then_some(Effect::FlushUserRange { pages: flushed });
                let op = variant::to_op(&self.shared.paths, v, ns, ghz, effect, self.band(removed))
                    .ok_or_else(|| {
                        Error::at(
                            self.path().display(),
                            "corrupt replay file: an omitted call was written",
                        )
                    })?;
                if wait {
                    // A make waits for each copy of its jobs.
                    let copies = if self.is_make { self.shared.scale } else { 1 };
                    for _ in 0..copies {
                        self.pending.push_back(Op::WaitChild);
                    }
                }
                op
            }
            Record::Faults(0, n) => Op::AnonFaults(n),
            Record::Faults(1, n) => Op::CowFaults(n),
            Record::Faults(_, n) => Op::FileFaults(n),
            Record::Fork(seq, vfork, ns, removed) => {
                let copies = if self.is_make && !self.shared.makes.contains(&seq) {
                    self.shared.scale
                } else {
                    1
                };
                // A vfork's model is the vfork path alone: more recorded is more work (a
                // fork's model scales with the parent's memory already).
                let more = if vfork {
                    variant::beyond(&self.shared.paths, ns, ghz, "vfork", self.band(removed))
                } else {
                    0.0
                };
                let start = |child: FileSource| -> Op {
                    let op = match vfork {
                        true => Op::Vfork(Box::new(child)),
                        false => Op::Fork(Box::new(child)),
                    };
                    with_more(op, more)
                };
                for _ in 1..copies {
                    self.pending.push_back(start(self.child(seq)));
                }
                start(self.child(seq))
            }
            Record::Thread(seq) => Op::SpawnThread(Box::new(self.child(seq))),
            Record::Exec(ns, removed) => with_more(
                Op::Exec,
                variant::beyond(&self.shared.paths, ns, ghz, "execve", self.band(removed)),
            ),
            Record::Exit => Op::Exit,
        })
    }
}

impl Program for FileSource {
    fn next(&mut self, _rng: &mut Pcg32) -> Op {
        if self.failed {
            return Op::Exit;
        }
        match self.next_op() {
            Ok(op) => op,
            Err(e) => {
                // The engine's programs cannot fail; a broken scratch file ends the task and
                // is reported on stderr once.
                eprintln!("kharden: replay: {e}");
                self.failed = true;
                Op::Exit
            }
        }
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// `op`, with `cycles` more kernel work when there are any.
fn with_more(op: Op, cycles: f64) -> Op {
    if cycles > 0.0 {
        Op::WithKernelWork {
            op: Box::new(op),
            cycles,
        }
    } else {
        op
    }
}

/// The root task's program for pass 2, to run on a kernel of recording `paths`.
pub fn root_program(
    split: &Split,
    paths: Arc<KernelPaths>,
    host_ghz: f64,
    scale_jobs: u32,
) -> Box<dyn Program> {
    let shared = Rc::new(Shared {
        dir: split.dir.clone(),
        host_ghz,
        scale: scale_jobs.max(1),
        makes: split.makes.clone(),
        measured: split.recorded.tracer.is_some(),
        user_scale: split.recorded.user_scale,
        paths,
    });
    Box::new(FileSource::open(shared, split.root, "root".into()))
}
