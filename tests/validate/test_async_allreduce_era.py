"""The async grad-input all-reduce era of a measured Megatron-LM run (validate/framework_era.predates_async_tp_allreduce):
Megatron-LM measured before 16c90445 (2021-09) all-reduced the column-parallel linear's input gradient synchronously;
such a TP > 1 row is priced so through its unordered launch (CUDA_DEVICE_MAX_CONNECTIONS=8, the bdd9731 era rule),
not through --no-async-tensor-model-parallel-allreduce, which today's Megatron-LM ignores."""

from __future__ import annotations

from pathlib import Path

from llmperf_hook.api import predict_command
from llmperf_hook.validate.framework_era import predates_async_tp_allreduce
from llmperf_hook.validate.launch_command import build_launch_plan
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW

NARAYANAN = "Narayanan et al. SC21 (arXiv:2104.04473) Table 1"
KORTHIKANTI = "Korthikanti et al. 2022 (arXiv:2205.05198) Table 5"
FLAG = "--no-async-tensor-model-parallel-allreduce"


def test_rule_by_month_and_framework() -> None:
    assert predates_async_tp_allreduce("megatron", "Megatron-LM (2021)", NARAYANAN, "")
    assert predates_async_tp_allreduce("megatron", "Megatron-LM", "a blog of 2021-08-31", "")
    assert not predates_async_tp_allreduce("megatron", "Megatron-LM", "a blog of 2021-09-10", "")
    assert not predates_async_tp_allreduce("megatron", "Megatron-LM (2022)", KORTHIKANTI, "")
    assert predates_async_tp_allreduce("megatron", "Megatron-LM (2020)", "undated", "")
    assert not predates_async_tp_allreduce("megatron", "Megatron-LM (2021)", "undated", "")  # which side of September?
    assert not predates_async_tp_allreduce("megatron-deepspeed", "Megatron-DeepSpeed", NARAYANAN, "")


def _plan(tmp_path: Path, **cells: str):
    return build_launch_plan(build_measured_run({**BASE_ROW, **cells}, 1), tmp_path)


def _bwd_tp_reduces(argv: tuple[str, ...]) -> list:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.hardware.load import load_cluster

    pred = predict_command(list(argv), {}, cluster="dgx-a100")
    blocks = build_graph(pred.config, load_cluster("dgx-a100")).stages[0].chunks[0].blocks
    layer = next(b for b in blocks if b.name.startswith("dense_layer"))
    return [op for op in layer.bwd if op.op_class == "allreduce" and op.collective.group == "tp" and op.phase == "bwd"]


def test_a_2021_tp_row_runs_the_synchronous_all_reduce(tmp_path: Path) -> None:
    old = _plan(tmp_path / "old", source=NARAYANAN, framework="Megatron-LM (2021)")
    assert FLAG not in old.argv and "CUDA_DEVICE_MAX_CONNECTIONS=8" in old.argv
    assert any("16c90445" in note for note in old.notes)
    reduces = _bwd_tp_reduces(old.argv)
    assert reduces and all("overlap" not in op.tags for op in reduces)  # serialized, as that code ran
    later = _plan(tmp_path / "later", source="Megatron-LM README (2023-03-01)", framework="Megatron-LM (2023)")
    assert FLAG not in later.argv and not any("CUDA_DEVICE_MAX_CONNECTIONS" in w for w in later.argv)
    assert all(op.tags.get("overlap") == "wgrad" for op in _bwd_tp_reduces(later.argv))
    no_tp = _plan(tmp_path / "tp1", source=NARAYANAN, framework="Megatron-LM (2021)", tp="1", dp="16")
    assert not any("16c90445" in note for note in no_tp.notes)
