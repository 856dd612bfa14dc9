//! The regression corpus (fuzz/regressions, one file per defect of issue 18) replayed through
//! the fuzz targets' bodies: each file must give its one-line error, never a panic.

use kharden_trace::fuzz;
use std::path::Path;

#[test]
fn every_defect_of_the_corpus_is_a_one_line_error() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let expect = std::fs::read_to_string(dir.join("expect.tsv")).unwrap();
    let mut checked = 0;
    for line in expect
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        let (file, target, want) = (f[0], f[1], f[2]);
        let mut data = std::fs::read(dir.join(file)).unwrap();
        if target != "trace" {
            // Paths inside the corpus are relative to the repository root.
            let root = dir.join("../..").display().to_string() + "/";
            data = String::from_utf8(data)
                .unwrap()
                .replace("\"fuzz/regressions/", &format!("\"{root}fuzz/regressions/"))
                .into_bytes();
        }
        let got = match target {
            "machine" => fuzz::machine_profile(&data),
            "experiment" => fuzz::experiment_file(&data),
            "sweep" => fuzz::sweep_file(&data),
            "footprint" => fuzz::kernel_footprint(&data),
            "trace" => {
                // Every trace path must refuse it: reader, stats and replay alike.
                let r = fuzz::trace_reader(&data).map(|_| ());
                assert_eq!(fuzz::trace_stats(&data).err(), r.clone().err(), "{file}");
                assert!(fuzz::replay_trace(&data).is_err(), "{file}: replayed");
                r
            }
            other => panic!("expect.tsv: unknown target {other}"),
        };
        match got {
            Err(e) => assert!(e.contains(want), "{file}: expected '{want}', got '{e}'"),
            Ok(()) => panic!("{file}: accepted, expected '{want}'"),
        }
        checked += 1;
    }
    assert!(checked >= 18, "only {checked} corpus files checked");
}

/// A trace with 1,500 tasks alive at once replays (each live task used to hold an open
/// file: EMFILE beyond about 1,000).
#[test]
fn many_live_tasks_replay_without_running_out_of_descriptors() {
    use kharden_trace::format::{Event, Meta, Op, TraceWriter};
    use std::sync::Arc;
    let mut w = TraceWriter::new(Vec::new(), &Meta::default()).unwrap();
    let comm: Arc<str> = Arc::from("sh");
    let mut put = |time_ns, tid, op| w.write(&Event { time_ns, tid, op }).unwrap();
    put(
        0,
        1,
        Op::TaskNew {
            pid: 1,
            parent: None,
            comm: comm.clone(),
        },
    );
    for tid in 2..1502 {
        put(
            tid as u64,
            tid,
            Op::TaskNew {
                pid: tid,
                parent: Some(1),
                comm: comm.clone(),
            },
        );
        put(tid as u64, tid, Op::SwitchIn { cpu: tid % 4 });
    }
    for tid in 2..1502 {
        put(100_000, tid, Op::sys_enter(39));
        put(100_500, tid, Op::sys_exit(39, 0));
    }
    for tid in 2..1502 {
        put(200_000, tid, Op::SwitchOut { state: 0x10 });
        put(200_000, tid, Op::Exit);
    }
    put(300_000, 1, Op::Exit);
    let (bytes, _) = w.finish().unwrap();
    fuzz::replay_trace(&bytes).unwrap();
}
