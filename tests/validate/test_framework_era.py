"""The framework era of a measured run: DeepSpeed ZeRO-3 before v0.5.5 fetched parameters synchronously."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.validate.framework_era import deepspeed_version, published_month, synchronous_zero3_fetch
from llmperf_hook.validate.launch_command import build_launch_plan
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW


def test_version_and_month_parsing() -> None:
    assert deepspeed_version("DeepSpeed v0.4.2 ZeRO-3") == (0, 4, 2)
    assert deepspeed_version("DeepSpeed 0.14") == (0, 14, 0) and deepspeed_version("DeepSpeed ZeRO-3") is None
    assert published_month("Narayanan et al. SC21 (arXiv:2104.04473) Table 2") == (2021, 4)
    assert published_month("github.com/NVIDIA/Megatron-LM @f2e5db402c (2024-07-15)") == (2024, 7)
    assert published_month("no date here") is None


def test_rule_uses_version_first_then_publication_month() -> None:
    old = "Narayanan et al. SC21 (arXiv:2104.04473)"
    assert synchronous_zero3_fetch(3, "DeepSpeed ZeRO-3", old, "")
    assert not synchronous_zero3_fetch(3, "DeepSpeed v0.6.0", old, "")  # the version overrides the date
    assert not synchronous_zero3_fetch(3, "DeepSpeed ZeRO-3", "arXiv:2312.12391", "")
    assert not synchronous_zero3_fetch(1, "DeepSpeed ZeRO-1", old, "")
    assert not synchronous_zero3_fetch(3, "DeepSpeed ZeRO-3", "an undated blog post", "")


def _ds_config(argv: tuple[str, ...]) -> dict:
    return json.loads(Path(argv[argv.index("--deepspeed_config") + 1]).read_text())


def test_2021_zero3_row_gets_synchronous_fetch_settings(tmp_path: Path) -> None:
    row = {**BASE_ROW, "tp": "1", "pp": "1", "dp": "16", "num_gpus": "16", "zero_stage_or_dist_opt": "ZeRO-3",
           "framework": "DeepSpeed ZeRO-3", "source": "Narayanan et al. SC21 (arXiv:2104.04473)"}
    plan = build_launch_plan(build_measured_run(row, 1), tmp_path / "old")
    zero = _ds_config(plan.argv)["zero_optimization"]
    assert zero == {"stage": 3, "stage3_prefetch_bucket_size": 0, "overlap_comm": False}
    assert any("v0.5.5" in note for note in plan.notes)
    modern = build_launch_plan(build_measured_run({**row, "framework": "DeepSpeed 0.14.0"}, 1), tmp_path / "new")
    assert _ds_config(modern.argv)["zero_optimization"] == {"stage": 3}


def test_per_tensor_reduce_lasted_until_v0_6_0() -> None:
    from llmperf_hook.validate.framework_era import per_tensor_zero3_reduce

    assert per_tensor_zero3_reduce(3, "DeepSpeed v0.5.10", "", "")
    assert not per_tensor_zero3_reduce(3, "DeepSpeed v0.6.0", "", "")
    assert per_tensor_zero3_reduce(3, "DeepSpeed ZeRO-3", "arXiv:2201.11990", "")
    assert not per_tensor_zero3_reduce(3, "DeepSpeed ZeRO-3", "arXiv:2203.15556", "")
    assert not per_tensor_zero3_reduce(2, "DeepSpeed ZeRO-2", "arXiv:2104.04473", "")


def test_era_optimizer_fields_per_release() -> None:
    from llmperf_hook.validate.framework_era import era_optimizer_fields

    both = {"zero3_list_param_gather": True, "zero3_per_tensor_grad_reduce": True}
    assert era_optimizer_fields(3, "DeepSpeed ZeRO-3", "Narayanan et al. SC21 (arXiv:2104.04473)", "") == both
    assert era_optimizer_fields(3, "DeepSpeed 0.5.7", "", "") == {"zero3_per_tensor_grad_reduce": True}
    assert era_optimizer_fields(3, "DeepSpeed 0.14.0", "arXiv:2104.04473", "") == {}
    assert era_optimizer_fields(3, "DeepSpeed ZeRO-3", "an undated blog post", "") == {}


def test_release_optimizer_fields_follow_the_version() -> None:
    from llmperf_hook.validate.framework_era import release_optimizer_fields

    assert release_optimizer_fields(3, (0, 3, 13)) == {"zero3_list_param_gather": True,
                                                       "zero3_per_tensor_grad_reduce": True}
    assert release_optimizer_fields(3, (0, 5, 5)) == {"zero3_per_tensor_grad_reduce": True}
    assert release_optimizer_fields(3, (0, 19, 0)) == {}
    assert release_optimizer_fields(2, (0, 3, 13)) == {}
