//! Replay speed (trace events per wall-second, split and simulation together): a synthetic
//! make -j4 trace of 32 jobs with a compile's event mix, replayed on the Core i5-3550 model.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kharden::kernel::Kernel;
use kharden::machine;
use kharden::sim::Time;
use kharden::workload::run::Runner;
use kharden_trace::format::{Event, GfpClass, Meta, Op, TraceWriter};
use kharden_trace::replay;
use std::sync::Arc;

fn synthetic(path: &std::path::Path) -> u64 {
    let f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = TraceWriter::new(f, &Meta::default()).unwrap();
    w.set_syscall_name(0, "read");
    w.set_syscall_name(61, "wait4");
    let (make, cc1): (Arc<str>, Arc<str>) = (Arc::from("make"), Arc::from("cc1"));
    let mut n = 0u64;
    let mut put = |w: &mut TraceWriter<_>, time_ns, tid, op| {
        w.write(&Event { time_ns, tid, op }).unwrap();
        n += 1;
    };
    let mut t = 0;
    put(
        &mut w,
        t,
        1,
        Op::TaskNew {
            pid: 1,
            parent: None,
            comm: make.clone(),
        },
    );
    put(&mut w, t, 1, Op::SwitchIn { cpu: 0 });
    for job in 0..32u32 {
        let tid = 100 + job;
        t += 1000;
        put(
            &mut w,
            t,
            tid,
            Op::TaskNew {
                pid: tid,
                parent: Some(1),
                comm: make.clone(),
            },
        );
        put(&mut w, t, tid, Op::SwitchIn { cpu: 1 });
        put(
            &mut w,
            t,
            tid,
            Op::Exec {
                filename: cc1.clone(),
            },
        );
        for i in 0..2000u64 {
            t += 2000;
            if i % 3 == 0 {
                put(
                    &mut w,
                    t,
                    tid,
                    Op::PageAlloc {
                        pfn: 0x10_0000 + i,
                        order: 0,
                        gfp: 0x140cca,
                        class: GfpClass::UserAnon,
                    },
                );
            } else {
                put(&mut w, t, tid, Op::sys_enter(0));
                t += 500;
                put(&mut w, t, tid, Op::sys_exit(0, 4096));
            }
        }
        put(&mut w, t, tid, Op::Exit);
        put(&mut w, t, 1, Op::sys_enter(61));
        put(&mut w, t + 10, 1, Op::sys_exit(61, tid as i64));
    }
    put(&mut w, t + 100, 1, Op::Exit);
    w.finish().unwrap();
    n
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("kharden-replay-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("synthetic.trace");
    let events = synthetic(&trace);
    let m = machine::load("ivybridge-i5-3550").unwrap();
    let mut g = c.benchmark_group("replay");
    g.sample_size(10);
    g.throughput(Throughput::Elements(events));
    g.bench_function("make -j4, 32 jobs, i5-3550", |b| {
        b.iter(|| {
            let k = Kernel::boot(m.clone(), vec![]);
            let split = replay::split(&trace, &dir.join("ops"), &k.paths).unwrap();
            let program = replay::root_program(&split, k.paths.clone(), 2.6, 1);
            let mut r = Runner::new(k, program, 1);
            r.run(Time::ZERO, Time(u64::MAX / 4)).unwrap()
        })
    });
    g.finish();
    std::fs::remove_dir_all(&dir).ok();
}

criterion_group!(benches, bench);
criterion_main!(benches);
