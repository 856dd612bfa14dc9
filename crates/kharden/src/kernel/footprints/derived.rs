//! Kernel paths that no loop on the recording host ran alone, derived from a recorded path
//! whose code they share up to a branch: the recorded path without the functions the
//! branch skips (the source says which). Its latency is the recorded one times the share of
//! the samples left (ESTIMATE: a skipped function's samples stand for its time), its lines
//! the kept functions' lines, its objects the recorded ones less those only the skipped code
//! touches. `Footprints::parse` adds them beside the recorded paths.

use super::path_footprint::PathFootprint;

pub struct DerivedPath {
    pub name: &'static str,
    /// The recorded path it shares its code with.
    pub from: &'static str,
    /// What the derived path is and where in the source it leaves the recorded one.
    pub why: &'static str,
    /// Functions (and their callees, listed) that the derived path does not run.
    pub skips: &'static [&'static str],
    /// Objects of the recorded path that only the skipped code touches.
    pub skips_objects: &'static [&'static str],
}

pub const DERIVED: &[DerivedPath] = &[
    DerivedPath {
        name: "fault-zero",
        from: "fault-anon",
        why: "a read of an anonymous page not yet mapped: mm/memory.c do_anonymous_page maps the \
          shared zero page read-only (\"Use the zero-page for reads\") and jumps to setpte \
          before vmf_anon_prepare, the allocation and clearing, the memcg charge, the rmap, \
          the mm counter and the LRU add",
        skips: &[
            // vmf_anon_prepare
            "__vmf_anon_prepare",
            // alloc_anon_folio: the page allocator and the clear
            "vma_alloc_folio_noprof",
            "alloc_pages_mpol",
            "get_vma_policy",
            "policy_nodemask",
            "__alloc_frozen_pages_noprof",
            "get_page_from_freelist",
            "__rmqueue_pcplist",
            "_raw_spin_trylock",
            "prep_new_page",
            "clear_page_erms",
            "__list_del_entry_valid_or_report",
            // mem_cgroup_charge and folio_throttle_swaprate
            "__mem_cgroup_charge",
            "get_mem_cgroup_from_mm",
            "mem_cgroup_from_task",
            "charge_memcg",
            "try_charge_memcg",
            "page_counter_try_charge",
            "memcg1_commit_charge",
            "__folio_throttle_swaprate",
            // add_mm_counter
            "percpu_counter_add_batch",
            // folio_add_new_anon_rmap and its statistics
            "folio_add_new_anon_rmap",
            "__folio_mod_stat",
            "__lruvec_stat_mod_folio",
            "mod_memcg_lruvec_state",
            "__mod_node_page_state",
            "__css_rstat_updated",
            // folio_add_lru_vma, and the LRU lock's interrupts-off time that cpu-clock puts
            // on its unlock
            "folio_add_lru_vma",
            "__folio_batch_add_and_move",
            "folio_batch_move_lru",
            "folios_put_refs",
            "folio_lruvec_lock_irqsave",
            "_raw_spin_unlock_irqrestore",
            // the zero page's entry is not made writable
            "pte_mkwrite",
        ],
        skips_objects: &["anon_vma", "user_page"],
    },
    DerivedPath {
        name: "fstat",
        from: "newfstatat",
        why: "newfstatat(fd, \"\", buf, AT_EMPTY_PATH), glibc's fstat: fs/stat.c vfs_fstatat \
          finds the empty name with one get_user (getname_maybe_null, Linux 6.11 on) and \
          calls vfs_fstat on the descriptor's file, so nothing is copied into a names_cache \
          buffer and no path is walked; the getattr and cp_new_stat's copy-out are the same",
        skips: &[
            // getname_flags and putname: the names_cache buffer and the string copy
            "getname_flags",
            "getname_flags.part.0",
            "strncpy_from_user",
            "kmem_cache_alloc_noprof",
            "kmem_cache_free",
            "putname",
            // vfs_statx -> filename_lookup: the path walk under RCU and its end
            "vfs_statx",
            "filename_lookup",
            "path_lookupat",
            "path_init",
            "set_root",
            "nd_jump_root",
            "link_path_walk",
            "walk_component",
            "lookup_fast",
            "__d_lookup_rcu",
            "step_into",
            "inode_permission",
            "security_inode_permission",
            "bpf_lsm_inode_permission",
            "generic_permission",
            "complete_walk",
            "try_to_unlazy",
            "legitimize_links",
            "__legitimize_path",
            "__legitimize_mnt",
            "lockref_get_not_dead",
            "terminate_walk",
            // path_put after the getattr
            "path_put",
            "dput",
            "lockref_put_return",
            "mntput",
            "mntput_no_expire",
        ],
        skips_objects: &["names_cache"],
    },
    DerivedPath {
        name: "vfork",
        from: "fork",
        why: "clone with CLONE_VM | CLONE_VFORK (vfork, posix_spawn): kernel/fork.c copy_mm \
              takes a reference on the parent's mm instead of dup_mm, so no mm_struct, page \
              tables or VMAs are copied, nothing is write-protected and the parent's TLB is \
              not flushed, and the parent, stopped until the child's exec, takes no \
              copy-on-write faults. Only functions that run for the address space's copy or \
              those faults are left out; allocator and accounting functions that the task's \
              own copy shares stay whole (so the path is an upper bound)",
        skips: &[
            // dup_mm: mm_init, pgd_alloc and the page-table pages copy_page_range allocates
            "mm_init",
            "pgd_alloc",
            "__paravirt_pgd_alloc",
            "__percpu_counter_init_many",
            "futex_mm_init",
            "ldt_dup_context",
            "__pud_alloc",
            "__pmd_alloc",
            "__pte_alloc",
            "pte_alloc_one",
            "pmd_install",
            "clear_page_erms",
            // dup_mmap: the VMAs, their maple tree, anon_vmas, interval trees and the mmap lock
            "dup_mmap",
            "dup_mm_exe_file",
            "uprobe_start_dup_mmap",
            "uprobe_end_dup_mmap",
            "uprobe_dup_mmap",
            "down_write",
            "down_write_killable",
            "up_write",
            "security_vm_enough_memory_mm",
            "__vm_enough_memory",
            "bpf_lsm_vm_enough_memory",
            "cap_vm_enough_memory",
            "vm_area_dup",
            "vma_dup_policy",
            "__vma_start_write",
            "dup_userfaultfd",
            "dup_userfaultfd_complete",
            "anon_vma_fork",
            "anon_vma_clone",
            "anon_vma_interval_tree_insert",
            "__anon_vma_interval_tree_augment_rotate",
            "vma_interval_tree_insert_after",
            "vma_interval_tree_augment_rotate",
            "__mt_dup",
            "mas_dup_alloc.isra.0",
            "mas_copy_node.isra.0",
            "mas_store",
            "mas_wr_store_type",
            "mas_wr_store_entry",
            "mas_next_slot",
            "mas_find",
            "mas_ascend",
            "mas_destroy",
            // copy_page_range: the page tables, write-protected
            "copy_page_range",
            "vm_normal_page",
            "___pte_offset_map",
            "__pte_offset_map_lock",
            "pte_offset_map_rw_nolock",
            "pte_val",
            "pte_write",
            "pfn_pte",
            "p4d_offset",
            "pgd_none",
            "pud_val",
            "native_set_pte",
            "native_set_pmd",
            "native_set_pud",
            "native_set_p4d",
            "set_ptes.isra.0",
            "mksaveddirty_shift",
            "PageHuge",
            "pfn_valid",
            // dup_mmap's flush_tlb_mm of the parent
            "flush_tlb_mm_range",
            // the parent's copy-on-write faults after the fork
            "exc_page_fault",
            "access_error",
            "lock_vma_under_rcu",
            "mas_walk",
            "handle_mm_fault",
            "__handle_mm_fault",
            "do_wp_page",
            "wp_page_reuse",
            "__vmf_anon_prepare",
            "copy_mc_enhanced_fast_string",
            "copy_mc_to_kernel",
            "ptep_clear_flush",
            "ptep_set_access_flags",
            "pte_mkwrite",
            "vma_alloc_folio_noprof",
            "folio_add_new_anon_rmap",
            "folio_remove_rmap_ptes",
            "folio_move_anon_rmap",
            "folio_xchg_last_cpupid",
            "folio_add_lru_vma",
            "__folio_batch_add_and_move",
            "folio_batch_move_lru",
            "folio_lruvec_lock_irqsave",
            "folios_put_refs",
            "free_swap_cache",
            "__mem_cgroup_charge",
            "charge_memcg",
            "__folio_throttle_swaprate",
            "memcg1_commit_charge",
            "__lruvec_stat_mod_folio",
            "mod_memcg_lruvec_state",
            "__folio_mod_stat",
            "irqentry_exit_to_user_mode",
        ],
        skips_objects: &[
            "mm_struct",
            "vm_area_struct",
            "maple_node",
            "anon_vma",
            "page_table_lines",
        ],
    },
];

/// `d` made from its recorded path `p`.
pub fn derive(p: &PathFootprint, d: &DerivedPath) -> PathFootprint {
    let functions: Vec<_> = p
        .functions
        .iter()
        .filter(|f| !d.skips.contains(&f.name()))
        .cloned()
        .collect();
    let samples: u64 = functions.iter().map(|f| f.samples()).sum();
    let kept = samples as f64 / p.samples.max(1) as f64;
    let covered: std::collections::BTreeSet<u64> =
        functions.iter().flat_map(|f| f.whole_lines()).collect();
    let sampled_lines: Vec<u64> = p
        .sampled_lines
        .iter()
        .copied()
        .filter(|l| covered.contains(l))
        .collect();
    PathFootprint {
        name: d.name.to_string(),
        scenario: format!("derived from {}", d.from),
        samples,
        ops: p.ops,
        window_ns: p.window_ns,
        new_lines_last_tenth: p.new_lines_last_tenth.min(sampled_lines.len() as u64),
        new_functions_last_tenth: p.new_functions_last_tenth,
        excluded: p
            .excluded
            .iter()
            .map(|(k, &v)| (k.clone(), (v as f64 * kept).round() as u64))
            .collect(),
        missing_source: p.missing_source.clone(),
        latency_ns: p.latency_ns.map(|l| l.map(|ns| ns * kept)),
        latency_windows: p.latency_windows,
        // In the share the latency keeps (an estimate: the skipped functions' own returns
        // and calls are not counted apart).
        returns: p.returns.map(|r| r * kept),
        indirect_calls: p.indirect_calls.map(|c| c * kept),
        data: p
            .data
            .iter()
            .filter(|o| !d.skips_objects.contains(&o.as_str()))
            .cloned()
            .collect(),
        functions,
        sampled_lines,
    }
}

#[cfg(test)]
mod tests {
    use super::DERIVED;
    use crate::kernel::footprints::footprint::Footprints;

    /// A misspelt skip would leave its function's cost in the derived path. Every name is
    /// a function that a recording or a trace saw: the committed recording (any path), or
    /// Debian's 6.1 kernel under ftrace and the recordings it was compared with
    /// (kernels/linux-6.1.0-47-amd64-ftrace.toml). Not necessarily in this recording's
    /// path: sampling misses short functions, builds inline others (prep_new_page is out of
    /// line in the fc-v445 build, inlined in fc-v669's), and the recorder leaves the host's
    /// BPF hooks out; a skip the recorded path lacks skips nothing.
    #[test]
    fn every_skipped_function_is_a_function_a_recording_or_trace_saw() {
        let f = Footprints::builtin();
        let traced = crate::kernel::footprints::traced::TracedFootprints::builtin();
        let seen = |name: &str| {
            f.path
                .iter()
                .any(|p| p.functions.iter().any(|u| u.name() == name))
                || traced.path.iter().any(|p| {
                    p.functions
                        .iter()
                        .any(|u| crate::kernel::footprints::traced::base_name(u.name()) == name)
                })
                || traced
                    .recording_functions
                    .as_ref()
                    .is_some_and(|r| r.absent.contains(name) || r.untraceable.contains(name))
                || traced
                    .recording_kernel
                    .as_ref()
                    .is_some_and(|r| r.absent.contains(name))
        };
        for d in DERIVED {
            let from = f.path(d.from).unwrap();
            for s in d.skips {
                assert!(seen(s), "{}: no recording or trace saw {s}", d.name);
            }
            for o in d.skips_objects {
                assert!(from.data.iter().any(|x| x == o), "{}: {o}", d.name);
            }
        }
    }

    /// The derived path `name` runs every function of `kept` and none of `lost`, in a share
    /// of its recorded path's time within `ratio`, over fewer lines.
    fn check(name: &str, kept: &[&str], lost: &[&str], ratio: std::ops::Range<f64>) {
        let f = Footprints::builtin();
        let derived = f.path(name).unwrap();
        let from = f
            .path(DERIVED.iter().find(|d| d.name == name).unwrap().from)
            .unwrap();
        let has = |name: &str| derived.functions.iter().any(|f| f.name() == name);
        for k in kept {
            assert!(has(k), "{name} lacks {k}");
        }
        for l in lost {
            assert!(!has(l), "{name} runs {l}");
        }
        let share = derived.latency_ns.unwrap()[0] / from.latency_ns.unwrap()[0];
        assert!(ratio.contains(&share), "{name}: {share}");
        let samples: u64 = derived.functions.iter().map(|f| f.samples()).sum();
        assert_eq!(derived.samples, samples, "{name}");
        assert!(derived.estimated_lines().len() < from.estimated_lines().len());
    }

    /// fstat keeps the getattr and the copy-out and loses the name and the walk.
    #[test]
    fn an_empty_path_stat_is_the_stat_without_its_walk() {
        let kept = [
            "vfs_fstatat",
            "vfs_getattr_nosec",
            "cp_new_stat",
            "_copy_to_user",
        ];
        check(
            "fstat",
            &kept,
            &["link_path_walk", "strncpy_from_user"],
            0.2..0.6,
        );
    }

    /// vfork keeps the task's copy (task_struct, credentials, files, signals, the pid) and
    /// loses the address space's.
    #[test]
    fn a_vfork_is_the_fork_without_its_address_space() {
        let kept = [
            "copy_process",
            "dup_fd",
            "copy_creds",
            "alloc_pid",
            "wake_up_new_task",
        ];
        check(
            "vfork",
            &kept,
            &["copy_page_range", "dup_mmap", "do_wp_page"],
            0.2..0.8,
        );
    }

    /// The zero-page fault keeps the fault's entry, VMA lookup and PTE lock and loses the
    /// allocation: under half the anonymous fault's time, and none of the clear.
    #[test]
    fn a_zero_page_fault_is_the_anonymous_fault_without_its_page() {
        let kept = [
            "exc_page_fault",
            "lock_vma_under_rcu",
            "do_anonymous_page",
            "set_ptes.isra.0",
        ];
        check(
            "fault-zero",
            &kept,
            &["clear_page_erms", "get_page_from_freelist"],
            0.3..0.6,
        );
    }
}
