"""DeepSpeed's ZeRO-1/2 step all-reduces the gradient norm over the data-parallel group (stage_1_and_2.py
get_grad_norm_direct: dist.all_reduce(total_norm, group=self.dp_process_group)); ZeRO-0 and ZeRO-3 step elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import script

CLUSTER = load_cluster("dgx-a100")


def _norm_ops(tmp_path: Path, stage: int, gpus: int = 8) -> list:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                "data_types": {"grad_accum_dtype": "bf16"}, "zero_optimization": {"stage": stage}}))
    cfg = script(["deepspeed", "--num_gpus", str(gpus), "train.py", "--deepspeed_config", str(path)], model="llama2-7b")
    graph = build_graph(cfg, CLUSTER)
    ops = [op for stage_graph in graph.stages for op in stage_graph.step_ops]
    return [op for op in ops if op.name == "zero.gradient_norm_allreduce"]


@pytest.mark.parametrize("stage", [1, 2])
def test_zero12_all_reduces_the_fp32_norm_once_over_the_data_parallel_group(tmp_path: Path, stage: int) -> None:
    (op,) = _norm_ops(tmp_path, stage)
    assert (op.op_class, op.dims["bytes"], op.collective.group_size, op.tags) == ("allreduce", 4, 8, {})


@pytest.mark.parametrize(("stage", "gpus"), [(0, 8), (3, 8), (1, 1)])
def test_no_norm_all_reduce_without_zero12_or_data_parallelism(tmp_path: Path, stage: int, gpus: int) -> None:
    assert _norm_ops(tmp_path, stage, gpus) == []
