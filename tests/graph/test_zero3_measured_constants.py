"""ZeRO-3's two measured constants recomputed from the development kernel tables they were read from (one H200,
measurements/h200-sxm-141gb-2026-11-27-b/kernels; plain torch and bf16 ZeRO-0 from ../h200-sxm-141gb-2026-11-27):
graph/step_ops.py DEEPSPEED_MP_BYTES_PER_PARAM[3] and graph/zero3_hooks.py ZERO3_HOOK_S_PER_TENSOR. The hold-out
(-28) is not read here."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from script_module import load_script

from llmperf_hook.api import resolve_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.step_ops import DEEPSPEED_MP_BYTES_PER_PARAM
from llmperf_hook.graph.zero3_hooks import ZERO3_HOOK_S_PER_TENSOR

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT / "measurements" / "h200-sxm-141gb-2026-11-27-b" / "kernels"
DEV_ZERO0 = ROOT / "measurements" / "h200-sxm-141gb-2026-11-27" / "kernels"
H200_COPY_BYTES_PER_S = 4.22e12
"""The H200's measured copy bandwidth, at which benchmarks/deepspeed_step_cost.py reads the tables."""
TRAIN = str(ROOT / "examples" / "cpu-testbed" / "train_gpt.py")
SHAPE = ["--no-pipeline-parallel", "--num-layers", "12", "--hidden-size", "2048", "--num-attention-heads", "16",
         "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size", "50304", "--bf16"]
TENSORS = 148
"""Parameter tensors of the 12 x 2048 testbed GPT (benchmarks/deepspeed_step_cost.py TENSORS)."""


def _bookkeeping_bytes_per_param(folder: Path, table: str) -> float:
    """The table's kernels beyond the plain-torch step's, model operators and Adam excluded, in bytes per parameter
    at the H200's copy bandwidth (benchmarks/deepspeed_step_cost.py's reading)."""
    tool = load_script(ROOT / "benchmarks" / "deepspeed_step_cost.py")
    _, keep, _ = tool.split(tool.read_table(folder / f"{table}.txt")[1])
    _, plain_keep, _ = tool.split(tool.read_table(DEV_ZERO0 / "plain_bf16.txt")[1])
    return (keep - plain_keep) * 1e-6 * H200_COPY_BYTES_PER_S / tool.PARAMS


def test_zero3_step_bytes_with_the_split_out_bias_adds_add_up_to_the_measured_table(tmp_path: Path) -> None:
    """What the graph prices for z3a's shape (micro-batch 4, one micro-batch) - the step's bookkeeping bytes, brought
    back to the H200's scale by bf16 ZeRO-0's measured / modelled ratio (87.8 / 73), plus ZeRO-3's bias adds, which
    zero_layer_ops.zero3_bias_add_ops prices in the forward - is the 127.6 B a parameter the table measured. The 106 B
    read before the bias adds were priced apart counted them twice (157 B); leaving out a part would fall short."""
    ds = tmp_path / "ds3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 4,
                              "train_batch_size": 4}))
    argv = ["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(ds), *SHAPE, "--micro-batch-size", "4",
            "--global-batch-size", "4"]
    _, cfg, cluster, _ = resolve_command(argv, {}, cluster="dgx-h200")
    graph = build_graph(cfg, cluster)
    params = graph.stages[0].num_params
    (step,) = [op for op in graph.stages[0].step_ops if op.name == "optimizer.deepspeed_mixed_precision"]
    bias_bytes = sum(op.bytes_moved * block.count for chunk in graph.stages[0].chunks for block in chunk.blocks
                     for op in block.fwd if op.name == "zero3.linear_bias_add")
    to_h200 = _bookkeeping_bytes_per_param(DEV_ZERO0, "ds_bf16_zero0") / DEEPSPEED_MP_BYTES_PER_PARAM[0]
    priced = step.bytes_moved / params * to_h200 + bias_bytes / params
    measured = _bookkeeping_bytes_per_param(DEV, "ds_bf16_zero3")
    assert measured == pytest.approx(127.6, abs=0.1)
    assert priced == pytest.approx(measured, rel=0.03)


def _host_gap_s(table: str) -> float:
    """Unprofiled wall per step less the profiled kernels per step (the table's header)."""
    tool = load_script(ROOT / "benchmarks" / "deepspeed_step_cost.py")
    wall_s, rows = tool.read_table(DEV / f"{table}.txt")
    return wall_s - tool.split(rows)[2] / 1e6


def test_hook_seconds_per_tensor_are_the_development_host_unscaled() -> None:
    """ZeRO-3's host time beyond ZeRO-2's on the same machine, per parameter tensor and micro-batch, from the three
    kernel tables of pairs measured there (one micro-batch twice, four micro-batches once): 322 / 473 / 459 us. The
    constant is that host's figure as measured, applied to every cluster; the 213 us it replaced (scaled by another
    machine's ZeRO-0 stall, 83 / 176) lies outside what these tables read."""
    pairs = [("ds_bf16_zero3", "ds_bf16_zero2", 1), ("ds_bf16_zero3_cprofile", "ds_bf16_zero2", 1),
             ("ds_bf16_zero3_accum4", "ds_bf16_zero2_accum4", 4)]
    per_tensor_s = [(_host_gap_s(z3) - _host_gap_s(z2)) / (TENSORS * micro) for z3, z2, micro in pairs]
    assert min(per_tensor_s) <= ZERO3_HOOK_S_PER_TENSOR <= max(per_tensor_s)
    assert ZERO3_HOOK_S_PER_TENSOR == pytest.approx(statistics.median(per_tensor_s), rel=0.1)
