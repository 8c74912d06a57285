"""Issue 7, round 13: `llmperf tune` used as a user would, on Megatron-LM, Megatron-DeepSpeed and DeepSpeed jobs,
checked against what the frameworks themselves do with the command tune hands back (sources cited per test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import error_lines, run_cli

MDS_PP2 = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--tensor-model-parallel-size", "4",
           "--pipeline-model-parallel-size", "2", "--num-layers", "32", "--hidden-size", "4096",
           "--num-attention-heads", "32", "--seq-length", "2048", "--max-position-embeddings", "2048",
           "--micro-batch-size", "1", "--global-batch-size", "512", "--bf16", "--vocab-size", "50257", "--deepspeed",
           "--deepspeed_config", "ds.json", "--zero-stage", "1"]
MDS_DS = {"train_batch_size": 512, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 512,
          "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}, "gradient_clipping": 1.0}


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """The user's launch folder as the working directory; an empty llmperf store (no calibration moves a figure)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / ".llmperf"))
    return tmp_path


def _tune_json(args: list[str], capsys) -> dict:
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", *args], capsys)
    assert code == 0, err
    return json.loads(out)


def test_megatron_deepspeed_pipe_model_never_gets_block_recompute(home: Path, capsys) -> None:
    """Megatron-DeepSpeed's GPTModelPipe (built without --no-pipeline-parallel, at PP 1 too) checkpoints only
    --checkpoint-activations or full *uniform* recompute ('deepspeed's pipeline doesn't support the block recompute
    method': megatron/model/gpt_model.py sets activation_checkpoint_interval 0 otherwise), so a block row under the
    PipelineEngine is the no-recompute job. Tune ranked such rows first, priced with recomputation they never get."""
    (home / "ds.json").write_text(json.dumps(MDS_DS))
    (home / "s.yaml").write_text("recompute: [block]\nmicro_batch_size: [1]\ntensor_parallel: [4]\n")
    data = _tune_json(["--top", "20", "--search", "s.yaml", "--", *MDS_PP2], capsys)
    engine_rows = [r for r in data["top"] if r["pp"] > 1 or r["zero_stage"] < 2]
    assert engine_rows and all(r["recompute"] != "block" for r in engine_rows), engine_rows[:3]
    # Without the engine (PP 1, ZeRO-2/3: --apply adds --no-pipeline-parallel) GPTModel's ParallelTransformer
    # recomputes block layers, and tune still offers them.
    assert any(r["recompute"] == "block" for r in data["top"] if r["pp"] == 1 and r["zero_stage"] >= 2)
