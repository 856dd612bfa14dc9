"""What the scripts that measure a recorded compile job share: the job's processes and the
command line of a script that reads perf script output and divides by the build's jobs."""
import argparse
import sys

# The compile job's own processes (make -> sh -> gcc -> cc1, as; objtool, fixdep, rm), each
# with the weight of its samples or events: a recipe has two shells, this job's and
# check-local-export's, so half of sh's are the job's (the rule workloads/kbuild-job.toml's
# process shares use).
JOB_COMMS = {"cc1": 1.0, "as": 1.0, "gcc": 1.0, "objtool": 1.0, "fixdep": 1.0, "rm": 1.0,
             "sh": 0.5}


def per_job_arguments(doc):
    """A parser for `SCRIPT --jobs N`, described by the first line of `doc`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("script", help="perf script output (- for stdin)")
    ap.add_argument("--jobs", type=float, required=True,
                    help="compile jobs in the build (the profile's count, 317 for kernel/ mm/)")
    return ap


def open_script(path):
    """The perf script output at `path`, or stdin for '-'."""
    return sys.stdin if path == "-" else open(path)
