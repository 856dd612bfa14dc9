#!/usr/bin/env python3
"""Where an anonymous page fault's time goes, in a real job against a tight loop.

Reads two `perf script -F comm,ip,sym` outputs of `perf record -e cpu-clock -F 4999 -g`:
one of a build (the compile job's faults, in situ) and one of a fault loop
(scripts/first_touch_faults.c over a small region: the conditions the footprint recorder
times), and prints the microseconds per fault each part of the fault path took in both.

    perf record -e cpu-clock -F 4999 -g -o kb.data -- make -j2 mm/
    perf record -e cpu-clock -F 4999 -g -o tl.data -- ./first_touch_faults 16 400
    perf script -i kb.data -F comm,ip,sym > kb.txt; perf script -i tl.data -F comm,ip,sym > tl.txt
    python3 scripts/fault_profile.py kb.txt --comm cc1 --faults F tl.txt --loop-comm first_touch_fau --loop-faults 1638400

F is the faults the build's `--comm` processes took (perf record -e page-faults/period=50/
and its samples by comm, times 50). Samples of a fault taken before its type is known
(entry, VMA lookup) count as the anonymous fault's in proportion --anon-share (the loop
takes anonymous faults only). A sample belongs to the innermost frame that names a part.
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_time_split import classify, samples  # noqa: E402

PARTS = [
    ("clear_page", {"clear_page_erms", "clear_page_rep", "clear_page_orig", "folio_zero_user"}),
    ("memcg charge", {"__mem_cgroup_charge", "charge_memcg", "mem_cgroup_charge",
                      "get_mem_cgroup_from_mm", "__folio_throttle_swaprate"}),
    ("LRU add", {"__folio_batch_add_and_move", "folio_batch_move_lru", "folio_add_lru_vma",
                 "folio_add_lru", "lru_add_drain", "lru_add_drain_cpu"}),
    ("rmap and stats", {"folio_add_new_anon_rmap", "__folio_mod_stat", "__lruvec_stat_mod_folio"}),
    ("allocator: per-CPU list", {"__rmqueue_pcplist"}),
    ("allocator: rest", {"get_page_from_freelist", "__alloc_frozen_pages_noprof",
                         "alloc_pages_mpol", "vma_alloc_folio_noprof"}),
    ("page table alloc", {"__pte_alloc", "pte_alloc_one", "__pmd_alloc"}),
    ("PTE map, lock, set", {"__pte_offset_map_lock", "pte_offset_map_rw_nolock", "set_ptes.isra.0",
                            "___pte_offset_map", "pte_mkwrite"}),
    ("copy-on-write", {"do_wp_page", "wp_page_copy"}),
    ("VMA lookup", {"lock_vma_under_rcu", "mas_walk", "find_vma", "lock_mm_and_find_vma"}),
    ("handle_mm_fault", {"__handle_mm_fault", "handle_mm_fault"}),
    ("entry, interrupts off", {"exc_page_fault"}),
]


def part(frames):
    for f in frames:
        for name, funcs in PARTS:
            if f in funcs:
                return name
    return "other"


def per_fault_us(path, comm, faults, anon_share, freq):
    us = collections.Counter()
    for c, frames in samples(open(path)):
        if c != comm or not frames:
            continue
        kind = classify(frames)
        weight = {"fault-anon": 1.0, "fault-common": anon_share}.get(kind, 0.0)
        if weight:
            us[part(frames)] += weight / freq / faults * 1e6
    return us


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--comm", default="cc1")
    ap.add_argument("--faults", type=float, required=True, help="faults of --comm in the build")
    ap.add_argument("--anon-share", type=float, default=14693 / 16323,
                    help="anonymous share of the build's faults (workloads/kbuild-job.toml)")
    ap.add_argument("loop")
    ap.add_argument("--loop-comm", default="first_touch_fau")
    ap.add_argument("--loop-faults", type=float, required=True)
    ap.add_argument("--freq", type=float, default=4999)
    a = ap.parse_args()
    build = per_fault_us(a.build, a.comm, a.faults * a.anon_share, a.anon_share, a.freq)
    loop = per_fault_us(a.loop, a.loop_comm, a.loop_faults, 1.0, a.freq)
    print(f"{'part of the fault':24} {'build us':>9} {'loop us':>9} {'more':>7}")
    for name in [n for n, _ in PARTS] + ["other"]:
        b, lp = build.get(name, 0.0), loop.get(name, 0.0)
        print(f"{name:24} {b:9.3f} {lp:9.3f} {b - lp:+7.3f}")
    b, lp = sum(build.values()), sum(loop.values())
    print(f"{'anonymous fault':24} {b:9.3f} {lp:9.3f} {b - lp:+7.3f}")


if __name__ == "__main__":
    main()
