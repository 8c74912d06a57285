"""The `deepspeed` launcher -> LaunchSize, following deepspeed/launcher/runner.py.

Resource pool: the hostfile (`-H/--hostfile`, default /job/hostfile, lines `host slots=N`) or, without one, the
local machine. Then `--include/--exclude` (NODE[:SLOT,...]@...) filter it, `--num_nodes` keeps the first N
hosts and `--num_gpus` sets every kept host to N slots. World size = the slots that remain. A multi-node launch
exports the `.deepspeed_env` files to every rank (launch/deepspeed_env.py).
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from typing import Mapping, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import parse_int
from llmperf_hook.launch.script_files import script_file_text
from llmperf_hook.launch.deepspeed_elastic import elastic_node_range
from llmperf_hook.launch.deepspeed_env import apply_rank_exports
from llmperf_hook.launch.options import Grammar, Option, refuse_ambiguous_after_program, scan_options
from llmperf_hook.launch.parsed_job import ScriptFile
from llmperf_hook.launch.sizing import LaunchSize, Sized
from llmperf_hook.provenance import Source, SourceKind

DEFAULT_HOSTFILE = "/job/hostfile"  # deepspeed.launcher.constants.DLTS_HOSTFILE
_VALUED = {
    "-H": "hostfile", "--hostfile": "hostfile", "-i": "include", "--include": "include", "-e": "exclude",
    "--exclude": "exclude", "--num-nodes": "num_nodes", "--num-gpus": "num_gpus", "--num-accelerators": "num_gpus",
    "--min-elastic-nodes": "min_elastic_nodes", "--max-elastic-nodes": "max_elastic_nodes",
    "--master-port": "master_port", "--master-addr": "master_addr", "--node-rank": "node_rank",
    "--launcher": "launcher", "--launcher-args": "launcher_args", "--enable-each-rank-log": "enable_each_rank_log",
    "--autotuning": "autotuning", "--bind-core-list": "bind_core_list", "--ssh-port": "ssh_port",
    "--venv-script": "venv_script", "--log-level": "log_level",
}
_SWITCHES = ("--module", "--no-python", "--no-local-rank", "--no-ssh", "--no-ssh-check", "--force-multi",
             "--save-pid", "--elastic-training", "--bind-cores-to-rank", "--quiet", "-q")
DEEPSPEED_OPTIONS: dict[str, Option] = {
    **{k: Option(v) for k, v in _VALUED.items()},
    **{k: Option(k.lstrip("-").replace("-", "_"), takes_value=False) for k in _SWITCHES},
}


def _runner_spelling(option: str) -> str:
    """The option string as runner.py defines it: long options with underscores only (`--num_gpus`)."""
    return option if len(option) == 2 else "--" + option[2:].replace("-", "_")


DEEPSPEED_GRAMMAR = Grammar(
    {"-h": "0", "--help": "0", **{_runner_spelling(k): "1" for k in _VALUED},
     **{_runner_spelling(k): "0" for k in _SWITCHES}},
    "argparse", "deepspeed/launcher/runner.py, argparse")
"""runner.py's parser (deepspeed 0.19.8 as installed, plus --min/--max_elastic_nodes and --elastic_training of
the DeepSpeed sources' HEAD): every long option spelled with underscores only (`--num_gpus`; `--num-gpus` is
'unrecognized arguments'), ArgumentParser() with allow_abbrev at its default (True), parse_args; so `--num_g 4` is
--num_gpus, `--num 4` is ambiguous (--num_nodes, --num_gpus, --num_accelerators), and either of those refusals
ends the launch with exit status 2."""
_HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)")


def read_hostfile(path: str, text: str | None = None) -> "OrderedDict[str, int]":
    """Parse an MPI-style hostfile (`worker-0 slots=8`), rejecting what DeepSpeed's _parse_hostfile rejects; `text`:
    its content when the launch script writes it (batch_script.script_file_text), else it is read from `path`."""
    pool: OrderedDict[str, int] = OrderedDict()
    try:
        if text is None:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
    except OSError as err:
        raise UsageError(f"cannot read the deepspeed hostfile {path}: {err.strerror}.") from None
    lines = text.splitlines()
    for line in (ln.strip() for ln in lines):
        if not line or line.startswith("#"):
            continue
        match = _HOSTFILE_LINE.search(line)
        if not match:
            raise UsageError(f"hostfile {path} has a bad entry {line!r}: DeepSpeed expects lines `HOST slots=N`.")
        if match.group(1) in pool:
            raise UsageError(f"hostfile {path} lists host {match.group(1)} twice; DeepSpeed refuses to launch.")
        pool[match.group(1)] = int(match.group(2))
    if not pool:
        raise UsageError(f"hostfile {path} is empty or not formatted as `HOST slots=N` lines.")
    return pool


def _parse_filter(text: str) -> dict[str, list[int]]:
    """`worker-0@worker-1:0,2` -> {worker-0: [], worker-1: [0, 2]} (empty = every slot)."""
    out: dict[str, list[int]] = {}
    for spec in text.split("@"):
        host, colon, slots = spec.partition(":")
        if colon and not all(slot.strip() for slot in slots.split(",")):  # runner.py parse_node_config: int("")
            raise UsageError(f"deepspeed --include/--exclude {text!r}: {spec!r} has an empty slot after the ':'; DeepSpeed's "
                             "launcher (runner.py parse_node_config) reads each slot with int() and stops ('invalid "
                             f"literal for int() with base 10'). Write {host!r} for the whole host, or {host}:0,1 for "
                             "some of its GPUs.")
        listed = [parse_int(s, "--include/--exclude slot", text) for s in slots.split(",")] if colon else []
        out[host] = sorted(set(out.get(host, []) + listed))
    return out


def filter_resources(pool: Mapping[str, list[int]], include: str, exclude: str) -> "OrderedDict[str, list[int]]":
    """DeepSpeed's parse_resource_filter: keep the included hosts/slots, or drop the excluded ones."""
    if include and exclude:
        raise UsageError("deepspeed --include and --exclude are mutually exclusive; give one of them.")
    if not include and not exclude:
        return OrderedDict(pool)
    chosen: dict[str, list[int]] = {} if include else {h: list(s) for h, s in pool.items()}
    for host, slots in _parse_filter(include or exclude).items():
        if host not in pool:
            raise UsageError(f"deepspeed --{'include' if include else 'exclude'} names host {host!r}, which the resource pool ({', '.join(pool)}) lacks.")
        for slot in slots:
            if slot not in pool[host]:
                raise UsageError(f"deepspeed filter names slot {slot} on host {host}, which has slots {pool[host]}.")
        if include:
            chosen[host] = slots or list(pool[host])
        else:
            chosen[host] = [s for s in chosen[host] if s not in slots] if slots else []
    return OrderedDict((h, chosen[h]) for h in pool if chosen.get(h))


def _pool(values: Mapping[str, str], flags: Mapping[str, str], env: Mapping[str, str], used: dict[str, str],
          files: Mapping[str, ScriptFile]) -> tuple["OrderedDict[str, list[int]] | None", Source]:
    """The resource pool and where it came from; None = the local machine with an unknown GPU count."""
    path = values.get("hostfile", DEFAULT_HOSTFILE)
    written = script_file_text(path, files)
    if written is not None or os.path.isfile(path):
        pool = read_hostfile(path, written)
        return OrderedDict((h, list(range(n))) for h, n in pool.items()), Source(SourceKind.HOSTFILE, path)
    if "hostfile" in values:
        raise UsageError(
            f"deepspeed {flags['hostfile']} names {path}, which does not exist (relative paths are read from "
            f"{os.getcwd()}). Fix the path, or drop --hostfile and give the size with --num_nodes/--num_gpus."
        )
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    explicit = any(k in values for k in ("include", "exclude", "num_gpus")) or int(values.get("num_nodes", "-1") or -1) > 1
    if visible and not explicit:
        used["CUDA_VISIBLE_DEVICES"] = visible
        slots = [parse_int(s, "CUDA_VISIBLE_DEVICES entry", "env") for s in visible.split(",") if s.strip()]
        return OrderedDict(localhost=slots), Source(SourceKind.ENV, "CUDA_VISIBLE_DEVICES")
    return None, Source(SourceKind.DEFAULT, "deepspeed: every GPU of the local machine")


def _counts(values: Mapping[str, str]) -> tuple[int, int]:
    nodes = parse_int(values.get("num_nodes", "-1"), "--num_nodes", "the deepspeed command")
    gpus = parse_int(values.get("num_gpus", "-1"), "--num_gpus", "the deepspeed command")
    if (nodes >= 0 or gpus >= 0) and (values.get("include") or values.get("exclude")):
        raise UsageError("deepspeed cannot combine --num_nodes/--num_gpus with --include/--exclude (runner.py rejects it).")
    return nodes, gpus


def _size_from_pool(pool: "OrderedDict[str, list[int]]", nodes: int, gpus: int, src: Source, flags: Mapping[str, str],
                    values: Mapping[str, str]) -> tuple[Sized, Sized, Sized, list[str]]:
    hosts = first_nodes(pool, values)
    slots = {h: (list(range(gpus)) if gpus > 0 else pool[h]) for h in hosts}
    nnodes_src = Source(SourceKind.LAUNCHER, flags["num_nodes"]) if nodes > 0 else src
    nproc_src = Source(SourceKind.LAUNCHER, flags["num_gpus"]) if gpus > 0 else src
    counts = [len(s) for s in slots.values()]
    warnings = [] if len(set(counts)) <= 1 else [f"uneven slots per node {counts}: sized by the total, {sum(counts)} ranks"]
    return Sized(len(hosts), nnodes_src), Sized(max(counts), nproc_src), Sized(sum(counts), src if gpus <= 0 else nproc_src), warnings


def _local_unknown(values: Mapping[str, str], src: Source) -> Sized:
    """Every GPU of the local machine; with --exclude (runner.py then ignores CUDA_VISIBLE_DEVICES) minus some."""
    if values.get("exclude"):
        exclude = values["exclude"]
        _parse_filter(exclude)  # what runner.py refuses whatever the GPU count (`localhost:`), also with --nproc-per-node

        def left(gpus: int) -> int:  # runner.py: the local pool is localhost's slots 0 .. device_count() - 1
            pool = filter_resources({"localhost": list(range(gpus))}, "", exclude)
            if not pool:
                raise UsageError(f"deepspeed --exclude {exclude} leaves none of the node's {gpus} GPUs to run on.")
            return len(pool["localhost"])
        return Sized(None, Source(SourceKind.LAUNCHER, f"--exclude {exclude}"), f"deepspeed --exclude {exclude} "
                     "without a hostfile leaves the local machine's GPUs "
                     "minus those (runner.py ignores CUDA_VISIBLE_DEVICES with --exclude); give the number left", False,
                     of_node=left)
    return Sized(None, src, "deepspeed without --hostfile or --num_gpus starts one process per GPU of the machine")


def multi_node_exec(values: Mapping[str, str], hosts: int) -> bool:
    """deepspeed/launcher/runner.py main: `multi_node_exec = (args.force_multi or len(active_resources) > 1) and not
    args.no_ssh` -- a multi-node runner (pdsh, mpirun, srun) starts the ranks, not deepspeed.launcher.launch here."""
    return ("force_multi" in values or hosts > 1) and "no_ssh" not in values


def active_pool(values: Mapping[str, str], flags: Mapping[str, str], env: Mapping[str, str], used: dict[str, str],
                files: Mapping[str, ScriptFile]
                ) -> tuple["OrderedDict[str, list[int]] | None", Source, Mapping[str, str]]:
    """runner.py main up to parse_inclusion_exclusion: the resource pool (hostfile, or this machine:
    CUDA_VISIBLE_DEVICES as `--include localhost:...`, None when its GPU count is unknown) filtered by
    --include/--exclude, where it came from, and `values` as the rest reads them; a UsageError where runner.py stops.
    --num_nodes is applied by `first_nodes`."""
    nodes, _ = _counts(values)
    pool, src = _pool(values, flags, env, used, files)
    if values.get("include") and values.get("exclude"):  # runner.py parse_resource_filter, whatever the pool
        filter_resources({}, values["include"], values["exclude"])
    if pool is None and values.get("include", "").startswith("localhost:"):
        pool = OrderedDict(localhost=_parse_filter(values["include"]).get("localhost", []))
        src = Source(SourceKind.LAUNCHER, flags["include"])
        values = {k: v for k, v in values.items() if k != "include"}
    if pool is None:
        if nodes > 1:
            raise UsageError(f"deepspeed --num_nodes {nodes} needs a hostfile listing the nodes (runner.py: 'Num nodes is >1 but no extra nodes available via hostfile'). Pass --hostfile FILE.")
        return None, src, values
    pool = filter_resources(pool, values.get("include", ""), values.get("exclude", ""))
    if not pool:
        raise UsageError("the deepspeed --include/--exclude filter leaves no GPU to run on.")
    return pool, src, values


def first_nodes(hosts: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """runner.py main: `--num_nodes N` keeps the first N active hosts."""
    nodes = _counts(values)[0]
    return list(hosts)[:nodes] if nodes > 0 else list(hosts)


def active_hosts(values: Mapping[str, str], flags: Mapping[str, str], env: Mapping[str, str],
                 files: Mapping[str, ScriptFile] | None = None) -> list[str]:
    """runner.py main's active_resources' hosts in order (`localhost` when the pool is this machine): the hosts its
    runner starts the script on; a UsageError where runner.py stops."""
    pool, _, values = active_pool(values, flags, env, {}, files or {})
    return first_nodes(pool if pool is not None else ["localhost"], values)


def parse_deepspeed_launcher(words: Sequence[str], start: int, env: Mapping[str, str], used: dict[str, str],
                             files: Mapping[str, ScriptFile] | None = None) -> LaunchSize:
    """words[start:] = the deepspeed runner's options, the script and its arguments; `files`: what the launch script
    writes before it (its hostfile may be one)."""
    opts = scan_options(words, start, DEEPSPEED_OPTIONS, "deepspeed", DEEPSPEED_GRAMMAR)
    flags = opts.flags
    pool, src, values = active_pool(opts.values, flags, env, used, files or {})
    nodes, gpus = _counts(values)
    warnings = [f"unknown deepspeed option {w} ignored" for w in opts.unknown]
    if pool is None:
        nproc = Sized(gpus, Source(SourceKind.LAUNCHER, flags["num_gpus"])) if gpus > 0 else _local_unknown(values, src)
        nnodes, world = Sized(1, Source(SourceKind.DEFAULT, "deepspeed: local machine only")), None
    else:
        nnodes, nproc, world, extra = _size_from_pool(pool, nodes, gpus, src, flags, values)
        warnings += extra
    if opts.rest >= len(words):
        raise UsageError("the deepspeed command names no training script after its options.")
    refuse_ambiguous_after_program(words, opts.rest, DEEPSPEED_GRAMMAR, "deepspeed")
    multi_node = multi_node_exec(values, nnodes.value or 1)
    nnodes = elastic_node_range(values, nnodes, multi_node, warnings)
    warnings += apply_rank_exports(env, used, multi_node)  # type: ignore[arg-type]  # parse_launch's own copy
    script = ("-m " if "module" in values else "") + words[opts.rest]
    autotuning = _autotuning(values, flags, warnings)
    return LaunchSize("deepspeed", nnodes, nproc, world, script, tuple(words[opts.rest + 1:]), tuple(warnings),
                      autotuning=autotuning)


def _autotuning(values: Mapping[str, str], flags: Mapping[str, str], warnings: list[str]) -> str:
    """`--autotuning tune|run` (runner.py: argparse choices). runner.py's run_autotuning then runs the Autotuner's
    experiments, each with its own ZeRO stage and micro batch (the ds_config's zero_optimization.stage, 0 without
    one, every stage for "all"); `run` launches the fastest with ds_config_optimal.json, `tune` stops there."""
    mode = values.get("autotuning")
    if mode is None:
        return ""
    if mode not in ("tune", "run"):
        raise UsageError(f"deepspeed {flags['autotuning']} {mode!r} is not one of DeepSpeed's choices 'tune', 'run' "
                         "(runner.py's argparse refuses it). Use --autotuning run (tune, then train with the best "
                         "configuration) or --autotuning tune (tune only), or drop the option.")
    after = ("then trains with the fastest (ds_config_optimal.json)" if mode == "run"
             else "writes the fastest to ds_config_optimal.json and exits without training")
    warnings.append(f"deepspeed {flags['autotuning']} {mode}: DeepSpeed's autotuner first runs short experiments over "
                    f"ZeRO stages and micro-batch sizes and {after}; priced as the command's own ds_config and micro "
                    "batch (llmperf tune searches the layout instead)")
    return mode
