"""A Megatron-DeepSpeed-style script runs DeepSpeed's PipelineEngine only where deepspeed.initialize gets a
PipelineModule (assemble._builds_pipeline_module): the framework's entry points without --no-pipeline-parallel,
PP > 1, or a script whose own source builds one. The CPU testbed's train_gpt.py takes the flags but always builds the
plain engine, so its bf16 ZeRO-0 run is DDP_BFLOAT16, not BF16_Optimizer (0.19.8)."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.api import resolve_command
from llmperf_hook.graph.step_ops import runs_bf16_optimizer

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ["--num-layers", "2", "--hidden-size", "512", "--num-attention-heads", "8", "--seq-length", "512",
         "--max-position-embeddings", "512", "--micro-batch-size", "1", "--global-batch-size", "1", "--vocab-size",
         "50304", "--bf16", "--deepspeed"]


def _cfg(tmp_path: Path, script: str):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0},
                              "bf16": {"enabled": True}}))
    argv = ["deepspeed", "--num_gpus", "1", script, "--deepspeed_config", str(ds), *FLAGS]
    return resolve_command(argv, {"LLMPERF_DEEPSPEED_VERSION": "0.19.8"}, cluster="dgx-h100")[1]


def test_the_testbed_script_builds_the_plain_engine(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, str(ROOT / "examples" / "cpu-testbed" / "train_gpt.py"))
    assert cfg.framework == "megatron-deepspeed" and not cfg.deepspeed_pipeline_engine
    assert cfg.optimizer.zero0_bf16_accum_dtype == "bf16" and not runs_bf16_optimizer(cfg)


def test_a_script_building_a_pipeline_module_and_the_entry_points_run_the_pipeline_engine(tmp_path: Path) -> None:
    sources = {"imported.py": "from deepspeed.pipe import PipelineModule as PM\nmodel = PM(layers=[], num_stages=1)\n",
               "subclass.py": "from megatron.model import GPTModelPipe\nclass Mine(GPTModelPipe):\n    pass\n",
               "attribute.py": "import deepspeed\nmodel = deepspeed.pipe.PipelineModule(layers=[], num_stages=1)\n"}
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    for script in [str(tmp_path / name) for name in sources] + ["pretrain_gpt.py"]:
        cfg = _cfg(tmp_path, script)
        assert cfg.deepspeed_pipeline_engine and runs_bf16_optimizer(cfg), script


def test_a_comment_string_or_unused_import_of_pipeline_module_builds_no_pipeline(tmp_path: Path) -> None:
    """Only code that hands deepspeed.initialize a PipelineModule counts (deepspeed/__init__.py isinstance check)."""
    sources = {"comment.py": "# unlike PipelineModule, this builds the plain engine\nimport argparse\n",
               "string.py": "HELP = 'no PipelineModule here'\n",
               "unused.py": "from deepspeed.pipe import PipelineModule\nimport argparse\n"}
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
        cfg = _cfg(tmp_path, str(tmp_path / name))
        assert not cfg.deepspeed_pipeline_engine and not runs_bf16_optimizer(cfg), name
