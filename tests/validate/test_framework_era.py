"""The framework era of a measured run: DeepSpeed ZeRO-3 before v0.6.0 (frameworks/deepspeed_release.py), stated
as LLMPERF_DEEPSPEED_VERSION before the run's launch command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llmperf_hook.api import predict_command
from llmperf_hook.frameworks.deepspeed_release import job_release, release_before, release_zero3_fields
from llmperf_hook.validate.framework_era import deepspeed_version, legacy_zero3_release, published_month
from llmperf_hook.validate.launch_command import build_launch_plan
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW

SC21 = "Narayanan et al. SC21 (arXiv:2104.04473)"


def test_version_and_month_parsing() -> None:
    assert deepspeed_version("DeepSpeed v0.4.2 ZeRO-3") == (0, 4, 2)
    assert deepspeed_version("DeepSpeed 0.14") == (0, 14, 0) and deepspeed_version("DeepSpeed ZeRO-3") is None
    assert published_month("Narayanan et al. SC21 (arXiv:2104.04473) Table 2") == (2021, 4)
    assert published_month("github.com/NVIDIA/Megatron-LM @f2e5db402c (2024-07-15)") == (2024, 7)
    assert published_month("no date here") is None


def test_the_release_of_a_run_is_its_version_else_the_newest_before_its_publication() -> None:
    assert release_before(2021, 4) == (0, 3, 13)  # v0.3.13 of 2021-03-16; v0.3.14 came on 2021-04-08
    assert release_before(2022, 3) == (0, 5, 10) and release_before(2022, 4) is None
    assert legacy_zero3_release(3, "DeepSpeed ZeRO-3", SC21, "") == (0, 3, 13)
    assert legacy_zero3_release(3, "DeepSpeed v0.5.7", SC21, "") == (0, 5, 7)  # the version overrides the date
    assert legacy_zero3_release(3, "DeepSpeed v0.6.0", SC21, "") is None
    assert legacy_zero3_release(3, "DeepSpeed ZeRO-3", "arXiv:2312.12391", "") is None
    assert legacy_zero3_release(1, "DeepSpeed ZeRO-1", SC21, "") is None
    assert legacy_zero3_release(3, "DeepSpeed ZeRO-3", "an undated blog post", "") is None


def test_release_fields_follow_the_two_changes() -> None:
    assert release_zero3_fields(3, (0, 3, 13)) == {"zero3_per_tensor_grad_reduce": True, "zero3_list_param_gather": True,
                                                   "stage3_prefetch_bucket_size_elems": 0, "overlap_grad_reduce": False}
    assert release_zero3_fields(3, (0, 5, 5)) == {"zero3_per_tensor_grad_reduce": True}
    assert release_zero3_fields(3, (0, 19, 8)) == {} and release_zero3_fields(2, (0, 3, 13)) == {}
    assert release_zero3_fields(3, None) == {}


def test_job_release_reads_the_variable_first() -> None:
    version, source = job_release({"LLMPERF_DEEPSPEED_VERSION": "v0.4.2"})
    assert version == (0, 4, 2) and source is not None and "LLMPERF_DEEPSPEED_VERSION" in str(source)


def test_a_megatron_predict_reads_no_package_metadata() -> None:
    """The installed DeepSpeed's version is read only for DeepSpeed jobs: importlib.metadata (~25 ms of imports)
    stays out of a Megatron prediction."""
    code = ("import sys; from llmperf_hook.api import predict_command; predict_command('torchrun --nproc-per-node 8 "
            "pretrain_gpt.py --num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 512 "
            "--max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --vocab-size 32000'.split(), {}); "
            "print('importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_2021_zero3_row_runs_as_its_release(tmp_path: Path) -> None:
    row = {**BASE_ROW, "tp": "1", "pp": "1", "dp": "16", "num_gpus": "16", "zero_stage_or_dist_opt": "ZeRO-3",
           "framework": "DeepSpeed ZeRO-3", "source": SC21}
    plan = build_launch_plan(build_measured_run(row, 1), tmp_path / "old")
    assert plan.argv[0] == "LLMPERF_DEEPSPEED_VERSION=0.3.13" and any("0.3.13" in note for note in plan.notes)
    old = predict_command(list(plan.argv), {}, cluster="dgx-a100")
    o = old.config.optimizer
    assert (o.zero3_list_param_gather, o.zero3_per_tensor_grad_reduce, o.stage3_prefetch_bucket_size_elems,
            o.overlap_grad_reduce) == (True, True, 0, False)
    modern_plan = build_launch_plan(build_measured_run({**row, "framework": "DeepSpeed 0.14.0"}, 1), tmp_path / "new")
    assert not modern_plan.argv[0].startswith("LLMPERF_")
    modern = predict_command(list(modern_plan.argv), {}, cluster="dgx-a100")
    assert not modern.config.optimizer.zero3_list_param_gather
    assert old.estimate.step_time_s > 1.1 * modern.estimate.step_time_s  # 16 GPUs: +19 %
