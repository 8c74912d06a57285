"""The node count of an sbatch job that gives no `-N/--nodes`, and so the SLURM_NNODES / SLURM_JOB_NUM_NODES its
script sees.

sbatch(1) -N: "If -N is not specified, the default behavior is to allocate enough nodes to satisfy the requested
resources as expressed by per-job specification options, e.g. -n, -c and --gpus." What those options imply here:

- `-w/--nodelist` (not a file, no `{`): sbatch itself makes its distinct host count the job's node count
  (src/sbatch/opt.c _opt_verify: `opt.min_nodes = hl_cnt; opt.nodes_set = true;` after hostlist_uniq).
- `-n N` with `--ntasks-per-node M`: M is then a maximum per node ("the --ntasks option will take precedence and the
  --ntasks-per-node will be treated as a maximum count of tasks per node", sbatch(1)), so ceil(N / M) nodes.
- `-G/--gpus N` with `--gpus-per-node M`: ceil(N / M) nodes; `-n N` with `--gpus-per-task G` and `--gpus-per-node M`:
  ceil(N * G / M).
- nothing of these: one node (slurmctld job_mgr.c: `min_nodes = job_desc->min_nodes = 1` when none was asked for).
  `-n N` or `--gpus N` alone fit on as many nodes as each node's CPUs or GPUs need, which only the cluster knows:
  llmperf assumes one node and says so.
"""

from __future__ import annotations

import itertools
import re
from typing import Mapping

from llmperf_hook.launch.top_level_split import split_outside

_BRACKET = re.compile(r"\[([^\]]*)\]")


def hostlist_count(text: str) -> int | None:
    """The distinct hosts of a Slurm host list (`node[01-04,07],gpu1`: 6); None where it names a file (a `/`, sbatch
    reads the file) or cannot be read."""
    if "/" in text or "{" in text:
        return None
    hosts: set[str] = set()
    for item in filter(None, (item.strip() for item in split_outside(text, ",", "[]"))):
        expanded = _expand(item)
        if expanded is None:
            return None
        hosts.update(expanded)
    return len(hosts) or None


def _expand(item: str) -> list[str] | None:
    """The hosts of one host-list item: every bracket's numbers (`01-04` keeps its zero padding) combined."""
    parts = _BRACKET.split(item)
    choices: list[list[str]] = []
    for k, part in enumerate(parts):
        if k % 2 == 0:
            choices.append([part])
            continue
        numbers: list[str] = []
        for piece in part.split(","):
            first, _, last = piece.partition("-")
            if not first.isdigit() or (last and not last.isdigit()):
                return None
            numbers += [str(n).zfill(len(first)) for n in range(int(first), int(last or first) + 1)]
        choices.append(numbers)
    return ["".join(combination) for combination in itertools.product(*choices)]


def _count(value: str | None) -> int | None:
    """A positive count option's number (`h100:8` gives 8), None when it is not one."""
    text = (value or "").split(",")[0].split(":")[-1].strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def default_node_count(values: Mapping[str, str]) -> tuple[int, str, str | None]:
    """The nodes a job without `--nodes` gets, what gave that count, and a warning where the cluster decides it."""
    hosts = hostlist_count(values["nodelist"]) if values.get("nodelist") else None
    if hosts:
        return hosts, f"the {hosts} hosts of --nodelist={values['nodelist']}", None
    if values.get("nodelist"):
        return 1, "the default", (
            f"sbatch is given --nodelist={values['nodelist']} but no --nodes: its node count is the number of hosts "
            "that list (or the file it names) holds, which llmperf could not count; llmperf assumes one node "
            "(SLURM_NNODES=1). Give #SBATCH --nodes=N.")
    ntasks, per_node = _count(values.get("ntasks")), _count(values.get("ntasks_per_node"))
    if ntasks and per_node:  # ceil(N / M)
        return -(-ntasks // per_node), f"--ntasks={ntasks} at most --ntasks-per-node={per_node} per node", None
    gpus, gpus_per_node, per_task = _count(values.get("gpus")), _count(values.get("gpus_per_node")), \
        _count(values.get("gpus_per_task"))
    if ntasks and per_task and not gpus:
        gpus = ntasks * per_task
    if gpus and gpus_per_node:
        return -(-gpus // gpus_per_node), f"{gpus} GPUs at --gpus-per-node={gpus_per_node}", None
    if ntasks or gpus:
        what = f"--ntasks={values['ntasks']}" if ntasks else f"--gpus={values['gpus']}"
        return 1, "the default", (
            f"sbatch is given {what} but no --nodes: Slurm allocates as many nodes as that needs given each node's "
            f"{'CPUs' if ntasks else 'GPUs'} (sbatch(1) -N), which only the cluster knows; llmperf assumes one node "
            "(SLURM_NNODES=1). Give #SBATCH --nodes=N (or --ntasks-per-node / --gpus-per-node) to say how many.")
    return 1, "the default", None
