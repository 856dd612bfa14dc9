import re
import subprocess
import sys

import pytest

import kharden


def test_library_as_data():
    m = kharden.machines()
    assert "xeon-platinum-8160" in m.index
    assert (m["topology.sockets"] >= 1).all()
    d = kharden.defenses()
    assert {"pti:linux", "xpfo:deferred", "none"} <= set(d["name"])
    assert d.loc[d["name"] == "pti:broken-global-text", "broken"].item()
    p = kharden.parameters(machine="ivybridge-i5-3550", set={"xpfo.page_cycles": 10})
    assert p.loc["xpfo.page_cycles", "value"] == 10
    assert "set by" in p.loc["xpfo.page_cycles", "provenance"]
    assert any(i.startswith("machine.") for i in p.index)


def test_run_measures_the_defense():
    none = kharden.run("ivybridge-i5-3550", "syscall-loop", iterations=5000)
    pti = kharden.run(
        "ivybridge-i5-3550", "syscall-loop", defense="pti:linux,nopcid", iterations=5000
    )
    assert len(none) == 1 and none["machine"][0] == "ivybridge-i5-3550"
    # Without PCID every CR3 write flushes: PTI costs several times the bare syscall.
    assert pti["ns_per_iteration"][0] > 2 * none["ns_per_iteration"][0]
    assert pti["counters.cr3_write_flush"][0] > 0
    assert none["counters.cr3_write_flush"][0] == 0


def test_run_takes_every_workload_of_the_command_line():
    # Seed 002's cold kill on the node without the kernel image: replication keeps its
    # text fetches local.
    kill = dict(op="kill", caches="cold", node=1)
    base = kharden.run("xeon-e5-2690v3-2s", "kernel-op", defense="pti:linux", **kill)
    repl = kharden.run("xeon-e5-2690v3-2s", "kernel-op", defense="pti:linux,text-repl", **kill)
    assert repl["seconds"][0] < base["seconds"][0]
    assert base["counters.kernel_text.remote_memory"][0] > 0
    # KVM keeping its roots across CR0.WP toggles: no MMU reset per toggle.
    keep = kharden.run("skylake-i7-6700k", "ssdd", mmu="legacy", kvm_variant="keep-roots")
    reset = kharden.run("skylake-i7-6700k", "ssdd", mmu="legacy")
    assert keep["kvm_mmu_per_step.resets"][0] == 0 < reset["kvm_mmu_per_step.resets"][0]


def test_errors_are_python_exceptions_with_the_one_line_message():
    with pytest.raises(kharden.KhardenError, match=r"unknown parameter 'kernel.nope'"):
        kharden.parameters(set={"kernel.nope": 1})
    with pytest.raises(kharden.KhardenError, match="unknown experiment"):
        kharden.reproduce("nope")
    assert issubclass(kharden.KhardenError, ValueError)


def test_run_errors_name_the_argument_given():
    # Not a line of the sweep file run makes behind the caller's back: the argument.
    def refused(pattern, **kw):
        args = dict(machine="ivybridge-i5-3550", workload="syscall-loop")
        args.update(kw)
        with pytest.raises(kharden.KhardenError, match=pattern) as e:
            kharden.run(**args)
        assert not re.search(r"line \d", str(e.value)) and "\n" not in str(e.value)

    refused(r"^run: machine: unknown machine 'nope': expected one of .*xeon-platinum-8160", machine="nope")
    refused(r"^run: workload: unknown workload 'nope'", workload="nope")
    refused(r"^run: defense: unknown defense 'pti:nope'", defense="pti:nope")
    refused(r"^run: cpus: expected 1..1024, got 0", cpus=0)
    refused(r"^run: set: unknown parameter 'kernel.nope'", set={"kernel.nope": 1})
    # A workload option by its keyword, also where the simulator's message names none.
    refused(r"^run: syscall: unknown syscall 'nope'", syscall="nope")
    refused(r'^run: iterations: invalid type: string "x", expected u64', syscall="getpid", iterations="x")
    refused(r"^run: op: unknown operation 'nope'", workload="kernel-op", op="nope")
    # None is the option's default, as in Python.
    a = kharden.run("ivybridge-i5-3550", "syscall-loop", iterations=None, loops=None)
    b = kharden.run("ivybridge-i5-3550", "syscall-loop")
    assert a.equals(b)


def test_sweep_dict_errors_name_the_key_given():
    machines = dict(machine=["ivybridge-i5-3550"], workload=["syscall-loop"])
    with pytest.raises(kharden.KhardenError, match=r"^sweep dict: grid: defense: unknown defense 'pti:nope'"):
        kharden.sweep({"grid": dict(machines, defense=["pti:nope"])})
    ok = {"machine": "ivybridge-i5-3550", "defense": "none", "workload": "syscall-loop"}
    with pytest.raises(kharden.KhardenError, match=r"^sweep dict: point\[1\]: machine: unknown machine 'nope'"):
        kharden.sweep({"point": [ok, dict(ok, machine="nope")]})
    with pytest.raises(kharden.KhardenError, match=r"^sweep dict: grid\.set\.kernel\.irq_path_cycles: expected a non-empty list"):
        kharden.sweep({"grid": dict(machines, defense=["none"], set={"kernel.irq_path_cycles": 1})})
    with pytest.raises(kharden.KhardenError, match=r"^sweep dict: grid: set: unknown parameter 'kernel.nope'"):
        kharden.sweep({"grid": dict(machines, defense=["none"], set={"kernel.nope": [1]})})


def test_the_namespace_is_the_api():
    public = [n for n in dir(kharden) if not n.startswith("_")]
    assert public == sorted(kharden.__all__)
    for leaked in ("json", "os", "pd", "struct", "tempfile", "re", "contextlib", "ray_sweep"):
        assert leaked not in dir(kharden)
    assert "__version__" in dir(kharden)
    # Every name listed is there and documented.
    for name in kharden.__all__:
        assert getattr(kharden, name).__doc__, name


def test_sweep_rows_do_not_depend_on_threads_and_resume(small, tmp_path):
    one = kharden.sweep(small, threads=1)
    two = kharden.sweep(small, threads=2)
    assert len(one) == 9
    assert one.equals(two)
    assert "error" not in one.columns
    assert (one["cpus"].iloc[-1], one["jobs"].iloc[-1]) == (8, 5)
    out = tmp_path / "s.parquet"
    kharden.sweep(small, output=out)
    first = out.read_bytes()
    again = kharden.sweep(small, output=out)  # every point present: nothing runs
    assert out.read_bytes() == first
    assert again.equals(one)


def test_sweep_file_matches_its_parquet_metadata(repo, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "pti.parquet"
    df = kharden.sweep(repo / "examples" / "pti_syscalls.toml", output=out)
    assert len(df) == 25
    meta = pq.read_metadata(out).metadata
    assert meta[b"kharden.version"] == kharden.__version__.encode()
    assert b"kernel.irq_path_cycles" in meta[b"kharden.params"]


def test_reproduce_returns_rows():
    df = kharden.reproduce("pti-pcid")
    assert {"label", "published", "simulated", "error_pct"} <= set(df.columns)
    assert df["simulated"].notna().all()


def test_use_footprints_refuses_a_recording_without_every_path(committed_footprints, tmp_path):
    text = committed_footprints
    start = text.index('[[path]]\nname = "getppid"')
    end = text.index("[[path]]", start + 1)
    partial = tmp_path / "partial.toml"
    partial.write_text(text[:start] + text[end:])
    with pytest.raises(kharden.KhardenError, match=r"partial.toml: .*missing getppid"):
        kharden.use_footprints(partial)


def test_use_footprints_runs_the_file_given(committed_footprints, tmp_path):
    # A fresh interpreter (this one's later tests keep the committed recording) takes a
    # copy of the committed file, and simulates what this one does with the committed one.
    copy = tmp_path / "copy.toml"
    copy.write_text(committed_footprints)
    here = kharden.run("haswell-i7-4770", "syscall-loop", iterations=2000)
    code = (
        "import kharden, sys; kharden.use_footprints(sys.argv[1]); "
        "print(kharden.run('haswell-i7-4770', 'syscall-loop', iterations=2000)"
        "['ns_per_iteration'][0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(copy)], capture_output=True, text=True, check=True
    )
    assert float(out.stdout) == here["ns_per_iteration"][0]
