"""The launch-order era of a measured Megatron-LM run (validate/framework_era.legacy_max_connections): before
Megatron-LM bdd9731 (2022-10-14) the async TP collectives ran under CUDA's default 8 work queues, so such a row gets
CUDA_DEVICE_MAX_CONNECTIONS=8 before its launch command and its sequence-parallel backward is priced serialized."""

from __future__ import annotations

from pathlib import Path

from llmperf_hook.api import predict_command
from llmperf_hook.validate.framework_era import framework_year, legacy_max_connections
from llmperf_hook.validate.launch_command import build_launch_plan
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW

KORTHIKANTI = "Korthikanti et al. 2022 (arXiv:2205.05198) Table 5"
LATER = "Megatron-LM README (2023-03-01)"


def test_rule_by_month_year_and_framework() -> None:
    assert legacy_max_connections("megatron", "Megatron-LM (2022)", KORTHIKANTI, "") == "8"
    assert legacy_max_connections("megatron", "Megatron-LM (2021)", "arXiv:2104.04473", "") == "8"
    assert legacy_max_connections("megatron", "Megatron-LM", "a blog of 2022-09-30", "") == "8"
    assert legacy_max_connections("megatron", "Megatron-LM", "a blog of 2022-10-20", "") is None
    assert legacy_max_connections("megatron", "Megatron-LM (2023)", LATER, "") is None
    assert legacy_max_connections("megatron-core", "Megatron-Core r0.8.0", "", "@f2e5db402c (2024-07-15)") is None
    # Undated: a framework cell's year before 2022 decides; 2022 alone cannot say which side of October.
    assert legacy_max_connections("megatron", "Megatron-LM (2021)", "undated", "") == "8"
    assert legacy_max_connections("megatron", "Megatron-LM (2022)", "undated", "") is None
    assert legacy_max_connections("megatron", "Megatron-LM", "undated", "") is None
    # Not Megatron-LM: NeMo Megatron (its launcher set CUDA_DEVICE_MAX_CONNECTIONS=1 from 2022-07), Megatron-DeepSpeed
    # and DeepSpeed rows keep today's default.
    assert legacy_max_connections("megatron", "NeMo Megatron (2022)", "NeMo Megatron Launcher README",
                                  "github.com/NVIDIA/NeMo-Framework-Launcher README.md @3579cdb3 (2022-09-07)") is None
    assert legacy_max_connections("megatron", "Megatron", "a talk", "github.com/NVIDIA/Megatron-LM @0123abcd (2021-06-01)") == "8"
    assert legacy_max_connections("megatron-deepspeed", "Megatron-DeepSpeed", KORTHIKANTI, "") is None
    assert legacy_max_connections("deepspeed", "DeepSpeed ZeRO-3", "arXiv:2104.04473", "") is None
    assert framework_year("Megatron-LM (2022)") == 2022 and framework_year("Megatron-LM") is None


def _plan(tmp_path: Path, **cells: str):
    row = {**BASE_ROW, "sequence_parallel": "yes", "recompute": "selective", **cells}
    return build_launch_plan(build_measured_run(row, 1), tmp_path)


def test_a_2022_row_runs_unordered_and_is_priced_serialized(tmp_path: Path) -> None:
    old = _plan(tmp_path / "old", source=KORTHIKANTI)
    assert old.argv[0] == "CUDA_DEVICE_MAX_CONNECTIONS=8" and old.argv[1] == "torchrun"
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=8" in note and "bdd9731" in note for note in old.notes)
    new = _plan(tmp_path / "new", source=LATER, framework="Megatron-LM (2023)")
    assert new.argv[0] == "torchrun" and not any("CUDA_DEVICE_MAX_CONNECTIONS" in n for n in new.notes)
    old_pred = predict_command(list(old.argv), {}, cluster="dgx-a100")
    new_pred = predict_command(list(new.argv), {}, cluster="dgx-a100")
    assert old_pred.config.cuda_device_max_connections == 8 and new_pred.config.tp_comm_ordered
    # Same job otherwise (both 2022/2023 Megatron-LM rows run the unfused attention): only the overlap differs.
    assert old_pred.estimate.breakdown["compute"] == new_pred.estimate.breakdown["compute"]
    assert old_pred.estimate.breakdown["comm_tp"] > new_pred.estimate.breakdown["comm_tp"]
