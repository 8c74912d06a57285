"""benchmarks/megatron_ci_configs.py --golden: CI's golden values read as Megatron-LM writes them, and llmperf's
figures for the same rank and the same counters."""

from __future__ import annotations

import json
from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
CI = load_script(ROOT / "benchmarks" / "megatron_ci_configs.py")

# The shape of core_v0.16.1 gpt3_7b_tp1_pp4_memory_speed/golden_values_dev_dgx_h100.json (--log-interval 2: odd
# steps "nan"; step 2 holds steps 1 and 2, the warm-up), values shortened.
GOLDEN = {
    "iteration-time": {"start_step": 1, "end_step": 7, "step_interval": 1,
                       "values": {"1": "nan", "2": 11.06832, "3": "nan", "4": 1.16152, "5": "nan", "6": 1.15069,
                                  "7": "nan", "8": 1.15402}},
    "mem-max-allocated-bytes": {"start_step": 1, "end_step": 3, "step_interval": 1,
                                "values": {"1": 52730814464.0, "2": 60518424576.0, "3": 60518424576.0}},
}

# A pipeline of 4 plain 1F1B stages (flags of the same case, the interleaving left out): stage 0 holds 4 micro-batches'
# activations, the last stage (CI's tensorboard rank) one.
PP4 = """
MODEL_ARGS:
  --num-layers: 8
  --hidden-size: 1024
  --num-attention-heads: 16
  --micro-batch-size: 1
  --global-batch-size: 8
  --seq-length: 2048
  --max-position-embeddings: 2048
  --tokenizer-type: NullTokenizer
  --vocab-size: 32000
  --mock-data: true
  --transformer-impl: transformer_engine
  --tensor-model-parallel-size: 1
  --pipeline-model-parallel-size: 4
  --use-distributed-optimizer: true
  --bf16: true
"""


def test_golden_values_drop_the_warm_up_interval_and_take_the_running_peak() -> None:
    step_s, allocated = CI.golden_measured(json.dumps(GOLDEN))
    assert step_s == 1.15402  # median of 1.16152, 1.15069, 1.15402: the 11 s interval and the nan steps left out
    assert allocated == 60518424576.0


def test_an_inference_golden_file_has_no_training_series() -> None:
    step_s, allocated = CI.golden_measured(json.dumps({"0": {"generated_tokens": [1, 2]}}))
    assert step_s != step_s and allocated != allocated  # nan: compare_golden skips the case


def test_predicted_allocated_is_the_last_stage_without_what_torch_does_not_count(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    case = CI.parse_ci_config(PP4)
    step_s, allocated, peak = CI.predict_golden(case)
    from llmperf_hook.api import predict_command

    memory = predict_command(CI.torchrun_argv(case), {"PATH": ""}, cluster="dgx-h100").estimate.memory
    assert memory.stage == 0  # the busiest stage is the first, not the one CI reports
    busiest = sum(v for k, v in memory.components.items() if k not in CI.NOT_IN_TORCH_COUNTERS)
    assert 0 < allocated < busiest
    assert peak == memory.peak_bytes_per_gpu and step_s > 0
    row = CI.GoldenRow("x", 1.0, step_s, allocated, allocated, peak)
    assert row.allocated_error == 0.0
    assert "1 cases priced" in CI.golden_summary([row])


def test_compare_golden_reads_a_mirror_and_reports_a_case_it_cannot_find(tmp_path, monkeypatch, capsys) -> None:
    import subprocess

    folder = tmp_path / "tests" / "functional_tests" / "test_cases" / "gpt" / "pp4"
    folder.mkdir(parents=True)
    (folder / "model_config.yaml").write_text(PP4)
    (folder / "golden_values_dev_dgx_h100.json").write_text(json.dumps(GOLDEN))
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    for words in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "fixture"]):
        subprocess.run([*git, *words], check=True)
    monkeypatch.setenv("LLMPERF_HOME", "/users/own/home")
    rows = CI.compare_golden(str(tmp_path), "HEAD", ["gpt/pp4", "gpt/nope"])
    out = capsys.readouterr().out
    assert [r.case for r in rows] == ["gpt/pp4"] and rows[0].measured_s == 1.15402
    assert "gpt/nope\tnot found" in out and "1 cases priced" in out
    assert CI.os.environ["LLMPERF_HOME"] == "/users/own/home"  # the caller's home is given back
