//! Round trips, garbled inputs and error messages of the trace format.

use super::varint::{put_varint, unzigzag, zigzag};
use super::*;

/// The fuzz target's body on random and garbled inputs, under stable Rust: mutations of a
/// valid trace (byte flips, truncations, insertions) and random byte strings.
#[test]
fn garbled_inputs_never_panic() {
    let good = encode(&sample_events());
    assert_eq!(fuzz_read(&good), sample_events().len() as u64);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let mut v = good.clone();
        match rnd() % 4 {
            0 => {
                for _ in 0..1 + rnd() % 4 {
                    let i = (rnd() as usize) % v.len();
                    v[i] = rnd() as u8;
                }
            }
            1 => v.truncate((rnd() as usize) % v.len()),
            2 => {
                let i = (rnd() as usize) % v.len();
                v.insert(i, rnd() as u8);
            }
            _ => {
                // Keep the header, randomise the records inside a valid block.
                let payload: Vec<u8> = (0..rnd() % 64).map(|_| rnd() as u8).collect();
                v = with_records(&good, &payload);
            }
        }
        fuzz_read(&v);
    }
    for len in 0..64 {
        let v: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
        fuzz_read(&v);
    }
}

pub(crate) fn sample_events() -> Vec<Event> {
    let c: Arc<str> = Arc::from("make");
    vec![
        Event {
            time_ns: 10,
            tid: 100,
            op: Op::TaskNew {
                pid: 100,
                parent: None,
                comm: c.clone(),
            },
        },
        Event {
            time_ns: 12,
            tid: 100,
            op: Op::SwitchIn { cpu: 1 },
        },
        Event {
            time_ns: 15,
            tid: 100,
            op: Op::Exec {
                filename: Arc::from("/usr/bin/make"),
            },
        },
        Event {
            time_ns: 20,
            tid: 100,
            op: Op::SysEnter {
                nr: 57,
                args: [3, 0, 0x7ffd_1234_5678, 1 << 40, 0, u64::MAX],
            },
        },
        Event {
            time_ns: 21,
            tid: 101,
            op: Op::TaskNew {
                pid: 101,
                parent: Some(100),
                comm: c.clone(),
            },
        },
        Event {
            time_ns: 22,
            tid: 100,
            op: Op::SysExit {
                nr: 57,
                ret: 101,
                target: Target {
                    kind: FdKind::File,
                    depth: 4,
                },
            },
        },
        Event {
            time_ns: 23,
            tid: 100,
            op: Op::sys_exit(0, -2),
        },
        Event {
            time_ns: 30,
            tid: 101,
            op: Op::PageAlloc {
                pfn: 0x12345,
                order: 0,
                gfp: 0x140dca,
                class: GfpClass::UserAnon,
            },
        },
        Event {
            time_ns: 31,
            tid: 101,
            op: Op::PageFree {
                pfn: 0x12000,
                order: 2,
            },
        },
        Event {
            time_ns: 32,
            tid: 101,
            op: Op::TlbFlush {
                cpu: 0,
                reason: 1,
                pages: u64::MAX,
            },
        },
        Event {
            time_ns: 33,
            tid: 101,
            op: Op::PageFault {
                user: true,
                address: 0x7fff_0000_1000,
                error_code: 6,
            },
        },
        Event {
            time_ns: 34,
            tid: 101,
            op: Op::PageFault {
                user: false,
                address: 0x1000,
                error_code: 2,
            },
        },
        Event {
            time_ns: 35,
            tid: 100,
            op: Op::Migrate { from: 1, to: 0 },
        },
        Event {
            time_ns: 36,
            tid: 0,
            op: Op::Lost { count: 7 },
        },
        Event {
            time_ns: 40,
            tid: 101,
            op: Op::SwitchOut { state: 0x10 },
        },
        Event {
            time_ns: 40,
            tid: 101,
            op: Op::Exit,
        },
        Event {
            time_ns: 41,
            tid: 102,
            op: Op::TaskNew {
                pid: 100,
                parent: Some(100),
                comm: c,
            },
        },
        Event {
            time_ns: 50,
            tid: 100,
            op: Op::SwitchOut { state: 1 },
        },
    ]
}

pub(crate) fn encode(events: &[Event]) -> Vec<u8> {
    let meta = Meta {
        command: vec!["make".into()],
        nr_cpus: 2,
        ..Meta::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &meta).unwrap();
    w.set_syscall_name(57, "fork");
    w.set_syscall_name(0, "read");
    for e in events {
        w.write(e).unwrap();
    }
    w.finish().unwrap().0
}

#[test]
fn round_trip() {
    let evs = sample_events();
    let bytes = encode(&evs);
    let mut r = TraceReader::new(&bytes[..], "t").unwrap();
    assert_eq!(r.meta().nr_cpus, 2);
    let got: Vec<Event> = r.by_ref().map(|e| e.unwrap()).collect();
    assert_eq!(got, evs);
    assert_eq!(r.syscall_name(57).map(|s| &**s), Some("fork"));
    // 102 reused 101's slot; 100 and 102 are still live at the end.
    assert_eq!(r.live_tasks(), 2);
}

#[test]
fn varints_and_zigzag() {
    for v in [
        0u64,
        1,
        127,
        128,
        300,
        u32::MAX as u64,
        u64::MAX - 1,
        u64::MAX,
    ] {
        let mut b = Vec::new();
        put_varint(&mut b, v);
        let empty = encode(&[]);
        let mut r = TraceReader::new(&empty[..], "x").unwrap();
        r.buf = b.clone();
        r.pos = 0;
        r.end = b.len();
        assert_eq!(r.varint().unwrap(), v);
    }
    for v in [0i64, 1, -1, i64::MIN, i64::MAX] {
        assert_eq!(unzigzag(zigzag(v)), v);
    }
}

#[test]
fn errors_are_one_line_and_name_the_offset() {
    let bytes = encode(&sample_events());
    let err = |b: &[u8]| -> String {
        match TraceReader::new(b, "f.kht") {
            Err(e) => e.to_string(),
            Ok(r) => r
                .filter_map(|e| e.err())
                .next()
                .map(|e| e.to_string())
                .unwrap_or_default(),
        }
    };
    assert!(err(b"hello world, not a trace").contains("bad magic"));
    assert!(err(b"").contains("bad magic"));
    let mut v2 = bytes.clone();
    v2[8] = 9;
    assert_eq!(
        err(&v2),
        "f.kht: trace format version 9 is not supported (this kharden reads versions 2 to 3); a newer kharden wrote it"
    );
    let cut = &bytes[..bytes.len() - 5];
    let m = err(cut);
    assert!(m.starts_with("f.kht: truncated at byte"), "{m}");
    for n in 0..bytes.len() {
        let m = err(&bytes[..n]);
        assert!(!m.is_empty() && !m.contains('\n'), "prefix {n}: {m}");
    }
    let bad = with_records(&bytes, &[0x7e]);
    let at = header_len(&bytes) + 8;
    assert_eq!(
        err(&bad),
        format!("f.kht: malformed record at byte {at}: unknown record type 0x7e")
    );
    let mut v1 = bytes.clone();
    v1[8] = 1;
    assert!(
        err(&v1).contains("version 1 is no longer read"),
        "{}",
        err(&v1)
    );
}

/// Length of the header (magic, version, metadata and its checksum) of trace `bytes`.
fn header_len(bytes: &[u8]) -> usize {
    18 + u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize
}

/// `trace`'s header followed by one valid block holding `payload`.
pub(crate) fn with_records(trace: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = trace[..header_len(trace)].to_vec();
    if !payload.is_empty() {
        block::write_block(&mut v, payload).unwrap();
    }
    v
}

/// Every single-bit flip of a valid trace is an error (the checksums), never a different trace.
#[test]
fn every_bit_flip_is_detected() {
    let good = encode(&sample_events());
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut v = good.clone();
            v[i] ^= 1 << bit;
            let ok = TraceReader::new(&v[..], "f")
                .map(|r| r.collect::<Result<Vec<_>, _>>().is_ok())
                .unwrap_or(false);
            assert!(!ok, "flip of bit {bit} of byte {i} read as a valid trace");
        }
    }
}

/// A version 2 trace (the committed fuzz seed, recorded before syscall arguments and
/// descriptor kinds) still reads: its syscalls have no arguments and unknown descriptors.
#[test]
fn version_2_traces_still_read() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds/trace_reader/true.trace");
    let r = open(&path).unwrap();
    assert_eq!(r.version(), 2);
    let events: Vec<Event> = r.collect::<Result<_, _>>().unwrap();
    let exits = events
        .iter()
        .filter(|e| match &e.op {
            Op::SysExit { target, .. } => {
                assert_eq!(*target, Target::default());
                true
            }
            Op::SysEnter { args, .. } => {
                assert_eq!(*args, [0; 6]);
                false
            }
            _ => false,
        })
        .count();
    assert!(exits > 10, "{exits} syscalls");
    // Written again, it is a version 3 trace with the same events.
    let again = encode(&events);
    assert_eq!(u16::from_le_bytes([again[8], again[9]]), VERSION);
    let back: Vec<Event> = TraceReader::new(&again[..], "v3")
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(back, events);
}

/// A version 3 SysEnter whose mask names a seventh argument, or writes a zero one, and a
/// SysExit with an unknown descriptor kind, are malformed.
#[test]
fn bad_syscall_records_are_refused() {
    let bytes = encode(&sample_events()[..1]);
    let err = |payload: &[u8]| {
        TraceReader::new(&with_records(&bytes, payload)[..], "f")
            .unwrap()
            .find_map(|e| e.err())
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    // TaskNew of tid 1 in slot 0 (comm: string 0), then the record under test.
    let mut head = vec![op::STR_DEF, 1, b'x', op::TASK_NEW, 0, 0, 1, 1, 0, 0];
    let mut enter = head.clone();
    enter.extend([op::SYS_ENTER, 0, 0, 1, 0x40]);
    assert!(
        err(&enter).contains("names more than six arguments"),
        "{}",
        err(&enter)
    );
    let mut zero = head.clone();
    zero.extend([op::SYS_ENTER, 0, 0, 1, 0x01, 0]);
    assert!(
        err(&zero).contains("argument 0 is written but zero"),
        "{}",
        err(&zero)
    );
    head.extend([op::SYS_EXIT, 0, 0, 1, 0, 99, 0]);
    assert!(
        err(&head).contains("unknown descriptor kind 99"),
        "{}",
        err(&head)
    );
}
