"""torchrun / `python -m torch.distributed.run` / legacy `python -m torch.distributed.launch` / ft_launcher -> ParsedJob.

Semantics follow torch/distributed/run.py: `--nnodes N` or `MIN:MAX` (elastic; we size for MAX),
`--nproc-per-node N|gpu|auto|cpu` (default 1), `--standalone` (single node, local rendezvous); every option
falls back to its `PET_<NAME>` environment variable when absent from argv (torchrun's `env` action).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from typing import Mapping, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import parse_int
from llmperf_hook.launch.options import Grammar, Option, ScannedOptions, refuse_ambiguous_after_program, scan_options
from llmperf_hook.launch.sizing import LaunchSize, Sized
from llmperf_hook.provenance import Source, SourceKind

_VALUED = (
    "--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf",
    "--max-restarts", "--monitor-interval", "--start-method", "--event-log-handler", "--role", "--log-dir",
    "--redirects", "--tee", "--local-ranks-filter", "--node-rank", "--master-addr", "--master-port",
    "--local-addr", "--logs-specs", "--numa-binding", "--signals-to-handle", "--duplicate-stdout-filters",
    "--duplicate-stderr-filters", "--rdzv-timeout", "--shutdown-timeout",
)
_SWITCHES = ("--standalone", "--module", "--no-python", "--run-path", "--virtual-local-rank")
TORCHRUN_OPTIONS: dict[str, Option] = {
    **{name: Option(name[2:].replace("-", "_")) for name in _VALUED},
    **{name: Option(name[2:].replace("-", "_"), takes_value=False) for name in _SWITCHES},
    "-m": Option("module", takes_value=False),
    "-r": Option("redirects"),
    "-t": Option("tee"),
}
LAUNCH_OPTIONS: dict[str, Option] = {**TORCHRUN_OPTIONS, "--use-env": Option("use_env", takes_value=False)}
"""The legacy torch.distributed.launch: run.py's parser plus --use-env/--use_env (launch.py parse_args)."""


def _argparse_spellings(table: dict[str, Option]) -> dict[str, str]:
    """Option string -> arity in run.py's parser, which defines every multi-word long option twice
    (`--nproc-per-node`, `--nproc_per_node`); `-h/--help` is argparse's own."""
    spellings = {"-h": "0", "--help": "0"}
    for key, opt in table.items():
        for spelling in (key, key[:2] + key[2:].replace("-", "_")):
            spellings[spelling] = "1" if opt.takes_value else "0"
    return spellings


def run_py_options(text: str) -> dict[str, str]:
    """Option string -> arity ("0" a switch, "1" a value) of the parser that `text` (a torch/distributed/run.py)
    builds in get_args_parser: every `parser.add_argument("--name", "--name_", ..., action=...)` call there, a switch
    being action=check_env (run.py's boolean env action) or store_true/false/const."""
    start = text.find("def get_args_parser")
    body = text[start:text.find("return parser", start)] if start >= 0 else ""
    options: dict[str, str] = {}
    for call in re.finditer(r"parser\.add_argument\(", body):
        depth, end = 1, call.end()
        while depth and end < len(body):
            depth += {"(": 1, ")": -1}.get(body[end], 0)
            end += 1
        arguments = body[call.end():end - 1]
        names = re.findall(r"[\"'](-{1,2}[A-Za-z][\w-]*)[\"']", re.split(r"\b[a-z_]+\s*=", arguments, maxsplit=1)[0])
        switch = re.search(r"action\s*=\s*(?:check_env|[\"']store_(?:true|false|const)[\"'])", arguments)
        options.update({name: "0" if switch else "1" for name in names})
    return options


@functools.lru_cache(maxsize=1)
def installed_run_options() -> dict[str, str]:
    """run_py_options of the torch installed where llmperf runs (read as text, never imported: predict does not
    import torch), {} without one. Its options join the table's, so that a torch newer than the one the table was
    checked against (2.13) is not refused its own options; an option neither defines is still refused."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return {}
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    try:
        with open(os.path.join(folders[0], "distributed", "run.py"), encoding="utf-8") as handle:
            return run_py_options(handle.read())
    except (IndexError, OSError):
        return {}


def _grammar(table: dict[str, Option], parser: str) -> Grammar:
    return Grammar({**installed_run_options(), **_argparse_spellings(table)}, "argparse", parser)


def launcher_grammar(launcher: str) -> Grammar | None:
    """The parser of torchrun (= `python -m torch.distributed.run`) or of the legacy launch (None for ft_launcher),
    the table checked against torch 2.13's run.get_args_parser() (tests/launch/test_launcher_parsers.py), with the
    installed torch's options: ArgumentParser() with allow_abbrev at its default (True) and parse_args, so a unique
    prefix (`--nproc_per 8`, `--nnode=2`) is that option, while an ambiguous one (`--nproc`, `--rdzv`, `--master`) or
    an option run.py does not define (`--use_env` outside launch.py) ends the launch with exit status 2.
    --rdzv-timeout stays from the first tables (a superset: a name a release accepted is accepted)."""
    if launcher == "torchrun":
        return _grammar(TORCHRUN_OPTIONS, "torch/distributed/run.py, argparse")
    if launcher == "torch.distributed.launch":
        return _grammar(LAUNCH_OPTIONS, "torch/distributed/launch.py, argparse")
    return None

FT_LAUNCHER_OPTIONS: dict[str, Option] = {
    **TORCHRUN_OPTIONS, "--term-timeout": Option("term_timeout"), "--workers-stop-timeout": Option("workers_stop_timeout"),
    "--ft-ignore-missing-cfg": Option("ft_ignore_missing_cfg", takes_value=False),
    "--ignore-missing-fault-tol-cfg": Option("ft_ignore_missing_cfg", takes_value=False),
}
"""nvidia-resiliency-ext's ft_launcher (fault_tolerance/launcher.py at d8686d9, the launcher of Megatron-LM's CI and
release jobs): torchrun's parser (its own copy of torch/distributed/run.py) plus --term-timeout,
--workers-stop-timeout and the fault-tolerance options; every --ft-* option takes a value (their booleans are
typed values, `--ft-enable-nic-monitor true`) except the switch --ft-ignore-missing-cfg (older releases:
--ignore-missing-fault-tol-cfg; --fault-tol-cfg-path and --ft-param-* take values)."""
_FT_PREFIXES = ("--ft-", "--ft_", "--fault-tol")

# Accepted but not modelled: they change restarts, logging or placement, not step time.
_NOT_MODELLED = ("max_restarts", "redirects", "tee", "local_ranks_filter", "numa_binding", "rdzv_conf")


def _lookup(opts: ScannedOptions, dest: str, env: Mapping[str, str], used: dict[str, str]) -> tuple[str, Source] | None:
    """argv first, then PET_<DEST> (torchrun's `env` action reads the variable only when the flag is absent)."""
    if dest in opts.values:
        return opts.values[dest], Source(SourceKind.LAUNCHER, opts.flags[dest])
    var = "PET_" + dest.upper()
    if var in env:
        used[var] = env[var]
        return env[var], Source(SourceKind.ENV, var)
    return None


def parse_nnodes(value: str, origin: str) -> tuple[int, str | None, int]:
    """`N` or `MIN:MAX` -> (nodes to size for, warning for an elastic range, the fewest it starts with)."""
    if ":" in value:
        low_text, high_text = value.split(":", 1)
        low, high = parse_int(low_text, "--nnodes MIN", origin), parse_int(high_text, "--nnodes MAX", origin)
        if not 1 <= low <= high:
            raise UsageError(f"--nnodes {value} from {origin} is not a valid MIN:MAX range (1 <= MIN <= MAX).")
        warning = None if low == high else f"elastic --nnodes {value}: sized for the maximum, {high} nodes"
        return high, warning, low
    nodes = parse_int(value, "--nnodes", origin)
    if nodes < 1:
        raise UsageError(f"--nnodes {nodes} from {origin} must be at least 1.")
    return nodes, None, nodes


def _nproc(found: tuple[str, Source] | None, env: Mapping[str, str], used: dict[str, str]) -> Sized:
    if found is None:
        return Sized(1, Source(SourceKind.DEFAULT, "torchrun: 1"))
    value, source = found
    if value.strip() in ("gpu", "auto", "xpu", "npu"):  # npu: torch_npu's privateuse1 backend name
        return Sized(None, source, f"--nproc-per-node {value} means 'every GPU of the node'")
    if value.strip() == "cpu":  # run.py determine_local_world_size: one per core, whatever GPUs there are
        return Sized(None, source, "--nproc-per-node cpu starts one process per CPU core of the node (torch/distributed/"
                     "run.py determine_local_world_size: torch._utils.cpu_count()), not one per GPU", env_may_tell=False)
    if value.strip().startswith("$"):  # GPUS_PER_NODE=`python -c "...device_count()"`: the script runs a command
        what = "arithmetic over a value only running the launch script gives" if value.strip().startswith("$((") \
            else "the output of a command" if value.strip().startswith("$(") else \
            "a variable whose value only running the launch script gives"
        return Sized(None, source, f"--nproc-per-node {value} is {what} (llmperf reads scripts, never runs them)",
                     env_may_tell=False)
    _check_torchrun_accepts(value, source)
    count = parse_int(value, "--nproc-per-node", str(source))
    if count < 1:
        raise UsageError(f"--nproc-per-node {count} from {source} must be at least 1.")
    return Sized(count, source)


def _check_torchrun_accepts(value: str, source: Source) -> None:
    """torchrun reads --nproc-per-node as `int(value)`, else one of gpu, cpu, auto, xpu or the privateuse1 backend's
    name, else stops with 'ValueError: Unsupported nproc_per_node value' (torch/distributed/run.py
    determine_local_world_size): `cuda` or a Slurm GPU type (`h100:4`, what SLURM_GPUS_PER_NODE holds for
    --gpus-per-node=h100:4, as written) never start."""
    try:
        int(value)
    except ValueError:
        hint = (" SLURM_GPUS_PER_NODE holds --gpus-per-node as written: give torchrun the count alone, "
                "${SLURM_GPUS_PER_NODE##*:}, or --gpus-per-node=N.") if ":" in value else ""
        raise UsageError(f"--nproc-per-node {value!r} from {source}: torchrun stops with 'ValueError: Unsupported "
                         f"nproc_per_node value: {value}' (it takes a number, gpu, cpu, auto or xpu: "
                         f"torch/distributed/run.py determine_local_world_size).{hint}") from None


def parse_torchrun(words: Sequence[str], start: int, env: Mapping[str, str], used: dict[str, str], launcher: str) -> LaunchSize:
    """Parse words[start:] as torchrun options + program; `launcher` is "torchrun" or "torch.distributed.launch"."""
    ft = launcher == "ft_launcher"
    table = FT_LAUNCHER_OPTIONS if ft else LAUNCH_OPTIONS if launcher == "torch.distributed.launch" else TORCHRUN_OPTIONS
    grammar = launcher_grammar(launcher)  # None for ft_launcher: its --ft-* options vary
    opts = scan_options(words, start, table, launcher, grammar)
    fault_tolerance = [w.split("=", 1)[0] for w in opts.unknown if ft and w.startswith(_FT_PREFIXES)]
    warnings = [f"unknown {launcher} option {w} ignored" for w in opts.unknown if not w.startswith(_FT_PREFIXES) or not ft]
    if fault_tolerance:
        warnings.append(f"ft_launcher fault-tolerance options {', '.join(fault_tolerance)} accepted, not modelled "
                        "(hang detection and restarts do not change the step time)")
    nnodes_found = _lookup(opts, "nnodes", env, used)
    if nnodes_found is None:
        nnodes = Sized(1, Source(SourceKind.DEFAULT, "torchrun: 1"))
    else:
        count, warning, least = parse_nnodes(nnodes_found[0], str(nnodes_found[1]))
        nnodes = Sized(count, nnodes_found[1], least=least)
        warnings += [warning] if warning else []
    standalone = _lookup(opts, "standalone", env, used)
    if standalone and nnodes.value and nnodes.value > 1:
        warnings.append(f"--standalone starts a single-node rendezvous but --nnodes is {nnodes.value}")
    nproc = _nproc(_lookup(opts, "nproc_per_node", env, used), env, used)
    warnings += [f"{launcher} {opts.flags[d]} accepted, not modelled" for d in _NOT_MODELLED if d in opts.values]
    if opts.rest >= len(words):
        raise UsageError(f"the {launcher} command names no training script after its options.")
    refuse_ambiguous_after_program(words, opts.rest, grammar, launcher)
    is_module = "module" in opts.values
    script = ("-m " if is_module else "") + words[opts.rest]
    return LaunchSize(launcher, nnodes, nproc, None, script, tuple(words[opts.rest + 1:]), tuple(warnings))
