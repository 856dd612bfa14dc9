//! Trace reading speed (events per second): a synthetic trace with the event mix of a recorded
//! gcc compile (page faults and allocations, syscalls, frees, a few switches), read in memory.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kharden_trace::format::{Event, GfpClass, Meta, Op, TraceReader, TraceWriter};
use std::hint::black_box;
use std::sync::Arc;

const EVENTS: u64 = 200_000;

fn synthetic() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &Meta::default()).unwrap();
    for nr in 0..64 {
        w.set_syscall_name(nr, &format!("sys{nr}"));
    }
    let comm: Arc<str> = Arc::from("cc1");
    let mut t = 0u64;
    let mut x = 12345u64;
    let tasks = 8u32;
    for tid in 1..=tasks {
        w.write(&Event {
            time_ns: t,
            tid,
            op: Op::TaskNew {
                pid: tid,
                parent: None,
                comm: comm.clone(),
            },
        })
        .unwrap();
    }
    let mut written = tasks as u64;
    while written < EVENTS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t += x % 2000;
        let tid = 1 + (x >> 8) as u32 % tasks;
        let op = match x % 100 {
            0..=21 => Op::PageFault {
                user: true,
                address: 0x5555_0000_0000 + (x >> 20) % (1 << 30),
                error_code: 6,
            },
            22..=39 => Op::PageAlloc {
                pfn: 0x100000 + (x >> 16) % (1 << 20),
                order: 0,
                gfp: 0x140cca,
                class: GfpClass::UserAnon,
            },
            40..=57 => Op::PageFree {
                pfn: 0x100000 + (x >> 16) % (1 << 20),
                order: 0,
            },
            58..=75 => Op::SysEnter {
                nr: ((x >> 32) % 64) as u32,
                args: [3, 0x7ffd_0000_0000 + (x >> 48), 4096, 0, 0, 0],
            },
            76..=93 => Op::SysExit {
                nr: ((x >> 32) % 64) as u32,
                ret: ((x >> 40) % 4096) as i64,
                target: kharden_trace::format::Target::of(kharden_trace::format::FdKind::File),
            },
            94..=96 => Op::TlbFlush {
                cpu: 0,
                reason: 3,
                pages: 1,
            },
            97 => Op::SwitchOut { state: 0 },
            _ => Op::SwitchIn {
                cpu: (x % 2) as u32,
            },
        };
        w.write(&Event {
            time_ns: t,
            tid,
            op,
        })
        .unwrap();
        written += 1;
    }
    w.finish().unwrap().0
}

fn read_all(bytes: &[u8]) -> u64 {
    let r = TraceReader::new(bytes, "bench").unwrap();
    let mut n = 0;
    for e in r {
        black_box(e.unwrap());
        n += 1;
    }
    n
}

fn bench(c: &mut Criterion) {
    let bytes = synthetic();
    assert_eq!(read_all(&bytes), EVENTS);
    eprintln!(
        "synthetic trace: {EVENTS} events, {} bytes ({:.2} bytes/event)",
        bytes.len(),
        bytes.len() as f64 / EVENTS as f64
    );
    let mut g = c.benchmark_group("trace_reader");
    g.throughput(Throughput::Elements(EVENTS));
    g.sample_size(20);
    g.bench_function("read_200k_events", |b| {
        b.iter(|| read_all(black_box(&bytes)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
