"""A Hugging Face config.json that names no MLP activation runs its configuration class's default (H213)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.test_round17_frameworks import NO_PRECISION, _explain

FALCON_7B = {"model_type": "falcon", "hidden_size": 4544, "n_head": 71, "n_layer": 32, "multi_query": True,
             "parallel_attn": True, "bias": False, "vocab_size": 65024, "alibi": False}
"""tiiuae/falcon-7b's config.json shape keys (no activation key: RWConfig era)."""
BLOOM = {"model_type": "bloom", "hidden_size": 1024, "n_head": 16, "n_layer": 24, "vocab_size": 250880,
         "hidden_act": "gelu"}
"""A BLOOM config with a stray hidden_act: BloomMLP runs BloomGelu (tanh) whatever the config says."""


@pytest.mark.parametrize(("config", "variant", "said"), [
    (FALCON_7B, "none", "FalconConfig's default"), ({**FALCON_7B, "activation": "gelu_new"}, "tanh", "'gelu_new'"),
    ({**FALCON_7B, "model_type": "gpt_bigcode"}, "tanh", "GPTBigCodeConfig's default"),
    (BLOOM, "tanh", "BloomMLP runs it")])
def test_class_default_activation_is_priced(config: dict, variant: str, said: str, tmp_path: Path, capsys,
                                            monkeypatch) -> None:
    """falcon-7b's config.json has no activation key; FalconMLP runs nn.GELU() / get_activation(FalconConfig's
    activation="gelu"), the exact GELU. llmperf priced it as the tanh one."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    command = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "m", "--do_train",
               "--output_dir", "out", "--per_device_train_batch_size", "1", "--deepspeed", "ds.json", "--bf16",
               "--block_size", "2048"]
    code, got, err = _explain(tmp_path, NO_PRECISION, command, capsys, monkeypatch, model="")
    assert code == 0, err
    assert got.get("gelu_approximate", "tanh") == variant
    assert said in got["sources"]["gelu_approximate"]
