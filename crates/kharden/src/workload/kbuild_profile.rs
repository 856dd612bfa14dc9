//! The measured facts of one compile job (workloads/kbuild-job.toml) and their conversion
//! into a JobSpec. Work is carried in cycles of the recording host, which a simulated
//! machine executes at its own clock.

use super::kbuild::{JobSpec, ProcessSpec};
use crate::error::{Error, Result};
use crate::kernel::paths::entry::UserL1Lines;
use crate::kernel::paths::table::KernelPaths;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobProfile {
    pub processes: f64,
    pub user_anon_pages: f64,
    /// User page faults per job: one per anonymous page, `file_read_faults` and
    /// `zero_page_faults` (which must add up to it within 5%).
    pub page_faults: f64,
    /// Read faults on file mappings, served from the page cache (fault-around).
    pub file_read_faults: f64,
    /// Reads of anonymous pages not yet mapped, which map the zero page.
    pub zero_page_faults: f64,
    pub page_cache_pages: f64,
    pub syscalls: f64,
    pub read_syscall_share: f64,
    pub write_syscall_share: f64,
    pub read_pages: f64,
    pub write_pages: f64,
    pub user_seconds: f64,
    pub system_seconds: f64,
    pub host_ghz: f64,
    pub touches_per_chunk: u32,
    /// L1I and L1D misses of the job's user code per 1000 of its cycles (lines it brings
    /// into 32 KiB L1s, displacing the kernel's between its entries); 0 when not measured.
    #[serde(default)]
    pub user_l1i_lines_per_kcycle: f64,
    #[serde(default)]
    pub user_l1d_lines_per_kcycle: f64,
    /// Shares of the job's syscalls that run a syscall-table path of their own (none when
    /// the table is absent).
    #[serde(default)]
    pub syscall_mix: std::collections::BTreeMap<String, f64>,
    /// Shares of the recorded job's kernel time by operation (fault-anon, openat, ...), from
    /// sampled call chains; what `kharden run --workload kbuild` sets the model's beside.
    #[serde(default)]
    pub kernel_time_split: std::collections::BTreeMap<String, f64>,
    /// The job's processes, in the order they run.
    pub process: Vec<ProcessSpec>,
}

pub const BUILTIN: &str = include_str!("../../../../workloads/kbuild-job.toml");

impl JobProfile {
    pub fn builtin() -> JobProfile {
        Self::parse("workloads/kbuild-job.toml", BUILTIN).expect("the shipped job profile parses")
    }

    pub fn parse(place: &str, text: &str) -> Result<JobProfile> {
        let p: JobProfile = toml::from_str(text)
            .map_err(|e| Error::at(place, crate::machine::toml_message(&e, text)))?;
        check_process_tree(&p.process).map_err(|e| Error::at(place, e))?;
        let mix_sum: f64 = p.syscall_mix.values().sum();
        for (name, share) in &p.syscall_mix {
            if !crate::kernel::paths::syscall::is_known(name) {
                return Err(Error::at(
                    place,
                    format!(
                        "syscall_mix.{name}: not in the syscall table (kernel/paths/syscall.rs)"
                    ),
                ));
            }
            if !(share.is_finite() && *share >= 0.0)
                || mix_sum + p.read_syscall_share + p.write_syscall_share > 1.0 + 1e-9
            {
                return Err(Error::at(
                    place,
                    format!("syscall_mix.{name}: expected a share in 0..1, the mix with read and write summing to at most 1"),
                ));
            }
        }
        let split_sum: f64 = p.kernel_time_split.values().sum();
        if let Some((name, share)) = p
            .kernel_time_split
            .iter()
            .find(|(_, s)| !(0.0..=1.0).contains(*s))
        {
            return Err(Error::at(
                place,
                format!("kernel_time_split.{name}: expected a share in 0..1, got {share}"),
            ));
        }
        if !p.kernel_time_split.is_empty() && (split_sum - 1.0).abs() > 0.01 {
            return Err(Error::at(
                place,
                format!("kernel_time_split: expected shares summing to 1, got {split_sum:.4}"),
            ));
        }
        for (field, v) in [
            ("user_anon_pages", p.user_anon_pages),
            ("page_faults", p.page_faults),
            ("file_read_faults", p.file_read_faults),
            ("zero_page_faults", p.zero_page_faults),
        ] {
            if !(0.0..1e9).contains(&v) {
                return Err(Error::at(
                    place,
                    format!("{field}: expected a count of faults per job, got {v}"),
                ));
            }
        }
        // The faults by kind come from another recording than the total: a kind counted
        // twice, or one left out, shows here.
        let kinds = p.user_anon_pages + p.file_read_faults + p.zero_page_faults;
        if (kinds - p.page_faults).abs() > 0.05 * p.page_faults.max(1.0) {
            return Err(Error::at(
                place,
                format!(
                    "user_anon_pages + file_read_faults + zero_page_faults: expected within 5% of page_faults ({}), got {kinds}",
                    p.page_faults
                ),
            ));
        }
        for (field, v) in [
            ("user_l1i_lines_per_kcycle", p.user_l1i_lines_per_kcycle),
            ("user_l1d_lines_per_kcycle", p.user_l1d_lines_per_kcycle),
        ] {
            if !(0.0..=1000.0).contains(&v) {
                return Err(Error::at(
                    place,
                    format!("{field}: expected L1 misses per 1000 cycles, 0 to 1000, got {v}"),
                ));
            }
        }
        for (field, v) in [
            ("user_seconds", p.user_seconds),
            ("system_seconds", p.system_seconds),
            ("host_ghz", p.host_ghz),
        ] {
            if !(v > 0.0 && v < 1e6) {
                return Err(Error::at(
                    place,
                    format!("{field}: expected a positive number, got {v}"),
                ));
            }
        }
        Ok(p)
    }

    pub fn user_cycles(&self) -> f64 {
        self.user_seconds * self.host_ghz * 1e9
    }

    pub fn system_cycles(&self) -> f64 {
        self.system_seconds * self.host_ghz * 1e9
    }

    /// Frames a build of `jobs` concurrent jobs holds at most: every job fully grown, its
    /// anonymous and page-cache pages. A long build has recycled at least this many.
    pub fn steady_state_frames(&self, jobs: u32) -> u64 {
        (jobs as f64 * (self.user_anon_pages + self.page_cache_pages)).ceil() as u64
    }

    /// The job spec: what one job does, in totals per job, its syscalls those of `paths`
    /// (the recording of the kernel it will run on).
    pub fn spec(&self, paths: &KernelPaths) -> JobSpec {
        let syscall_mix = self
            .syscall_mix
            .iter()
            .map(|(name, share)| {
                let spec =
                    crate::kernel::paths::syscall::lookup(paths, name).expect("checked at parse");
                (spec, self.syscalls * share)
            })
            .collect();
        JobSpec {
            processes: self.process.clone(),
            user_cycles: self.user_cycles(),
            anon_faults: self.user_anon_pages,
            // Every anonymous page (copy-on-write copies too) was one fault.
            file_faults: self.file_read_faults,
            zero_page_faults: self.zero_page_faults,
            read_pages: self.read_pages,
            // Page-cache pages not explained by the written pages were read misses.
            read_misses: (self.page_cache_pages - self.write_pages).max(0.0),
            write_pages: self.write_pages,
            syscall_mix,
            touches_per_chunk: self.touches_per_chunk,
            user_l1_lines_per_cycle: UserL1Lines {
                instruction: self.user_l1i_lines_per_kcycle / 1000.0,
                data: self.user_l1d_lines_per_kcycle / 1000.0,
            },
        }
    }
}

/// The job's processes must form one tree, rooted at the first (the shell), listed in the
/// order they run: each parent before its children and each process right after its
/// previous sibling's whole subtree. Their shares are positive and sum to 1.
fn check_process_tree(processes: &[ProcessSpec]) -> std::result::Result<(), String> {
    let Some(first) = processes.first() else {
        return Err("process: expected at least one [[process]] table (the job's shell)".into());
    };
    if first.parent.is_some() {
        return Err("process[0]: the job's shell has no parent; remove `parent`".into());
    }
    // The processes still running (with children to come) when process i starts.
    let mut open: Vec<usize> = vec![0];
    for (i, p) in processes.iter().enumerate().skip(1) {
        let Some(parent) = p.parent else {
            return Err(format!(
                "process[{i}] ({}): expected a `parent` (only the first process, the shell, has none)",
                p.name
            ));
        };
        let Some(depth) = open.iter().position(|&o| o == parent) else {
            return Err(format!(
                "process[{i}] ({}): parent {parent} must be a process listed before it that is still running (one of {open:?})",
                p.name
            ));
        };
        open.truncate(depth + 1);
        open.push(i);
    }
    let sum: f64 = processes.iter().map(|p| p.share).sum();
    if processes
        .iter()
        .any(|p| !p.share.is_finite() || p.share <= 0.0)
        || (sum - 1.0).abs() > 1e-6
    {
        return Err(format!(
            "process: expected positive shares summing to 1, got sum {sum}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    fn committed() -> &'static crate::kernel::paths::table::KernelPaths {
        &crate::kernel::paths::recording::Recording::committed().paths
    }

    use super::JobProfile;

    const HEAD: &str = "processes = 3.0\nuser_anon_pages = 10.0\npage_faults = 12.0\nfile_read_faults = 1.0\nzero_page_faults = 1.0\npage_cache_pages = 1.0\nsyscalls = 10.0\nread_syscall_share = 0.2\nwrite_syscall_share = 0.1\nread_pages = 4.0\nwrite_pages = 1.0\nuser_seconds = 0.5\nsystem_seconds = 0.1\nhost_ghz = 2.5\ntouches_per_chunk = 8\n";

    fn parse(processes: &str) -> Result<JobProfile, String> {
        JobProfile::parse("job.toml", &format!("{HEAD}{processes}")).map_err(|e| e.to_string())
    }

    /// The job's events come from the recorded build's profile (means over its compile
    /// jobs), its times from timing a build: both must describe the same job. The recorded
    /// profile's CPU time per compile job (under tracing, a little high) is the check; the
    /// figures per object of mm/, whose objects are larger, missed it by 29%.
    #[test]
    fn the_jobs_times_and_events_describe_one_job() {
        let recorded: toml::Value =
            toml::from_str(include_str!("../../../../workloads/kbuild.toml")).unwrap();
        let compile = &recorded["kbuild"]["jobs"]["compile"];
        let mean = |key: &str| {
            let v = &compile[key][0];
            v.as_float().or(v.as_integer().map(|i| i as f64)).unwrap()
        };
        let job = JobProfile::builtin();
        assert_eq!(job.page_faults, mean("page_faults"));
        assert_eq!(job.user_anon_pages, mean("pages_user_anon"));
        let cpu_ms = (job.user_seconds + job.system_seconds) * 1e3;
        let traced = mean("cpu_ms");
        assert!(
            (cpu_ms / traced - 1.0).abs() < 0.1,
            "the job's user and system time, {cpu_ms:.0} ms, against the profile's {traced} ms per compile job"
        );
    }

    /// The kinds come from a fault tracepoint replayed against the mappings, the total from
    /// the profile: they must agree, and a profile whose kinds miss its total is refused.
    #[test]
    fn the_jobs_faults_by_kind_add_up_to_its_faults() {
        let job = JobProfile::builtin();
        let kinds = job.user_anon_pages + job.file_read_faults + job.zero_page_faults;
        assert!(
            (kinds / job.page_faults - 1.0).abs() < 0.02,
            "{kinds} of {}",
            job.page_faults
        );
        let spec = job.spec(committed());
        assert!(spec.zero_page_faults > spec.file_faults && spec.file_faults > 0.0);
        let one = "[[process]]\nname = \"sh\"\nshare = 1.0\n";
        let with = |from: &str, to: &str| {
            let head = HEAD.replace(from, to);
            JobProfile::parse("job.toml", &format!("{head}{one}"))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            with("zero_page_faults = 1.0", "zero_page_faults = 3.0"),
            "job.toml: user_anon_pages + file_read_faults + zero_page_faults: expected within 5% of page_faults (12), got 14"
        );
        assert_eq!(
            with("file_read_faults = 1.0", "file_read_faults = -1.0"),
            "job.toml: file_read_faults: expected a count of faults per job, got -1"
        );
    }

    #[test]
    fn the_shipped_profile_is_a_tree_of_seven() {
        let spec = JobProfile::builtin().spec(committed());
        let names: Vec<&str> = spec.processes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["sh", "gcc", "cc1", "as", "objtool", "fixdep", "rm"]);
        assert_eq!(spec.processes[2].parent, Some(1), "gcc runs cc1");
    }

    #[test]
    fn user_l1_miss_rates_are_optional_and_bounded() {
        let one = "[[process]]\nname = \"sh\"\nshare = 1.0\n";
        let absent = parse(one)
            .unwrap()
            .spec(committed())
            .user_l1_lines_per_cycle;
        assert_eq!(absent, Default::default());
        let set = parse(&format!(
            "user_l1i_lines_per_kcycle = 30.0\nuser_l1d_lines_per_kcycle = 20.0\n{one}"
        ))
        .unwrap()
        .spec(committed())
        .user_l1_lines_per_cycle;
        assert_eq!((set.instruction, set.data), (0.03, 0.02));
        let e = parse(&format!("user_l1d_lines_per_kcycle = -1.0\n{one}")).unwrap_err();
        assert_eq!(
            e,
            "job.toml: user_l1d_lines_per_kcycle: expected L1 misses per 1000 cycles, 0 to 1000, got -1"
        );
    }

    #[test]
    fn a_kernel_time_split_must_be_shares_of_one_whole() {
        let one = "[[process]]\nname = \"sh\"\nshare = 1.0\n";
        let with = |split: &str| parse(&format!("[kernel_time_split]\n{split}\n{one}"));
        assert!(with("fault-anon = 0.7\nopenat = 0.3").is_ok());
        let e = with("fault-anon = 0.7\nopenat = 0.2").unwrap_err();
        assert_eq!(
            e,
            "job.toml: kernel_time_split: expected shares summing to 1, got 0.9000"
        );
        let e = with("fault-anon = 1.5\nopenat = -0.5").unwrap_err();
        assert_eq!(
            e,
            "job.toml: kernel_time_split.fault-anon: expected a share in 0..1, got 1.5"
        );
        let shipped = JobProfile::builtin();
        assert!(shipped.kernel_time_split.contains_key("fault-anon"));
        assert!(
            shipped.spec(committed()).file_faults > 0.0,
            "the shipped job has file faults"
        );
    }

    #[test]
    fn process_trees_out_of_running_order_are_rejected() {
        let table = |name: &str, share: f64, parent: Option<usize>| {
            let parent = parent.map_or(String::new(), |p| format!("parent = {p}\n"));
            format!("[[process]]\nname = \"{name}\"\nshare = {share}\n{parent}")
        };
        let ok = [
            table("sh", 0.2, None),
            table("gcc", 0.2, Some(0)),
            table("cc1", 0.4, Some(1)),
            table("fixdep", 0.2, Some(0)),
        ]
        .concat();
        assert!(parse(&ok).is_ok(), "{:?}", parse(&ok).err());
        // cc1 under gcc after gcc's sibling fixdep has run: gcc has exited by then.
        let late = [
            table("sh", 0.2, None),
            table("gcc", 0.2, Some(0)),
            table("fixdep", 0.2, Some(0)),
            table("cc1", 0.4, Some(1)),
        ]
        .concat();
        let e = parse(&late).unwrap_err();
        assert!(e.starts_with("job.toml: process[3] (cc1): parent 1"), "{e}");
        let two_roots = [table("sh", 0.5, None), table("sh", 0.5, None)].concat();
        assert!(parse(&two_roots)
            .unwrap_err()
            .contains("expected a `parent`"));
        let rooted = [table("sh", 0.5, Some(0)), table("cc1", 0.5, Some(0))].concat();
        assert!(parse(&rooted).unwrap_err().contains("has no parent"));
        let shares = [table("sh", 0.5, None), table("cc1", 0.6, Some(0))].concat();
        assert!(parse(&shares).unwrap_err().contains("summing to 1"));
        assert!(parse("").unwrap_err().contains("process"));
    }
}
