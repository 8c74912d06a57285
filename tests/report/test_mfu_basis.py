"""The table's MFU line names what it divides: model TFLOP/s per GPU and the dense peak of the job's dtype."""

import re
from dataclasses import replace

from llmperf_hook.api import Prediction, predict_config
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.launch.parsed_job import ParsedJob
from llmperf_hook.report.table import render_prediction_table

JOB = ParsedJob(launcher="torchrun", nnodes=1, nproc_per_node=8, world_size=8, script="pretrain_gpt.py",
                script_args=(), argv=("torchrun", "pretrain_gpt.py"))
LINE = re.compile(r"MFU\s+([\d.]+) %\s+\(([\d,]+) model TFLOP/s per GPU of the ([\d,]+) TFLOP/s dense (\w+) peak")


def _mfu_line(cluster_name: str, precision: str) -> tuple[Prediction, tuple[str, ...]]:
    cluster = load_cluster(cluster_name)
    cfg = make_config(num_layers=4, hidden_size=1024, num_attention_heads=16, dp=8, global_batch_size=16)
    cfg = replace(cfg, precision=precision)
    pred = Prediction(job=JOB, config=cfg, estimate=predict_config(cfg, cluster), cluster=cluster)
    match = LINE.search(render_prediction_table(pred))
    assert match, render_prediction_table(pred)
    return pred, match.groups()


def test_mfu_line_is_model_flops_over_the_dtype_peak() -> None:
    pred, (mfu_pct, achieved, peak, dtype) = _mfu_line("dgx-h100", "bf16")
    est = pred.estimate
    expected_achieved = est.model_flops_per_step / (est.step_time_s * pred.config.world_size) / 1e12
    assert dtype == "bf16" and int(peak.replace(",", "")) == round(pred.cluster.gpu.peak_for("bf16") / 1e12)
    assert abs(int(achieved.replace(",", "")) - expected_achieved) <= 0.5
    assert abs(float(mfu_pct) - 100 * expected_achieved / float(peak.replace(",", ""))) < 0.2


def test_fp8_names_the_fp8_peak_where_the_gpu_has_one() -> None:
    pred, (_, _, peak, dtype) = _mfu_line("dgx-h100", "fp8")
    assert dtype == "fp8" and int(peak.replace(",", "")) == round(pred.cluster.gpu.peak_for("fp8") / 1e12)
