"""DeepSpeed-Chat's main.py reads its options with argparse, where a flag given twice keeps its LAST value (each
occurrence stores over the one before): llmperf's warnings about LoRA and the reward model read them the same way,
checked against argparse itself and through the real CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.deepspeed_chat import _arg_value, deepspeed_chat_warnings
from tests.launch.cli_run import llmperf

OPT = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 2048, "ffn_dim": 8192,
       "num_attention_heads": 32, "num_hidden_layers": 24, "vocab_size": 50272, "max_position_embeddings": 2048,
       "word_embed_proj_dim": 2048, "do_layer_norm_before": True, "activation_function": "relu"}
MAIN = ["deepspeed", "--num_gpus", "8", "main.py", "--model_name_or_path", "opt", "--per_device_train_batch_size", "4",
        "--max_seq_len", "512", "--zero_stage", "2", "--deepspeed"]


@pytest.mark.parametrize("args", [["--lora_dim", "128", "--lora_dim", "0"], ["--lora_dim=0", "--lora_dim", "8"],
                                  ["--lora_dim", "8", "--lora_dim=0"], ["--lora_dim", "8"], []])
def test_the_last_occurrence_as_argparse(args: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lora_dim", type=int, default=0)  # dschat step1 main.py
    expected = parser.parse_args(args).lora_dim
    given = _arg_value(args, "--lora_dim")
    assert (int(given) if given is not None else 0) == expected
    assert any("--lora_dim" in w for w in deepspeed_chat_warnings(args)) is (expected > 0)


@pytest.mark.parametrize("lora, warned", [(["--lora_dim", "128", "--lora_dim", "0"], False),
                                          (["--lora_dim", "0", "--lora_dim", "128"], True)])
def test_explain_warns_for_the_lora_dim_main_py_uses(lora: list[str], warned: bool, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "config.json").write_text(json.dumps(OPT))
    monkeypatch.chdir(tmp_path)
    out = llmperf(capsys, "explain", "--", *MAIN, *lora)
    assert out.code == 0, out.err
    assert ("LoRA adapters' matmuls are not priced" in out.out + out.err) is warned
