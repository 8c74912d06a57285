"""`srun ... PROGRAM` and processes started inside a Slurm allocation -> LaunchSize.

srun semantics (slurm.schedmd.com/srun.html): `-N/--nodes`, `-n/--ntasks`, `--ntasks-per-node`; absent flags
are inherited from the allocation's environment (SLURM_NNODES / SLURM_JOB_NUM_NODES, SLURM_NTASKS,
SLURM_NTASKS_PER_NODE such as "8" or "8(x4)"). When srun runs a launcher (torchrun, deepspeed), that launcher
sizes the job on each node and is parsed instead.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import parse_int
from llmperf_hook.launch.options import Grammar, Option, scan_options
from llmperf_hook.launch.slurm_node_count import allocation_counts, parse_node_counts
from llmperf_hook.launch.slurm_option_names import SRUN_ARITY
from llmperf_hook.launch.sizing import PRICED_ENV, LaunchSize, Sized, gpus_from_env
from llmperf_hook.provenance import Source, SourceKind

_VALUED = {
    "-N": "nodes", "--nodes": "nodes", "-n": "ntasks", "--ntasks": "ntasks", "--ntasks-per-node": "ntasks_per_node",
    "--gpus-per-node": "gpus_per_node", "--gres": "gres", "-G": "gpus", "--gpus": "gpus", "-c": "cpus_per_task",
    "--cpus-per-task": "cpus_per_task", "-p": "partition", "--partition": "partition", "-A": "account",
    "--account": "account", "-t": "time", "--time": "time", "-J": "job_name", "--job-name": "job_name",
    "-o": "output", "--output": "output", "-e": "error", "--error": "error", "--mpi": "mpi",
    "--container-image": "container_image", "--container-mounts": "container_mounts",
    "--container-workdir": "container_workdir", "--container-name": "container_name", "--export": "export",
    "--cpu-bind": "cpu_bind", "--gpu-bind": "gpu_bind", "--mem": "mem", "-w": "nodelist", "--nodelist": "nodelist",
    "-x": "exclude", "--exclude": "exclude", "-m": "distribution", "--distribution": "distribution",
    "--mem-per-cpu": "mem_per_cpu", "--mem-per-gpu": "mem_per_gpu", "--gpus-per-task": "gpus_per_task",
    "--ntasks-per-gpu": "ntasks_per_gpu", "--cpus-per-gpu": "cpus_per_gpu", "--network": "network",
    "-D": "chdir", "--chdir": "chdir", "--qos": "qos", "--reservation": "reservation", "-C": "constraint",
    "--constraint": "constraint", "--jobid": "jobid", "--open-mode": "open_mode", "--signal": "signal",
    "-W": "wait", "--wait": "wait", "--het-group": "het_group", "--environment": "environment",
}
_SWITCHES = ("-l", "--label", "--exclusive", "-u", "--unbuffered", "-K", "--kill-on-bad-exit", "--overlap",
             "--no-container-mount-home", "--container-remap-root", "--no-kill", "-k", "-v", "--verbose", "--pty")
SRUN_OPTIONS: dict[str, Option] = {
    **{k: Option(v) for k, v in _VALUED.items()},
    **{k: Option(k.lstrip("-").replace("-", "_"), takes_value=False) for k in _SWITCHES},
}
SRUN_GRAMMAR = Grammar(SRUN_ARITY, "getopt", "srun reads its options with getopt_long, src/common/slurm_opt.c", strict=False)
"""srun as Slurm reads it: a unique prefix of a long option is that option (`--ntasks-per-n=8`), an ambiguous one
(`--nod=2`: --nodefile, --nodelist, --nodes) stops srun; options only SPANK plugins define are skipped with a
warning (strict=False)."""


def _env_int(env: Mapping[str, str], names: Sequence[str], used: dict[str, str]) -> Sized | None:
    """First of `names` set in env, as an int ("8(x4)" -> 8, "2-4" -> 4)."""
    for name in names:
        if env.get(name, "").strip():
            text = env[name].split("(")[0].split(",")[0].split("-")[-1]
            used[name] = env[name]
            value = parse_int(text, name, "the environment")
            if value < 1:
                raise UsageError(f"{name}={env[name]} in the environment must be at least 1.")
            return Sized(value, Source(SourceKind.ENV, name))
    return None


def _flag_int(values: Mapping[str, str], flags: Mapping[str, str], dest: str) -> Sized | None:
    if dest not in values:
        return None
    value = parse_int(values[dest], flags[dest], "the srun command")
    if value < 1:
        raise UsageError(f"srun {flags[dest]} {values[dest]} must be at least 1.")
    return Sized(value, Source(SourceKind.LAUNCHER, flags[dest]))


def _flag_nodes(values: Mapping[str, str], flags: Mapping[str, str], warnings: list[str]) -> Sized | None:
    """srun -N COUNT | MIN-MAX | size string (slurm_node_count.py): the most it allows, with a warning for a range,
    and the fewest as `least` (the step gets some count in the range: tune checks each, tune/elastic.py)."""
    if "nodes" not in values:
        return None
    try:
        counts = parse_node_counts(values["nodes"])
    except ValueError as err:
        raise UsageError(f"srun would stop: {flags['nodes']} {values['nodes']} is not a node count (srun: '{err}'). "
                         "Give a count, a MIN-MAX range or a list of counts.") from None
    if counts.assumed < 1:
        raise UsageError(f"srun {flags['nodes']} {values['nodes']} must be at least 1.")
    warning = counts.warning(f"srun {flags['nodes']} {values['nodes']}", "its command line")
    warnings.extend([warning] if warning else [])
    return Sized(counts.assumed, Source(SourceKind.LAUNCHER, flags["nodes"]), least=counts.low, listed=counts.listed)


def _allocation_nodes(env: Mapping[str, str], used: dict[str, str]) -> Sized | None:
    """The allocation's node count for a step without -N (SLURM_NNODES), with the fewest of an sbatch --nodes=MIN-MAX
    range or size string (slurm_node_count.allocation_counts) as `least`, and the counts a size string lists."""
    nnodes = _env_int(env, ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"), used)
    if nnodes is None or nnodes.value is None:
        return nnodes
    counts = allocation_counts(env, nnodes.value)
    return nnodes if counts is None else replace(nnodes, least=counts.low, listed=counts.listed)


def _gpus_per_node(values: Mapping[str, str], flags: Mapping[str, str], env: Mapping[str, str], used: dict[str, str]) -> Sized | None:
    if "gpus_per_node" in values:
        return Sized(parse_int(values["gpus_per_node"].split(":")[-1], "--gpus-per-node", "srun"), Source(SourceKind.LAUNCHER, "--gpus-per-node"))
    if "gres" in values and "gpu" in values["gres"]:
        return Sized(parse_int(values["gres"].split(":")[-1], "--gres", "srun"), Source(SourceKind.LAUNCHER, "--gres"))
    return gpus_from_env(env, used)


def size_srun_tasks(values: Mapping[str, str], flags: Mapping[str, str], env: Mapping[str, str], used: dict[str, str]) -> tuple[Sized, Sized, Sized, list[str]]:
    """(nnodes, tasks per node, world) of an srun step that starts the training processes directly."""
    warnings: list[str] = []
    nnodes = _flag_nodes(values, flags, warnings) or _allocation_nodes(env, used)
    nnodes = nnodes or Sized(1, Source(SourceKind.DEFAULT, "srun: one node"))
    ntasks = _flag_int(values, flags, "ntasks")
    per_node = _flag_int(values, flags, "ntasks_per_node")
    if ntasks is None and per_node is None:
        per_node = _env_int(env, ("SLURM_NTASKS_PER_NODE",), used)
        ntasks = None if per_node else _env_int(env, ("SLURM_NTASKS", "SLURM_NPROCS"), used)
    if ntasks is not None:  # a task count fixes the world whatever count of a -N MIN-MAX range the step gets
        nnodes = replace(nnodes, least=None)
    if ntasks is None and per_node is None and env.get("SLURM_TASKS_PER_NODE", "").strip():
        return _allocation_tasks(env, used, replace(nnodes, least=None))  # so does the allocation's task layout
    if ntasks is None and per_node is None:
        per_node = _gpus_per_node(values, flags, env, used)
        if per_node is not None:
            warnings.append(f"srun task count not given: assumed one task per GPU ({per_node.value} per node, {per_node.source})")
    if ntasks is None and per_node is None:
        per_node = Sized(1, Source(SourceKind.DEFAULT, "srun: one task per node"))
    assert nnodes.value is not None
    if ntasks is not None and per_node is not None and "nodes" not in values:
        nodes = _tasks_with_cap(ntasks, per_node)
        assert nodes.value is not None and ntasks.value is not None
        spread = Sized(-(-ntasks.value // nodes.value), Source(SourceKind.DERIVED, "ceil(ntasks / nnodes)"))
        return nodes, (per_node if spread.value == per_node.value else spread), ntasks, warnings
    if ntasks is not None:
        assert ntasks.value is not None
        per_node_value = -(-ntasks.value // nnodes.value)
        return nnodes, Sized(per_node_value, Source(SourceKind.DERIVED, "ceil(ntasks / nnodes)")), ntasks, warnings
    assert per_node is not None and per_node.value is not None
    return nnodes, per_node, Sized(nnodes.value * per_node.value, Source(SourceKind.DERIVED, "nnodes * ntasks_per_node")), warnings


def _tasks_with_cap(ntasks: Sized, per_node: Sized) -> Sized:
    """srun -n N --ntasks-per-node M without -N: -n takes precedence and M is the most tasks on a node
    (srun.html, --ntasks-per-node), so the step spans ceil(N / M) nodes."""
    assert ntasks.value is not None and per_node.value is not None
    return Sized(-(-ntasks.value // per_node.value), Source(SourceKind.DERIVED, "ceil(ntasks / ntasks_per_node)"))


def tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed SLURM_TASKS_PER_NODE ("8(x2),4" -> [8, 8, 4])."""
    counts: list[int] = []
    for part in text.split(","):
        count, _, repeat = part.strip().partition("(x")
        counts += [parse_int(count, "SLURM_TASKS_PER_NODE", "the environment")] * (
            parse_int(repeat.rstrip(")"), "SLURM_TASKS_PER_NODE", "the environment") if repeat else 1)
    return counts


def _allocation_tasks(env: Mapping[str, str], used: dict[str, str], nnodes: Sized) -> tuple[Sized, Sized, Sized, list[str]]:
    """The allocation's task layout from SLURM_TASKS_PER_NODE, which Slurm always sets (SLURM_NTASKS_PER_NODE only
    with --ntasks-per-node): one entry per node of the allocation."""
    text = env["SLURM_TASKS_PER_NODE"]
    used["SLURM_TASKS_PER_NODE"] = text
    counts = tasks_per_node(text)
    if min(counts) < 1:
        raise UsageError(f"SLURM_TASKS_PER_NODE={text} in the environment must give at least 1 task per node.")
    src = Source(SourceKind.ENV, "SLURM_TASKS_PER_NODE")
    warnings = [] if len(set(counts)) == 1 else [f"uneven tasks per node {counts} (SLURM_TASKS_PER_NODE): sized by the total, {sum(counts)} ranks"]
    nodes = nnodes if nnodes.source.kind != SourceKind.DEFAULT else Sized(len(counts), src)
    return nodes, Sized(max(counts), src), Sized(sum(counts), src), warnings


def export_items(value: str) -> list[str]:
    """The comma-separated items of an `--export` value as Slurm splits them (src/common/env.c find_quote_token): a
    comma splits only where single and double quotes are each closed (each kind toggles on its own, as there), and
    an item wholly inside one pair of quotes loses them (`"FOO=a,b"` is FOO=a,b; `FOO="a,b"` keeps its quotes in the
    value). An unclosed quote runs to the end."""
    items: list[str] = []
    start, open_quotes = 0, {"'": False, '"': False}
    for i, char in enumerate(value + ","):
        if char in open_quotes and i < len(value):
            open_quotes[char] = not open_quotes[char]
        elif char == "," and (not any(open_quotes.values()) or i == len(value)):
            item = value[start:i]
            if len(item) >= 2 and item[0] in "'\"" and item[-1] == item[0]:
                item = item[1:-1]
            items.append(item)
            start = i + 1
    return [item for item in items if item] if value else []


def apply_export(value: str, env: dict[str, str], used: dict[str, str]) -> None:
    """srun `--export=[ALL,]NAME[=value],...|NONE` as srun builds its tasks' environment (src/srun/launch.c
    _build_user_env; srun.html --export): items are read up to a NONE; NAME=value sets NAME and a bare NAME passes
    the caller's value; the caller's other variables reach the tasks only with ALL, and then the caller's value wins
    over an explicit one (env_array_merge overwrites). So without ALL the variables llmperf prices (sizing.PRICED_ENV:
    CUDA_DEVICE_MAX_CONNECTIONS ...) are withheld unless listed."""
    listed: dict[str, str] = {}
    everything = False
    for item in export_items(value):
        if item.upper() == "NONE":
            break
        everything = everything or item.upper() == "ALL"
        name, eq, assigned = item.partition("=")
        if name and (eq or name in env):
            listed[name] = assigned if eq else env[name]
    if not everything:
        for name in PRICED_ENV:
            env.pop(name, None)
    for name, assigned in listed.items():
        if not (everything and name in env):
            env[name] = used[name] = assigned


def scan_srun(words: Sequence[str], start: int) -> tuple[dict[str, str], dict[str, str], int, list[str]]:
    """srun's options -> (values, spellings, index of the program, warnings)."""
    opts = scan_options(words, start, SRUN_OPTIONS, "srun", SRUN_GRAMMAR)
    if opts.rest >= len(words):
        raise UsageError("the srun command names no program to run.")
    return opts.values, opts.flags, opts.rest, [f"unknown srun option {w} ignored" for w in opts.unknown] + \
        [f"srun option {w} accepted, not modelled" for w in opts.unmodelled]


def _consistent_with_world(nnodes: Sized, local: Sized, world: Sized) -> tuple[Sized, Sized, Sized, list[str]]:
    """WORLD_SIZE is what torch's env:// rendezvous uses; node counts that disagree with it are re-derived from it."""
    assert nnodes.value is not None and local.value is not None and world.value is not None
    if nnodes.value * local.value == world.value or local.source.kind == SourceKind.DERIVED:
        return nnodes, local, world, []
    note = (f"{world.source} {world.value} disagrees with {nnodes.source} {nnodes.value} x {local.source} {local.value}: "
            "sized from WORLD_SIZE")
    if world.value % local.value == 0:
        derived = Sized(world.value // local.value, Source(SourceKind.DERIVED, "world_size / processes per node"))
        return derived, local, world, [] if nnodes.source.kind == SourceKind.DEFAULT else [note]
    per_node = Sized(-(-world.value // nnodes.value), Source(SourceKind.DERIVED, "ceil(world_size / nnodes)"))
    return nnodes, per_node, world, [note]


def size_from_env(env: Mapping[str, str], used: dict[str, str]) -> tuple[Sized, Sized, Sized, list[str]] | None:
    """A `python train.py` told its world by the environment: WORLD_SIZE (torch's env:// rendezvous), else the
    Slurm allocation's task layout (SLURM_NTASKS_PER_NODE / SLURM_NTASKS / SLURM_GPUS_ON_NODE with SLURM_NNODES),
    as when an sbatch script's line runs as srun tasks."""
    world = _env_int(env, ("WORLD_SIZE",), used)
    if world is not None and world.value is not None:
        nnodes = _env_int(env, ("NNODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"), used) or Sized(1, Source(SourceKind.DEFAULT, "one node"))
        assert nnodes.value is not None
        local = _env_int(env, ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"), used)
        local = local or Sized(-(-world.value // nnodes.value), Source(SourceKind.DERIVED, "ceil(world_size / nnodes)"))
        return _consistent_with_world(nnodes, local, world)
    slurm_layout = ("SLURM_NTASKS_PER_NODE", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE", "SLURM_GPUS_ON_NODE")
    if not any(env.get(name, "").strip() for name in slurm_layout):
        return None
    nnodes, per_node, total, warnings = size_srun_tasks({}, {}, env, used)
    warnings.append("python started inside a Slurm allocation: sized as the allocation's tasks (SLURM_* variables)")
    return nnodes, per_node, total, warnings


_HET_NAMES = ("SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS", "SLURM_GPUS_ON_NODE")
"""The allocation variables a heterogeneous job also sets per component, with `_HET_GROUP_<k>` appended."""


def het_group_env(value: str, env: dict[str, str]) -> None:
    """`srun --het-group=K` in a heterogeneous job's script: the step runs on component K, so its allocation
    variables are component K's (heterogeneous_jobs.html: "By default, the application is launched only on the first
    component"; the plain names hold component 0's). Several components (`0,1`, `1-2`) make one MPI_COMM_WORLD of
    different allocations, which llmperf does not price; a K the job lacks stops srun."""
    groups = max((int(name.rsplit("_", 1)[1]) for name in env if name.startswith("SLURM_JOB_ID_HET_GROUP_")),
                 default=None)
    spec = value.strip().removeprefix("[").removesuffix("]")  # srun reads it as the hostlist `[VALUE]`
    if spec == "0" and groups is None:  # a job of one component: its own
        return
    if not re.fullmatch(r"\d+(?:[-,]\d+)*", spec):  # src/srun/opt.c: each item strtol'd, >= 0, nothing after
        raise UsageError(f"srun would stop: --het-group={value} names no component (srun: 'Invalid --het-group "
                         f"value: {value}'; it takes a component number, a list or a range). Give --het-group=K.")
    if not spec.isdigit():
        raise UsageError(f"srun --het-group={value} starts one step over several components of the heterogeneous job; "
                         "llmperf prices a job on one allocation. Give the component's launch (--het-group=K), or the "
                         "launch line after `--` with --nnodes / --nproc-per-node.")
    k = int(spec)
    if groups is None or k > groups:
        have = "is not heterogeneous (no #SBATCH hetjob line)" if groups is None else f"has components 0 to {groups}"
        raise UsageError(f"srun --het-group={k}: the job {have} (srun: 'Attempt to run a job step with het-group value "
                         f"of {k}, but the job allocation has maximum value of {groups or 0}'). Name a component the "
                         "job has.")
    for name in _HET_NAMES:
        if f"{name}_HET_GROUP_{k}" in env:
            env[name] = env[f"{name}_HET_GROUP_{k}"]
        else:
            env.pop(name, None)


def launchers_per_node(values: Mapping[str, str], flags: Mapping[str, str], env: Mapping[str, str],
                       launcher: str, per_node: int | None) -> list[str]:
    """A warning when srun starts several tasks on each node (its --ntasks-per-node, -n over -N, or the allocation's
    SLURM_NTASKS_PER_NODE, which srun inherits) and each task runs `launcher`, itself starting `per_node` processes:
    every task is a launcher agent, so the node runs that many agents' processes, which no rendezvous of one agent per
    node expects (torchrun --nnodes counts agents; deepspeed's runner starts its own ssh/pdsh per task)."""
    scratch: dict[str, str] = {}
    tasks = _flag_int(values, flags, "ntasks_per_node")
    nodes, ntasks = _flag_nodes(values, flags, []), _flag_int(values, flags, "ntasks")
    if tasks is None and ntasks is not None and nodes is not None and ntasks.value and nodes.value:
        tasks = Sized(-(-ntasks.value // nodes.value), Source(SourceKind.DERIVED, "srun -n over -N"))
    if tasks is None and ntasks is None:
        tasks = _env_int(env, ("SLURM_NTASKS_PER_NODE",), scratch)
    if tasks is None or not tasks.value or tasks.value < 2:
        return []
    each = f"{per_node} processes" if per_node else "its processes"
    return [f"srun starts {tasks.value} tasks on each node ({tasks.source}) and each runs {launcher}, which starts "
            f"{each} itself: {tasks.value} launchers per node, where the launch expects one. Priced as one {launcher} "
            "per node; start it with srun --ntasks-per-node=1 (Slurm's task layout is the launcher's then)."]
