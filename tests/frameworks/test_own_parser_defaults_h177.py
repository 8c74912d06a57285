"""A script that parses Megatron-style flags with its own argparse parser is held to its parser, not Megatron's: the
cpu-testbed's train_gpt.py defines `--max-position-embeddings` with default None and sizes its table
`args.max_position_embeddings or args.seq_length`, so `llmperf predict` of it without the flag no longer stops on
Megatron's requirement (megatron/training/arguments.py: max_position_embeddings must be given), and its literal
`--vocab-size` default stands where Megatron would want a tokenizer (frameworks/script_defaults.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.graph import params as pc

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "examples" / "cpu-testbed" / "train_gpt.py"
SHAPE = ["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "512",
         "--micro-batch-size", "1", "--deepspeed"]
PARSER = ("import argparse\nimport deepspeed\np = argparse.ArgumentParser()\n"
          "p.add_argument('--num-layers', type=int)\np.add_argument('--hidden-size', type=int)\n"
          "p.add_argument('--num-attention-heads', type=int)\np.add_argument('--seq-length', type=int)\n"
          "p.add_argument('--micro-batch-size', type=int)\np.add_argument('--deepspeed', action='store_true')\n"
          "p.add_argument('--deepspeed_config')\n")


def _cfg(tmp_path: Path, script: Path, *extra: str):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}))
    argv = ["deepspeed", "--num_gpus", "1", str(script), "--deepspeed_config", str(ds), *SHAPE, *extra]
    return resolve_job(argv, {"LLMPERF_DEEPSPEED_VERSION": "0.19.8"})[1]


def test_the_testbed_script_needs_no_max_position_embeddings(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, TESTBED)
    assert cfg.model.max_position_embeddings is None
    assert cfg.model.vocab_size == 1024 and "train_gpt.py's own argparse default" in str(cfg.sources["vocab_size"])
    with_flag = _cfg(tmp_path, TESTBED, "--max-position-embeddings", "512", "--vocab-size", "1024")
    assert pc.position_table_rows(cfg) == pc.position_table_rows(with_flag) == 512  # seq-length rows


@pytest.mark.parametrize(("default", "rows"), [("2048", 2048), ("None", None)])
def test_a_literal_default_of_the_scripts_parser_is_read(tmp_path: Path, default: str, rows: int | None) -> None:
    script = tmp_path / "train.py"
    script.write_text(PARSER + f"p.add_argument('--max-position-embeddings', type=int, default={default})\n"
                               "p.add_argument('--vocab-size', type=int, default=50304)\n")
    cfg = _cfg(tmp_path, script)
    assert cfg.model.max_position_embeddings == rows and cfg.model.vocab_size == 50304


def test_a_computed_default_warns(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PARSER + "SEQ = 4096\np.add_argument('--max-position-embeddings', type=int, default=SEQ)\n")
    cfg = _cfg(tmp_path, script, "--vocab-size", "1024")
    assert cfg.model.max_position_embeddings is None
    assert any("computes the default of --max-position-embeddings" in w for w in cfg.warnings)


@pytest.mark.parametrize("text", ["from megatron.training import pretrain\n", "import megatron\n"])
def test_a_script_on_megatrons_parser_still_needs_it(tmp_path: Path, text: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(text + PARSER + "p.add_argument('--max-position-embeddings', type=int, default=None)\n")
    with pytest.raises(ConfigError, match="Megatron requires --max-position-embeddings"):
        _cfg(tmp_path, script, "--vocab-size", "1024")


def test_megatrons_entry_point_still_needs_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Megatron requires --max-position-embeddings"):
        _cfg(tmp_path, tmp_path / "pretrain_gpt.py", "--vocab-size", "1024")
