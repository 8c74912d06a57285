"""`mpirun` / `mpiexec` (Open MPI, MPICH, Intel MPI) -> LaunchSize.

World size is `-np/-n/-c N`, or without it every slot of the hosts given (`-H a:8,b:8`, or a hostfile of
`host slots=N` (Open MPI) or `host:N` (MPICH) lines). Processes per node: `-N`/`--npernode` (Open MPI),
`-ppn` (MPICH/Intel MPI) or `--map-by ppr:N:node`; else the hosts' slots, filled in order as Open MPI's default
by-slot mapping does; else every rank on the local node. `-x VAR=value` / `-genv VAR value` set the job's
environment. DeepSpeed and Megatron-DeepSpeed find their ranks from OMPI_COMM_WORLD_* (mpi discovery).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import parse_int
from llmperf_hook.launch.sizing import Sized
from llmperf_hook.provenance import Source, SourceKind

MPI_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra"})
_NP = ("-np", "--np", "-n", "--n", "-c")
_PER_NODE = ("-N", "--npernode", "-npernode", "-ppn", "--ppn", "-perhost", "--perhost")
_HOSTS = ("-H", "--host", "-host", "-hosts", "--hosts")
_HOSTFILE = ("--hostfile", "-hostfile", "--machinefile", "-machinefile", "-f", "--default-hostfile")
_VALUED = frozenset({*_NP, *_PER_NODE, *_HOSTS, *_HOSTFILE, "--map-by", "-map-by", "--bind-to", "-bind-to", "--rank-by",
                     "-rank-by", "-x", "--prefix", "-prefix", "-wdir", "--wdir", "-wd", "--launch-agent", "-bootstrap",
                     "-launcher", "-iface", "--output-filename", "-output-filename", "--personality", "-genvlist",
                     "-envlist", "--app", "-configfile", "--timeout", "-s", "--stdin", "--pmixmca", "--prtemca"})
_TWO_VALUES = frozenset({"--mca", "-mca", "--gmca", "-gmca", "-genv", "-env", "--pmixmca", "--prtemca"})
_SWITCHES = frozenset({"--allow-run-as-root", "-allow-run-as-root", "--oversubscribe", "-oversubscribe",
                       "--report-bindings", "-report-bindings", "--tag-output", "-tag-output", "--timestamp-output",
                       "-genvall", "-genvnone", "--display-map", "-display-map", "-v", "--verbose", "-q", "--quiet",
                       "--noprefix", "-l", "-prepend-rank", "--bind-to-core", "-bind-to-core", "--nolocal", "-nolocal"})


def _scan(words: Sequence[str], start: int, env: dict[str, str]) -> tuple[dict[str, str], int, list[str]]:
    """mpirun's options -> (option spelling -> value, index of the program, warnings)."""
    values: dict[str, str] = {}
    warnings: list[str] = []
    i = start
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        name, eq, inline = words[i].partition("=")
        if name in _SWITCHES:
            i += 1
        elif name in _TWO_VALUES:
            if name in ("-genv", "-env") and i + 2 < len(words):
                env[words[i + 1]] = words[i + 2]
            i += 3
        elif name in _VALUED:
            value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
            values[name] = value
            if name == "-x" and "=" in value:
                env[value.split("=", 1)[0]] = value.split("=", 1)[1]
            i += 1 if eq else 2
        else:
            warnings.append(f"unknown {words[start - 1]} option {words[i]} ignored")
            i += 1
    return values, i + (i < len(words) and words[i] == "--"), warnings


def _pick(values: Mapping[str, str], names: Sequence[str]) -> tuple[str, str] | None:
    found = [(n, values[n]) for n in names if n in values]
    return found[-1] if found else None


def _host_slots(values: Mapping[str, str]) -> tuple[list[int], Source] | None:
    """Slots per distinct host, in order, from -H or a hostfile (a host listed twice adds its slots)."""
    hosts = _pick(values, _HOSTS)
    if hosts:
        entries = [e for e in hosts[1].split(",") if e.strip()]
        source = Source(SourceKind.LAUNCHER, hosts[0])
    else:
        hostfile = _pick(values, _HOSTFILE)
        if not hostfile:
            return None
        entries, source = _read_hostfile(hostfile[1]), Source(SourceKind.HOSTFILE, hostfile[1])
    slots: dict[str, int] = {}
    for entry in entries:
        host, _, count = entry.strip().partition(":")
        slots[host] = slots.get(host, 0) + (parse_int(count, "mpirun host slots", entry) if count else 1)
    return list(slots.values()), source


def _read_hostfile(path: str) -> list[str]:
    """`host slots=N` (Open MPI) or `host:N` (MPICH) lines as `host:N` entries; `#` comments."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [ln.split("#", 1)[0].split() for ln in handle]
    except OSError as err:
        raise UsageError(f"cannot read the mpirun hostfile {path}: {err.strerror}.") from None
    entries = []
    for words in (ln for ln in lines if ln):
        slots = next((w.split("=", 1)[1] for w in words[1:] if w.startswith(("slots=", "max_slots="))), "")
        entries.append(f"{words[0]}:{slots}" if slots else words[0])
    if not entries:
        raise UsageError(f"the mpirun hostfile {path} lists no host.")
    return entries


def _per_node(values: Mapping[str, str]) -> Sized | None:
    given = _pick(values, _PER_NODE)
    if given:
        return Sized(parse_int(given[1], given[0], "the mpirun command"), Source(SourceKind.LAUNCHER, given[0]))
    mapping = _pick(values, ("--map-by", "-map-by"))
    parts = mapping[1].split(":") if mapping else []
    if len(parts) >= 3 and parts[0].lower() == "ppr" and parts[2].lower().startswith("node"):
        return Sized(parse_int(parts[1], mapping[0], "the mpirun command"), Source(SourceKind.LAUNCHER, mapping[0]))
    return None


def _nodes_filled(world: int, slots: list[int]) -> int:
    """Hosts Open MPI's by-slot mapping fills with `world` ranks (all of them when it oversubscribes)."""
    placed = 0
    for used, count in enumerate(slots, start=1):
        placed += count
        if placed >= world:
            return used
    return len(slots)


def size_mpirun(values: Mapping[str, str], name: str) -> tuple[Sized, Sized, Sized]:
    """(nnodes, processes per node, world) of an mpirun launch."""
    np_opt, per_node, hosts = _pick(values, _NP), _per_node(values), _host_slots(values)
    if np_opt:
        world = Sized(parse_int(np_opt[1], np_opt[0], f"the {name} command"), Source(SourceKind.LAUNCHER, np_opt[0]))
    elif hosts:
        world = Sized(sum(hosts[0]), Source(SourceKind.DERIVED, f"every slot of the hosts ({hosts[1]})"))
    else:
        raise UsageError(f"{name} without -np, -H or a hostfile starts one process per core of the machine it runs on, "
                         "which llmperf cannot see; give -np N (and -N/-ppn for processes per node).")
    assert world.value is not None
    if world.value < 1:
        raise UsageError(f"{name} {np_opt[0] if np_opt else '-np'} {world.value} must be at least 1.")
    if per_node is not None:
        assert per_node.value is not None
        nodes = Sized(-(-world.value // max(per_node.value, 1)), Source(SourceKind.DERIVED, "ceil(np / processes per node)"))
        if nodes.value == 1 and world.value < per_node.value:  # fewer ranks than one node's share
            per_node = Sized(world.value, world.source)
        return nodes, per_node, world
    if hosts:
        nodes = Sized(_nodes_filled(world.value, hosts[0]), Source(SourceKind.DERIVED, f"hosts filled slot by slot ({hosts[1]})"))
    else:
        nodes = Sized(1, Source(SourceKind.DEFAULT, f"{name} without hosts: the local node"))
    assert nodes.value is not None
    return nodes, Sized(-(-world.value // nodes.value), Source(SourceKind.DERIVED, "ceil(np / nodes)")), world


def scan_mpirun(words: Sequence[str], i: int, env: dict[str, str]) -> tuple[Mapping[str, str], int, list[str]]:
    values, rest, warnings = _scan(words, i + 1, env)
    if rest >= len(words):
        raise UsageError(f"the {words[i]} command names no program to run.")
    return values, rest, warnings

