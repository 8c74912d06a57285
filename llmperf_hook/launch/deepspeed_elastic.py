"""Stage [1]: `deepspeed --elastic_training`, the DeepSpeed launcher's node range (DeepSpeed to 0.19.6).

runner.py (deepspeedai/DeepSpeed, sources' HEAD edaa7221, version 0.19.6) asserts `--master_addr` ('Master Addr is
required when elastic training is enabled') and refuses `--no_local_rank` beside it, then hands every node's
launch.py `--enable_elastic_training --min_elastic_nodes N --max_elastic_nodes M` (runner.py main and
multinode_runner.py). launch.py sets an unset minimum (-1) to 1 and an unset maximum to its nnodes (the hosts of the
world info), asserts both positive, and runs DSElasticAgent over a c10d rendezvous with min_nodes / max_nodes: as under
torchrun --nnodes MIN:MAX, the job starts once MIN nodes joined and restarts at every count a membership change
brings (torch/distributed/elastic). So it is a node range from MIN to the hosts launched, which tune checks at every
count like torchrun's (ParsedJob.elastic_min_nnodes). A maximum below the hosts launched makes the others stand by
and the job run on fewer nodes than priced: refused, with how to price it. DeepSpeed 0.19.8's runner has no such
option (argparse stops on it); a warning says so.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import parse_int
from llmperf_hook.launch.sizing import Sized

VERSION_NOTE = ("deepspeed --elastic_training: an option of DeepSpeed's launcher to 0.19.6 (0.19.8's runner.py has "
                "none and stops with 'unrecognized arguments')")


def elastic_node_range(values: Mapping[str, str], nnodes: Sized, multi_node: bool, warnings: list[str]) -> Sized:
    """`nnodes` with its elastic minimum (Sized.least) under --elastic_training; UsageError where runner.py or
    launch.py stops, or where the range would run fewer nodes than the hosts it prices. `multi_node`: runner.py's
    multi_node_exec (several hosts, or --force_multi, without --no_ssh)."""
    if "elastic_training" not in values:
        return nnodes
    warnings.append(VERSION_NOTE)
    _check_runner_asserts(values)
    launcher = values.get("launcher", "pdsh").lower()
    if multi_node and launcher != "pdsh":
        warnings.append(f"deepspeed --elastic_training has no effect under --launcher {launcher}: runner.py hands "
                        "launch.py the elastic options on the local and pdsh paths only (multinode_runner.py "
                        "PDSHRunner.get_cmd); the MPI and Slurm runners start the script on every host: priced at "
                        "the nodes launched")
        return nnodes
    return _node_range(values, nnodes)


def _check_runner_asserts(values: Mapping[str, str]) -> None:
    """runner.py main's asserts under --elastic_training, whatever the launcher."""
    if not values.get("master_addr"):
        raise UsageError("deepspeed --elastic_training needs --master_addr (runner.py asserts 'Master Addr is required "
                         "when elastic training is enabled'): give --master_addr HOST, the node that hosts the "
                         "rendezvous.")
    if "no_local_rank" in values:
        raise UsageError("deepspeed --elastic_training with --no_local_rank: runner.py asserts '--no_local_rank "
                         "argument is not supported in Elastic training'. Drop --no_local_rank.")


def _node_range(values: Mapping[str, str], nnodes: Sized) -> Sized:
    """launch.py's DSElasticAgent range: --min_elastic_nodes (unset: 1) to the hosts launched."""
    hosts = nnodes.value
    least = _bound(values, "min_elastic_nodes", 1)
    most = _bound(values, "max_elastic_nodes", hosts)
    if hosts is None:
        return nnodes
    if most < hosts:
        raise UsageError(f"deepspeed --elastic_training --max_elastic_nodes {most} with {hosts} nodes launched: the "
                         f"rendezvous admits {most}, the others stand by, so the job trains on at most {most} nodes, "
                         f"not the {hosts} llmperf would price. To price it, launch {most} nodes (--num_nodes {most}) "
                         "or drop --max_elastic_nodes.")
    if least > hosts:
        raise UsageError(f"deepspeed --elastic_training --min_elastic_nodes {least} with {hosts} nodes launched: the "
                         f"rendezvous waits for {least} nodes and the job never starts. Give --min_elastic_nodes "
                         f"{hosts} or fewer.")
    return dataclasses.replace(nnodes, least=least) if least < hosts else nnodes


def _bound(values: Mapping[str, str], key: str, unset: int | None) -> int:
    """launch.py's reading: -1 (runner.py's default) is `unset`; any other value must be positive ('Max and Min nodes
    should be positive')."""
    given = parse_int(values.get(key, "-1"), f"--{key}", "the deepspeed command")
    if given == -1:
        return unset if unset is not None else 1
    if given <= 0:
        raise UsageError(f"deepspeed --{key} {given}: launch.py asserts 'Max and Min nodes should be positive'. Give a "
                         "node count of 1 or more, or leave the option out.")
    return given
