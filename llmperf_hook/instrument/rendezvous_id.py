"""Stage [7]: the job id of a launch run once per node without a scheduler, from the rendezvous address its nodes are
all given (shared_job.py's module docstring says where it ranks among the other ids).

- `deepspeed --no_ssh --node_rank N` (deepspeed/launcher/runner.py: each node runs the launcher itself; runner.py
  hands --master_addr/--master_port to each node's deepspeed.launcher.launch): `deepspeed-<master_addr>-<port>`;
- torchrun's static rendezvous per node (`--nnodes N --node-rank R`, torch/distributed/run.py's default backend,
  whose endpoint is master_addr:master_port): `torchrun-<master-addr>-<port>`; with c10d or etcd and no --rdzv-id,
  the --rdzv-endpoint the nodes meet at: `torchrun-<endpoint>`.
Node 0 (or the endpoint's store) listens at that address for the whole job, so no two running launches share it.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from llmperf_hook.errors import LlmperfError
from llmperf_hook.instrument.shared_job import SharedId, _safe
from llmperf_hook.launch.deepspeed_launcher import DEEPSPEED_GRAMMAR, DEEPSPEED_OPTIONS, active_pool
from llmperf_hook.launch.options import scan_options
from llmperf_hook.provenance import SourceKind
from llmperf_hook.launch.torchrun import TORCHRUN_OPTIONS, launcher_grammar

DEEPSPEED_DEFAULT_MASTER_PORT = "29500"
"""runner.py --master_port's default (deepspeed.constants.TORCH_DISTRIBUTED_DEFAULT_PORT)."""


def deepspeed_no_ssh_id(argv: Sequence[str]) -> SharedId | None:
    """`deepspeed --no_ssh --node_rank N ...` run on every node (module docstring): the rendezvous address the nodes
    are given, None for any other command, or when its options cannot be read (the prediction said why)."""
    start = next((i + 1 for i, word in enumerate(argv[:3]) if os.path.basename(word) == "deepspeed"), None)
    if start is None:
        return None
    try:
        opts = scan_options(argv, start, DEEPSPEED_OPTIONS, "deepspeed", DEEPSPEED_GRAMMAR)
    except LlmperfError:
        return None
    values = opts.values
    if "no_ssh" not in values:
        return None
    addr, said = values.get("master_addr", ""), "--master_addr"
    if not addr:  # runner.py main: 'hostname -I' of the first active host, which every node's hostfile names alike
        addr, said = _first_active_host(values, opts.flags), "the hostfile's first active host"
    if not addr:
        return None
    port = values.get("master_port", DEEPSPEED_DEFAULT_MASTER_PORT)
    return SharedId(f"deepspeed-{_safe(addr)}-{_safe(port)}",
                    f"deepspeed --no_ssh: {said} {addr}, --master_port {port} (command), the nodes' rendezvous")


def torchrun_rendezvous_id(argv: Sequence[str], env: Mapping[str, str]) -> SharedId | None:
    """A multi-node torchrun run on every node without --rdzv-id (torch/distributed/run.py; each option falls back to
    its PET_<NAME> variable): with the default static rendezvous every node is given its --node-rank (default 0:
    node 0 often leaves it out) and node 0's address, where it listens for the whole job: --rdzv-endpoint where one
    is given, else --master-addr:--master-port (defaults 127.0.0.1, 29500; run.py get_rdzv_endpoint); with c10d or
    etcd the nodes meet at --rdzv-endpoint under the run id "none", one rendezvous for every agent that comes there
    (so one job, also on one host). None for one node, --standalone, or no address."""
    start = next((i + 1 for i, word in enumerate(argv[:3]) if os.path.basename(word) == "torchrun"), None)
    if start is None and list(argv[1:3]) == ["-m", "torch.distributed.run"]:
        start = 3
    if start is None:
        return None
    try:
        values = scan_options(argv, start, TORCHRUN_OPTIONS, "torchrun", launcher_grammar("torchrun")).values
    except LlmperfError:
        return None

    def value(dest: str, default: str = "") -> str:
        return values.get(dest) or env.get(f"PET_{dest.upper()}", "") or default

    backend, endpoint = value("rdzv_backend", "static"), value("rdzv_endpoint")
    if "standalone" in values or value("nnodes", "1") in ("1", "1:1"):
        return None
    if backend != "static":
        return SharedId(f"torchrun-{_safe(endpoint)}", f"torchrun's {backend} rendezvous: --rdzv-endpoint {endpoint} "
                        "(command, or its PET_ variables), run id none", True) if endpoint else None
    if endpoint:  # the static rendezvous' address in place of --master-addr/--master-port (run.py get_rdzv_endpoint)
        return SharedId(f"torchrun-{_safe(endpoint)}", f"torchrun's static rendezvous: --rdzv-endpoint {endpoint} "
                        "(command, or its PET_ variables), the nodes' rendezvous")
    addr, port = value("master_addr", "127.0.0.1"), value("master_port", "29500")
    return SharedId(f"torchrun-{_safe(addr)}-{_safe(port)}",
                    f"torchrun's static rendezvous: --master-addr {addr}, --master-port {port} (command, or its PET_ "
                    "variables), the nodes' rendezvous")


def _first_active_host(values: Mapping[str, str], flags: Mapping[str, str]) -> str:
    """runner.py main's `list(active_resources.keys())[0]`: the hostfile's first host left by --include/--exclude
    (deepspeed_launcher.active_pool; --num_nodes is applied after it); "" without a hostfile (runner.py asserts
    multi_node_exec) or where runner.py stops."""
    try:
        pool, src, _ = active_pool(values, flags, {}, {}, {})
    except (LlmperfError, ValueError):
        return ""
    return next(iter(pool or {}), "") if src.kind == SourceKind.HOSTFILE else ""
