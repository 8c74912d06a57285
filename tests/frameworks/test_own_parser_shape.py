"""A script that parses Megatron-style flags with its own argparse parser runs with that parser's defaults when the
command leaves them out (frameworks/script_defaults.own_parser_shape / with_own_defaults): the cpu-testbed's
train_gpt.py with no shape flags at all trains 2 layers x 128, 4 heads, seq 128, micro-batch 2, vocabulary 1024, and
is priced so, not refused for want of --num-layers / --num-attention-heads."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "examples" / "cpu-testbed"


def _cfg(argv: list[str]):
    return resolve_job(argv, {"DS_ACCELERATOR": "cpu"})[1]


def test_testbed_with_no_shape_flags_trains_its_defaults() -> None:
    cfg = _cfg(["deepspeed", "--num_gpus", "2", str(TESTBED / "train_gpt.py"),
                "--deepspeed_config", str(TESTBED / "ds_zero1.json")])
    m = cfg.model
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size) == (2, 128, 4, 128, 1024)
    assert (cfg.batch.micro_batch_size, cfg.batch.global_batch_size) == (2, 4)
    assert cfg.framework == "megatron-deepspeed" and cfg.optimizer.zero_stage == 1
    assert "own argparse default" in cfg.sources["num_attention_heads"].detail


def test_a_given_flag_beats_the_scripts_default() -> None:
    cfg = _cfg(["deepspeed", "--num_gpus", "1", str(TESTBED / "train_gpt.py"), "--deepspeed_config",
                str(TESTBED / "ds_zero0.json"), "--num-layers", "3", "--num-attention-heads", "8"])
    assert (cfg.model.num_layers, cfg.model.num_attention_heads, cfg.model.hidden_size) == (3, 8, 128)


@pytest.mark.parametrize("parser", [
    'p.add_argument("--num-layers", type=int)\np.add_argument("--hidden-size", type=int, default=64)',  # no default
    'p.add_argument("--num_layers", type=int, default=2)\np.add_argument("--hidden_size", type=int, default=64)',
])
def test_no_number_default_in_megatrons_spelling_is_no_shape(tmp_path: Path, parser: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(f"import argparse\np = argparse.ArgumentParser()\n{parser}\nargs = p.parse_args()\n")
    with pytest.raises(ConfigError, match="model shape|num-layers"):
        _cfg(["deepspeed", "--num_gpus", "1", str(script), "--deepspeed_config", str(TESTBED / "ds_zero1.json")])
