"""The NCCL SM share a TP collective takes from the GEMM beside it is the GPU's ring channel count over its SMs, and
a 4-GPU NVLink mesh without NVSwitch (Perlmutter: 4 A100-SXM4 joined pairwise by 4 NVLink3 links) gets the same 24
channels as an 8-GPU NVSwitch node (graph/build.py build_graph: NCCL's search.cc / connect.cc arithmetic), so the
same share; a PCIe part states no SMs and takes none."""

from __future__ import annotations

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster


def _share(cluster_name: str) -> float:
    cfg = make_config(num_layers=2, hidden_size=4096, num_attention_heads=32, tp=4, sequence_parallel=True)
    block = next(b for b in build_graph(cfg, load_cluster(cluster_name)).stages[0].chunks[0].blocks
                 if b.name == "dense_layer")
    shares = {op.tags.get("sm_share") for op in block.fwd if op.op_class == "allgather"}
    (share,) = shares
    return float(share) if share else 0.0


def test_perlmutter_mesh_rings_hold_the_dgx_share() -> None:
    assert _share("perlmutter") == pytest.approx(24 / 108, abs=1e-4)
    assert _share("perlmutter") == _share("dgx-a100")


def test_a_pcie_part_states_no_sms_and_takes_none() -> None:
    assert _share("pcie-h100-4x400g") == 0.0
