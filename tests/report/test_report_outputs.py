"""Table, JSON and trace rendering of a prediction."""

import json

from llmperf_hook.api import Prediction, predict_config, prediction_json
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.launch.parsed_job import ParsedJob
from llmperf_hook.report.table import render_prediction_table
from llmperf_hook.report.trace import render_trace

CLUSTER = load_cluster("dgx-h100")


def _prediction(detail: bool = False) -> Prediction:
    cfg = make_config(num_layers=8, hidden_size=1024, num_attention_heads=16, pp=2, dp=4, global_batch_size=16)
    job = ParsedJob(launcher="torchrun", nnodes=1, nproc_per_node=8, world_size=8, script="pretrain_gpt.py",
                    script_args=(), argv=("torchrun", "pretrain_gpt.py"))
    return Prediction(job=job, config=cfg, estimate=predict_config(cfg, CLUSTER, detail=detail), cluster=CLUSTER)


def test_json_has_schema_keys() -> None:
    out = prediction_json(_prediction())
    for key in ("schema", "step_time_s", "tokens_per_s", "mfu", "memory", "breakdown", "config", "warnings",
                "predictor"):
        assert key in out
    assert out["schema"] == 1
    assert {"peak_bytes_per_gpu", "capacity_bytes", "fits"} <= set(out["memory"])
    assert abs(sum(out["breakdown"].values()) - out["step_time_s"]) < 1e-4 * out["step_time_s"]
    assert out["config"]["tp"] == 1 and out["config"]["pp"] == 2
    json.dumps(out)


def test_table_mentions_verdict_and_breakdown() -> None:
    text = render_prediction_table(_prediction())
    assert "step time" in text and "fits" in text and "pipeline bubble" in text


def test_trace_has_one_lane_per_stage_and_bubbles() -> None:
    trace = render_trace(_prediction(detail=True).estimate)
    events = trace["traceEvents"]
    lanes = {e["tid"] for e in events if e.get("ph") == "X" and e["pid"] == 0}
    assert lanes == {0, 1}
    ops = [e for e in events if e.get("ph") == "X" and e["pid"] == 1]
    assert {"gemm", "attention", "layernorm"} <= {e["cat"] for e in ops}
    assert {e["tid"] for e in ops} == {0, 1}
    names = {e["cat"] for e in events if e.get("ph") == "X"}
    assert {"F", "B", "bubble", "optimizer"} <= names
    assert all(e["dur"] >= 0 for e in events if e.get("ph") == "X")
