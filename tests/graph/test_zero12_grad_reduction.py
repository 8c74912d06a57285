"""DeepSpeed ZeRO-1/2 gradient reduction as the job's release runs it: since v0.12.4 (use_multi_rank_bucket_allreduce,
default true) stage_1_and_2.py average_tensor all-reduces each bucket and keeps its partition (allreduce_and_scatter);
before, each slice was reduced to its owner (reduce-scatter traffic); reduce_scatter false all-reduces in every
release. Priced as an all-reduce (about twice the bytes of a reduce-scatter) exactly then."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import script

CLUSTER = load_cluster("dgx-a100")


def _grad_classes(tmp_path: Path, stage: int, env: dict[str, str] | None = None, **zero: Any) -> set[str]:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                "data_types": {"grad_accum_dtype": "bf16"},
                                "zero_optimization": {"stage": stage, **zero}}))
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", str(path)]
    cfg = script(argv, model="llama2-7b", env=env)
    graph = build_graph(cfg, CLUSTER)
    ops = [op for stage_graph in graph.stages for op in stage_graph.step_ops]
    ops += [op for chunk in graph.stages[0].chunks for block in chunk.blocks for op in block.bwd]
    return {op.op_class for op in ops if "grad_" in op.name and op.op_class in ("allreduce", "reducescatter")}


@pytest.mark.parametrize("stage", [1, 2])
def test_todays_deepspeed_all_reduces_zero12_buckets(tmp_path: Path, stage: int) -> None:
    assert _grad_classes(tmp_path, stage) == {"allreduce"}


def test_before_0_12_4_or_without_multi_rank_zero2_reduce_scatters(tmp_path: Path) -> None:
    assert _grad_classes(tmp_path, 2, env={"LLMPERF_DEEPSPEED_VERSION": "0.10.0"}) == {"reducescatter"}
    assert _grad_classes(tmp_path, 2, use_multi_rank_bucket_allreduce=False) == {"reducescatter"}
    # reduce_scatter false: gradient_reduction_w_predivide all-reduces the whole bucket in every release
    assert _grad_classes(tmp_path, 2, env={"LLMPERF_DEEPSPEED_VERSION": "0.10.0"}, reduce_scatter=False) == {"allreduce"}


@pytest.mark.parametrize("stage", [1, 2])
def test_without_contiguous_gradients_every_release_all_reduces(tmp_path: Path, stage: int) -> None:
    """reduce_ipg_grads without contiguous gradients: buffered_reduce_fallback(None, ...) -> dist.all_reduce."""
    assert _grad_classes(tmp_path, stage, env={"LLMPERF_DEEPSPEED_VERSION": "0.10.0"},
                         contiguous_gradients=False) == {"allreduce"}
    # offload_optimizer keeps them contiguous (stage_1_and_2.py: contiguous_gradients or cpu_offload)
    assert _grad_classes(tmp_path, stage, env={"LLMPERF_DEEPSPEED_VERSION": "0.10.0"}, contiguous_gradients=False,
                         offload_optimizer={"device": "cpu"}) == {"reducescatter"}


@pytest.mark.parametrize(("release", "expected"), [("0.4.0", "reducescatter"), ("0.5.10", "allreduce"),
                                                   ("0.7.5", "reducescatter"), ("0.10.0", "allreduce"),
                                                   ("0.12.3", "allreduce"), ("0.12.4", "allreduce")])
def test_zero1_releases_that_turn_contiguous_gradients_off_all_reduce(tmp_path: Path, release: str,
                                                                      expected: str) -> None:
    """engine.py at stage 1: contiguous_gradients = False in v0.4.4-v0.7.1 and (without MoE) v0.8.0-v0.12.x, so
    v0.5.10's ZeRO-1 all-reduces every bucket; v0.4.0-v0.4.3 and v0.7.2-v0.7.7 reduce each slice to its owner."""
    assert _grad_classes(tmp_path, 1, env={"LLMPERF_DEEPSPEED_VERSION": release}) == {expected}
    if expected == "allreduce" and release != "0.12.4":  # unless the optimizer offload keeps them contiguous
        assert _grad_classes(tmp_path, 1, env={"LLMPERF_DEEPSPEED_VERSION": release},
                             offload_optimizer={"device": "cpu"}) == {"reducescatter"}


def test_zero3_keeps_its_reduce_scatter(tmp_path: Path) -> None:
    assert _grad_classes(tmp_path, 3) == {"reducescatter"}


def test_zero1_rule_spares_moe_models_from_v0_8_0() -> None:
    """e4ba72229 (v0.8.0) turns contiguous gradients off at stage 1 only without MoE layers; v0.4.4-v0.7.1 for all."""
    from llmperf_hook.frameworks.deepspeed_release import zero1_noncontiguous_release

    def rule(release: str, moe: bool) -> bool:
        return zero1_noncontiguous_release({"LLMPERF_DEEPSPEED_VERSION": release}, moe)

    assert rule("0.6.0", moe=True) and rule("0.6.0", moe=False)
    assert rule("0.9.0", moe=False) and not rule("0.9.0", moe=True)
    assert not rule("0.13.0", moe=False) and not rule("0.4.3", moe=False)
