"""Predicted vs measured peak resident memory (RSS) per rank of real CPU training jobs.

    python benchmarks/bench_cpu_memory.py [--home ~/.cache/llmperf-cpu-testbed] [--cluster cpu-testbed] [RUN_DIR ...]

Every run folder of `llmperf run --instrument` (session.json, rank*.jsonl) under --home/work (the CPU testbed's
recorded runs: benchmarks/bench_cpu_testbed.py) and each RUN_DIR given: the hook records the process's peak RSS at
every step on CPU (instrument/rank_memory.py, getrusage ru_maxrss: the high-water mark since the process started).
Measured: the largest over the run's steps and ranks (`measured`), and over the ranks' first steps (`step 0`: the RSS
of a glibc process creeps up over the steps, arenas and heap fragments the C library keeps; not modelled).
Predicted: this tree's `predict_command` of the run's recorded
command on --cluster (the hardware and cluster files of --home, read only; a scratch $LLMPERF_HOME without a store,
so no calibration), peak_bytes_per_gpu = the busiest rank's resident memory (schedule/memory_cpu.py). Runs of one
command are grouped: the median of their measured peaks, and their spread. `at launch` is what the run's own
prediction.json said (the llmperf that launched it: before 28 Nov 2026 a CUDA context, NCCL buffers and DeepSpeed's
whole 500M-element buckets). A recorded script path that no longer exists is read from this checkout's
examples/cpu-testbed/train_gpt.py (same file name).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTBED_SCRIPT = REPO / "examples" / "cpu-testbed" / "train_gpt.py"
MiB = 2**20


def run_dirs(home: Path, extra: list[Path]) -> list[Path]:
    found = sorted(p.parent for p in (home / "work").glob("*/try*/run/session.json"))
    found += sorted(p.parent for p in (home / "work").glob("*/run/session.json"))
    return found + [Path(p) for p in extra]


def measured_peak(run: Path, first_step_only: bool = False) -> int | None:
    """The largest peak RSS any rank recorded in any step (or in its first step)."""
    peaks = []
    for path in run.glob("rank*.jsonl"):
        steps = [json.loads(line) for line in path.read_text().splitlines()]
        steps = [rec for rec in steps if rec.get("kind") == "step" and rec.get("peak_rss_bytes")]
        peaks += [int(rec["peak_rss_bytes"]) for rec in steps[:1 if first_step_only else None]]
    return max(peaks) if peaks else None


def command_of(run: Path) -> list[str]:
    argv = list(json.loads((run / "session.json").read_text())["argv"])
    return [str(TESTBED_SCRIPT) if w.endswith(TESTBED_SCRIPT.name) and not Path(w).exists() else w for w in argv]


def group_key(argv: list[str]) -> tuple[str, ...]:
    """The command less what differs between runs of one configuration: the rendezvous port, the ds_config's path
    (its content instead)."""
    key, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--master_port", "--master-port"):
            skip = True
        elif word.endswith(".json") and Path(word).is_file():
            key.append(json.dumps(json.loads(Path(word).read_text()), sort_keys=True))
        else:
            key.append(word)
    return tuple(key)


def at_launch(run: Path) -> int | None:
    try:
        return int(json.loads((run / "prediction.json").read_text())["memory"]["peak_bytes_per_gpu"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def scratch_home(home: Path) -> Path:
    """A home that sees --home's hardware and cluster files and profiles, with a store of its own."""
    sub = Path(tempfile.mkdtemp(prefix="bench-cpu-memory-"))
    for part in ("hardware", "clusters", "profiles"):
        if (home / part).exists():
            (sub / part).symlink_to(home / part)
    return sub


def predict(argv: list[str], cluster: str, cwd: Path):
    from llmperf_hook.api import predict_command

    here = os.getcwd()
    os.chdir(cwd)
    try:
        return predict_command(argv, os.environ, cluster=cluster)
    finally:
        os.chdir(here)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path.home() / ".cache" / "llmperf-cpu-testbed")
    ap.add_argument("--cluster", default="cpu-testbed")
    ap.add_argument("runs", nargs="*", type=Path, help="more `llmperf run --instrument` run folders (session.json)")
    args = ap.parse_args()
    home = scratch_home(args.home)
    os.environ.update(DS_ACCELERATOR="cpu", LLMPERF_HOME=str(home))
    try:
        report(args)
    finally:
        shutil.rmtree(home)  # its links only: the files of --home stay


def report(args: argparse.Namespace) -> None:
    groups: dict[tuple[str, ...], list[Path]] = {}
    for run in run_dirs(args.home, args.runs):
        if measured_peak(run) is not None:
            groups.setdefault(group_key(command_of(run)), []).append(run)
    if not groups:
        sys.exit(f"no instrumented run with a recorded peak RSS under {args.home / 'work'} or in the folders given")
    print(f"{'command':<44} {'runs':>4} {'measured':>9} {'spread':>7} {'predicted':>9} {'error':>7} {'step 0':>7} "
          f"{'error':>7} {'at launch':>9}  resident + tensors (MiB), ranks/host: sum of RAM")
    errors, first_errors = [], []
    for argv, runs in sorted(groups.items(), key=lambda kv: str(kv[1][0])):
        peaks = [measured_peak(r) for r in runs]
        measured = statistics.median(peaks)
        pred = predict(command_of(runs[0]), args.cluster, runs[0].parent)
        mem = pred.estimate.memory
        err = mem.peak_bytes_per_gpu / measured - 1
        first = statistics.median(measured_peak(r, first_step_only=True) for r in runs)
        errors.append(err)
        first_errors.append(mem.peak_bytes_per_gpu / first - 1)
        launch = [x for x in map(at_launch, runs) if x]
        resident = mem.components.get("process_resident", 0)
        spread = max(peaks) / min(peaks) - 1
        print(f"{label(command_of(runs[0])):<44} {len(runs):>4} {measured / MiB:>8.0f}M {spread:>6.1%} "
              f"{mem.peak_bytes_per_gpu / MiB:>8.0f}M {err:>+7.1%} {first / MiB:>6.0f}M {first_errors[-1]:>+7.1%} "
              f"{(statistics.median(launch) / MiB if launch else float('nan')):>8.0f}M  "
              f"{resident / MiB:.0f} + {(mem.peak_bytes_per_gpu - resident) / MiB:.1f}, "
              f"{pred.config.nproc_per_node}: {(mem.capacity_bytes - mem.headroom_bytes) / MiB:.0f} of "
              f"{mem.capacity_bytes / 2**30:.1f} GiB {'fits' if mem.fits else 'DOES NOT FIT'}")
    print()
    for what, errs in (("peak RSS of the run", errors), ("peak RSS by the end of step 0", first_errors)):
        abs_err = sorted(abs(e) for e in errs)
        print(f"{what:<30} per rank: MAPE {statistics.mean(abs_err):.1%}, median |error| "
              f"{statistics.median(abs_err):.1%}, max {abs_err[-1]:.1%}, mean (bias) {statistics.mean(errs):+.1%} over "
              f"{len(errs)} commands")


def label(argv: list[str]) -> str:
    """A short name of a testbed-like command: launcher, ranks and the shape flags."""
    words = list(argv)

    def flag(name: str, short: str) -> str:
        return f"{short}{words[words.index(name) + 1]}" if name in words else ""

    ds = next((w for w in words if w.endswith(".json")), "")
    zero = ""
    if ds and Path(ds).is_file():
        zero = f"z{json.loads(Path(ds).read_text()).get('zero_optimization', {}).get('stage', 0)}"
    ranks = flag("--num_gpus", "") or flag("--nproc-per-node", "") or "1"
    parts = [Path(words[0]).name, f"{ranks}r", flag("--num-layers", "L"), flag("--hidden-size", "h"),
             flag("--seq-length", "s"), flag("--micro-batch-size", "mbs"), zero, "bf16" if "--bf16" in words else ""]
    return " ".join(p for p in parts if p)[:44]


if __name__ == "__main__":
    main()
