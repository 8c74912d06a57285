"""The memory line of the table and the memory object of the JSON for each verdict: fits, fits tight (the peak over
the GPU by no more than the allocator's reserve, or under it by less than the model's error
band), DOES NOT FIT (the allocated bytes over it: schedule/memory_rule.py). Old JSON readers keep a boolean `fits`
(true when tight). A DeepSpeed ZeRO-1 job: its reserve holds the step's flat buffers in segments of their own."""

import dataclasses

import pytest

from llmperf_hook.api import Prediction, predict_config, prediction_json
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.launch.parsed_job import ParsedJob
from llmperf_hook.report.table import render_prediction_table
from llmperf_hook.report.units import fmt_bytes

CLUSTER = load_cluster("dgx-h100")
CFG = make_config(num_layers=8, hidden_size=2048, num_attention_heads=16, seq_length=2048, micro_batch_size=4,
                  dp=8, global_batch_size=64, framework="deepspeed", optimizer_kw={"zero_stage": 1})
JOB = ParsedJob(launcher="torchrun", nnodes=1, nproc_per_node=8, world_size=8, script="pretrain_gpt.py",
                script_args=(), argv=("torchrun", "pretrain_gpt.py"))
BASE = predict_config(CFG, CLUSTER).memory
RESERVE = BASE.peak_bytes_per_gpu - BASE.must_fit_bytes


def _prediction(capacity_bytes: int) -> Prediction:
    cluster = dataclasses.replace(CLUSTER, gpu=dataclasses.replace(CLUSTER.gpu, memory_capacity_bytes=capacity_bytes))
    return Prediction(job=JOB, config=CFG, estimate=predict_config(CFG, cluster), cluster=cluster)


def _memory_line(pred: Prediction) -> str:
    return next(line for line in render_prediction_table(pred).splitlines() if "memory per GPU" in line)


@pytest.mark.parametrize(("capacity", "verdict", "fits", "tight"), [
    (2 * BASE.peak_bytes_per_gpu, "fits", True, False),
    (BASE.peak_bytes_per_gpu + 2**20, "fits, tight", True, True),  # under the peak's error band
    (BASE.must_fit_bytes, "fits, tight", True, True),  # must-fit bytes exactly fit
    (BASE.must_fit_bytes - 1, "DOES NOT FIT", False, False),
])
def test_json_verdict(capacity: int, verdict: str, fits: bool, tight: bool) -> None:
    mem = prediction_json(_prediction(capacity))["memory"]
    assert mem["verdict"] == verdict and mem["fits"] is fits and mem["tight"] is tight
    assert mem["fragmentation_bytes"] == mem["components"]["allocator_fragmentation"] == BASE.fragmentation_bytes
    assert mem["headroom_bytes"] == capacity - mem["peak_bytes_per_gpu"]


def test_table_line_for_each_verdict() -> None:
    assert RESERVE == BASE.fragmentation_bytes > 0  # a shortfall the reserve covers still fits
    reserve = fmt_bytes(RESERVE)
    roomy = _memory_line(_prediction(2 * BASE.peak_bytes_per_gpu))
    assert ": fits (headroom" in roomy and "tight" not in roomy and "fragmentation" not in roomy
    over = _memory_line(_prediction(BASE.peak_bytes_per_gpu - RESERVE // 2))
    assert ": fits, tight (short by" in over and f"within its {reserve} of allocator reserve: PyTorch frees" in over
    under = _memory_line(_prediction(BASE.peak_bytes_per_gpu + 2**20))
    assert ": fits, tight (headroom" in under
    short = _memory_line(_prediction(BASE.must_fit_bytes - 2**20))
    assert ": DOES NOT FIT (short by" in short
    assert f"beyond its {reserve} of allocator reserve: what it allocates" in short


def test_tight_warning_reaches_table_and_json() -> None:
    pred = _prediction(BASE.peak_bytes_per_gpu - RESERVE // 2)
    assert "warning: memory fits, tight" in render_prediction_table(pred)
    assert any("expandable_segments:True" in w for w in prediction_json(pred)["warnings"])
