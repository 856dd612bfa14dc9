//! The overlap model on small loops whose answer is known: what runs in the shadow of a long
//! chain, what lies on it, and what a barrier, a serialising instruction or a store that may
//! not perform speculatively changes. And the decoders it runs on.

use kharden_refcount::model::{
    decode, loop_from_asm, schedule, timing, Isa, Kind, Latencies, Pipeline, Port, PortGroup,
    Timing,
};
use kharden_refcount::Variant;

/// An A57-like core: 3 wide, two ALU pipes, one branch, one load, one store; the exclusive
/// store's write reaches the next load 25 cycles after it issues (a 30-cycle pair loop).
fn core() -> Pipeline {
    Pipeline {
        width: 3.0,
        window: 128,
        loads_wait_for_locked: Some(false),
        latency: Latencies {
            alu: 1.0,
            load: 4.0,
            store: 1.0,
            branch: 1.0,
            barrier: 1.0,
            exclusive_store: Some(25.0),
            atomic: Some(15.0),
            locked_rmw: Some(18.0),
            stack_engine: Some(0.0),
            serialise: Some(10.0),
        },
        ports: vec![
            PortGroup {
                serves: vec![Port::Alu],
                count: 2.0,
            },
            PortGroup {
                serves: vec![Port::Branch],
                count: 1.0,
            },
            PortGroup {
                serves: vec![Port::Load],
                count: 1.0,
            },
            PortGroup {
                serves: vec![Port::Store],
                count: 1.0,
            },
        ],
    }
}

fn run(variant: Variant, core: &Pipeline, asm: &[&str]) -> Timing {
    let l = loop_from_asm(variant, asm).unwrap();
    timing(core, &l.insns).unwrap()
}

fn arm(asm: &[&str]) -> Timing {
    run(Variant::Arm64Llsc, &core(), asm)
}

const PAIR: [&str; 4] = [
    "ldxr w4, [x1]",
    "add w4, w4, #0x1",
    "stxr w5, w4, [x1]",
    "cbnz w5, <l>",
];
const LOOP: [&str; 3] = ["add w2, w2, #0x1", "cmp w2, w3", "b.ne <top>"];

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn independent_work_runs_in_the_shadow_until_dispatch_or_the_alus_run_out() {
    const ADDS: [&str; 8] = [
        "add x8, x8, #0x1",
        "add x9, x9, #0x1",
        "add x10, x10, #0x1",
        "add x11, x11, #0x1",
        "add x12, x12, #0x1",
        "add x13, x13, #0x1",
        "add x14, x14, #0x1",
        "add x15, x15, #0x1",
    ];
    for k in [0, 8, 16, 32, 48, 64, 96] {
        let mut body: Vec<&str> = PAIR.to_vec();
        body.extend(ADDS.iter().cycle().take(k));
        body.extend(LOOP);
        let t = arm(&body);
        let n = body.len() as f64;
        // The pair's loop: 4 (ldxr) + 1 (add) + 25 (stxr to the next ldxr) = 30.
        assert!(close(t.chain, 30.0), "k={k}: chain {}", t.chain);
        // k + 3 ALU uops (the adds, the pair's add, the loop's add and cmp) on two pipes, n
        // instructions at 3 per cycle.
        let expect = 30f64.max(n / 3.0).max((k as f64 + 3.0) / 2.0);
        assert!(close(t.cycles, expect), "k={k}: {t:?}, expected {expect}");
    }
    // The in-order sum this replaces would charge every add: at k=32, 30 + 32.
    let mut body: Vec<&str> = PAIR.to_vec();
    body.extend(ADDS.iter().cycle().take(32));
    assert!(close(arm(&body).cycles, 30.0));
}

#[test]
fn work_on_the_chain_costs_its_latency() {
    for k in [1, 4, 9] {
        let mut body = vec!["ldxr w4, [x1]"];
        body.extend(std::iter::repeat("add w4, w4, #0x1").take(k));
        body.extend(["stxr w5, w4, [x1]", "cbnz w5, <l>"]);
        let t = arm(&body);
        assert!(close(t.cycles, 29.0 + k as f64), "k={k}: {t:?}");
    }
}

#[test]
fn a_store_exclusive_waits_for_older_branches_and_a_dmb_orders_the_next_load() {
    // A check of the loaded value before the store-exclusive (REFCOUNT_FULL's eor/cbnz): the
    // store performs only once the branch is resolved, one cycle after the add it parallels.
    let checked = arm(&[
        "ldxr w4, [x1]",
        "add w5, w4, #0x1",
        "eor w6, w4, w7",
        "cbnz w6, <out>",
        "stxr w8, w5, [x1]",
        "cbnz w8, <l>",
    ]);
    assert!(close(checked.cycles, 31.0), "{checked:?}");
    // A check after it (the fast refcount's b.mi) is off the chain.
    let after = arm(&[
        "ldxr w4, [x1]",
        "adds w4, w4, #0x1",
        "stxr w5, w4, [x1]",
        "cbnz w5, <l>",
        "b.mi <out>",
    ]);
    assert!(close(after.cycles, 30.0), "{after:?}");
    // atomic_dec_and_test's dmb: the next ldxr waits for it, which waits for the stlxr.
    let fenced = arm(&[
        "ldxr w2, [x1]",
        "sub w2, w2, #0x1",
        "stlxr w3, w2, [x1]",
        "cbnz w3, <l>",
        "dmb ish",
    ]);
    assert!(close(fenced.cycles, 31.0), "{fenced:?}");
}

#[test]
fn a_barrier_orders_memory_but_not_alu_work() {
    // A load of one line, a store to another: independent without the dmb.
    let free = arm(&["ldr x3, [x4]", "add x0, x3, #0x1", "str x0, [x2]"]);
    assert!(free.cycles <= 1.0 + 1e-6, "{free:?}");
    // With it, the next load waits for the store: 4 + 1 + 1 (store) + 1 (dmb).
    let fenced = arm(&[
        "ldr x3, [x4]",
        "add x0, x3, #0x1",
        "str x0, [x2]",
        "dmb ish",
    ]);
    assert!(close(fenced.cycles, 7.0), "{fenced:?}");
    // ALU work beside it still overlaps.
    let mut body = vec![
        "ldr x3, [x4]",
        "add x0, x3, #0x1",
        "str x0, [x2]",
        "dmb ish",
    ];
    body.extend(["add x8, x8, #0x1", "add x9, x9, #0x1", "add x10, x10, #0x1"]);
    assert!(close(arm(&body).cycles, 7.0));
}

#[test]
fn a_serialising_instruction_makes_the_stretches_add() {
    let mut body: Vec<&str> = PAIR.to_vec();
    body.extend(["add x8, x8, #0x1"; 24]);
    let open = arm(&body);
    body.push("isb");
    let serialised = arm(&body);
    assert!(close(open.cycles, 30.0), "{open:?}");
    // The pair (30) and the branch on its status (1), then the isb (10); the adds of the next
    // iteration wait for the isb but then run beside the next pair (24 cycles < 30).
    assert!(close(serialised.cycles, 41.0), "{serialised:?}");
    assert!(close(serialised.chain, 41.0));
}

#[test]
fn the_value_a_returning_atomic_gives_back_is_on_the_chain_when_checked() {
    let c = core();
    let lse = |asm: &[&str]| run(Variant::Arm64Lse, &c, asm);
    // stadd is posted: one per 15 cycles, the loop control beside it.
    let posted = lse(&[
        "stadd w3, [x1]",
        "add w2, w2, #0x1",
        "cmp w2, w4",
        "b.ne <top>",
    ]);
    assert!(close(posted.cycles, 15.0), "{posted:?}");
    // A check of ldadd's old value must resolve before the next atomic may perform.
    let checked = lse(&["ldadd w20, w1, [x19]", "cmp w1, #0x0", "b.le <out>"]);
    assert!(close(checked.cycles, 17.0), "{checked:?}");
}

#[test]
fn a_check_of_a_locked_result_costs_nothing_and_a_reload_what_outlasts_the_chain() {
    // The recording host: a locked instruction every 5.30 TSC cycles, 7.5 core cycles at the
    // 1.42 core/TSC ratio its adds show (scripts/overlap_beside_atomic.c).
    let mut zen = core();
    zen.latency.locked_rmw = Some(7.5);
    let x86 = |asm: &[&str]| run(Variant::X86_64, &zen, asm);
    let inc = x86(&["lock incl (%rdi)"]);
    let js = x86(&["lock incl (%rdi)", "js <out>"]);
    let xadd = x86(&["lock xadd %edx,(%rdi)", "test %edx,%edx", "jle <out>"]);
    let reload = x86(&[
        "mov (%rdi),%eax",
        "lea 0x1(%rax),%ecx",
        "lock cmpxchg %ecx,(%rdi)",
    ]);
    assert!(close(inc.cycles, 7.5) && close(js.cycles, 7.5) && close(xadd.cycles, 7.5));
    // The reload takes the locked instruction's store by forwarding once its load part is
    // back (4), then its own 4 and the lea's 1: 9 cycles, 1.5 over the chain. Measured:
    // 6.33 - 5.30 = 1.03 TSC cycles = 1.46 core cycles.
    assert!(close(reload.cycles, 9.0), "{reload:?}");
}

#[test]
fn the_schedule_shows_what_ran_ahead_and_what_waited() {
    let mut body: Vec<&str> = PAIR.to_vec();
    body.extend(LOOP);
    let l = loop_from_asm(Variant::Arm64Llsc, &body).unwrap();
    let s = schedule(&core(), &l.insns).unwrap();
    // The pair: ldxr at 0, add at 4, stxr at 5 done at 30, its cbnz at 30.
    assert_eq!(s[0], (0.0, 4.0));
    assert_eq!(s[2], (5.0, 30.0));
    assert_eq!(s[3], (30.0, 31.0));
    // The loop control ran ahead of the chain.
    assert!(s[4].0 < 0.0 && s[6].1 < 0.0, "{s:?}");
}

#[test]
fn decoders_follow_registers_and_addresses() {
    let stp = decode(Isa::Arm64, "stp x29, x30, [sp, #-16]!").unwrap();
    assert_eq!(stp.kind, Kind::Store);
    assert_eq!(stp.reads, vec![31, 29, 30]);
    assert_eq!(stp.store.unwrap().disp, -16);
    assert_eq!(stp.writes.len(), 1, "the writeback of sp");
    let ldp = decode(Isa::Arm64, "ldp x29, x30, [sp], #16").unwrap();
    assert_eq!((ldp.load.unwrap().disp, ldp.writes.len()), (0, 3));
    let stxr = decode(Isa::Arm64, "stlxr w3, w2, [x1]").unwrap();
    assert_eq!(
        (stxr.kind, stxr.release, stxr.writes[0].reg),
        (Kind::ExclusiveStore, true, 3)
    );
    let ldaddal = decode(Isa::Arm64, "ldaddal w2, w3, [x1]").unwrap();
    assert_eq!(
        (ldaddal.kind, ldaddal.acquire, ldaddal.release),
        (Kind::Atomic, true, true)
    );
    let stadd = decode(Isa::Arm64, "stadd w3, [x1]").unwrap();
    assert!(stadd.writes.is_empty() && !stadd.acquire && !stadd.release);
    let ccmp = decode(Isa::Arm64, "ccmp w1, #0x0, #0x8, pl").unwrap();
    assert_eq!(
        (ccmp.reads.len(), ccmp.writes.len()),
        (2, 1),
        "w1 and the flags"
    );
    let call = decode(Isa::X86_64, "call <f+0x0>").unwrap();
    assert_eq!((call.kind, call.store.unwrap().disp), (Kind::Branch, -8));
    let cmpxchg = decode(Isa::X86_64, "lock cmpxchg %ecx,(%rdi)").unwrap();
    assert_eq!(cmpxchg.kind, Kind::Locked);
    assert!(cmpxchg.reads.contains(&0) && cmpxchg.release && !cmpxchg.acquire);
    assert_eq!(
        decode(Isa::X86_64, "lock incl (%rdx)").unwrap().kind,
        Kind::Locked
    );
    assert_eq!(decode(Isa::X86_64, "sete %al").unwrap().reads.len(), 2);
    // A store through a copied pointer and a load through the original alias: the load waits.
    let aliased = arm(&[
        "mov x0, x21",
        "str w2, [x0]",
        "ldr w2, [x21]",
        "add w2, w2, #0x1",
    ]);
    let apart = arm(&[
        "mov x0, x22",
        "str w2, [x0]",
        "ldr w2, [x21]",
        "add w2, w2, #0x1",
    ]);
    assert!(
        close(aliased.chain, 5.0) && apart.chain < 5.0,
        "{aliased:?} {apart:?}"
    );
}

#[test]
fn what_a_decoder_does_not_know_is_an_error_naming_it() {
    let e = decode(Isa::Arm64, "mul x0, x1, x2").unwrap_err();
    assert!(e.contains("'mul'") && e.contains("latency"), "{e}");
    let e = decode(Isa::X86_64, "imul %eax,%ebx").unwrap_err();
    assert!(e.contains("imul"), "{e}");
    for junk in [
        "",
        "ldr w1, [",
        "ldr w1, [x99]",
        "stp x29",
        "cbz",
        "b.",
        "lock",
        "lock incl %eax",
        "mov (%rax",
        "push",
        "ldadd w1",
        "add w1, w2, #0xzz",
        "mov %xmm0,%eax",
        "]",
        "x0",
        "ldr w1, [x0], #",
        "ret x40",
        "ccmp",
        "jmp *(%rax)",
        "mov 0x8(%rax,%rbx,8),%ecx",
    ] {
        for isa in [Isa::Arm64, Isa::X86_64] {
            // Never a panic: a decoded effect or an error.
            let _ = decode(isa, junk);
        }
    }
}
