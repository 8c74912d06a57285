"""run_clm.py's model built from scratch: `--model_type gpt2 --config_overrides "n_embd=...,n_layer=..."` is
GPT2Config()'s defaults with the overrides applied as transformers' PretrainedConfig.update_from_string applies them
(frameworks/hf_config.config_from_overrides). llmperf asked for --model before."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.hf_config import config_from_overrides
from tests.frameworks.helpers import script

# transformers examples/pytorch/language-modeling/README.md: training GPT-2 from scratch with run_clm.py
RUN_CLM = ["torchrun", "--nproc-per-node", "8", "run_clm.py", "--model_type", "gpt2", "--tokenizer_name",
           "openai-community/gpt2", "--dataset_name", "wikitext", "--per_device_train_batch_size", "4",
           "--block_size", "1024", "--do_train", "--output_dir", "/tmp/out"]


def test_overrides_give_the_shape() -> None:
    cfg = script([*RUN_CLM, "--config_overrides", "n_embd=1024,n_head=16,n_layer=24,n_positions=1024"])
    shape = cfg.model
    assert (shape.num_layers, shape.hidden_size, shape.num_attention_heads) == (24, 1024, 16)
    assert shape.ffn_hidden_size == 4 * 1024  # n_inner None: GPT2MLP's 4 * n_embd
    assert shape.vocab_size == 50257 and shape.seq_length == 1024  # GPT2Config's vocab, the script's --block_size
    assert "--config_overrides" in str(cfg.sources["num_layers"])


def test_attribute_map_names_and_defaults() -> None:
    """GPT2Config.attribute_map lets `hidden_size=` set n_embd; what the overrides leave is GPT2Config()'s default."""
    raw = config_from_overrides("gpt2", "hidden_size=2048,num_hidden_layers=6")
    assert (raw["n_embd"], raw["n_layer"], raw["n_head"], raw["vocab_size"]) == (2048, 6, 12, 50257)
    cfg = script(RUN_CLM)  # --model_type alone: the default config (openai-community/gpt2's shape)
    assert (cfg.model.num_layers, cfg.model.hidden_size) == (12, 768)


def test_types_follow_the_existing_attribute() -> None:
    raw = config_from_overrides("gpt2", "scale_attn_weights=no,layer_norm_epsilon=1e-6,activation_function=relu")
    assert raw["scale_attn_weights"] is False and raw["layer_norm_epsilon"] == 1e-6
    assert raw["activation_function"] == "relu"


@pytest.mark.parametrize("overrides, said", [
    ("n_layers=24", "key n_layers isn't in the original config dict"),
    ("n_layer=2.5", "n_layer is an int in the config"),
    ("n_inner=4096", "can only update int, float, bool or string values"),
    ("use_cache=maybe", "cannot derive true or false from maybe"),
    ("n_layer=24,n_embd", "is not KEY=VALUE"),
    ("", "is not KEY=VALUE"),  # run_clm.py calls update_from_string whenever the flag is given
])
def test_what_transformers_refuses_is_bad_input(overrides: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as err:
        script([*RUN_CLM, "--config_overrides", overrides])
    assert err.value.exit_code == 2


def test_overrides_with_a_checkpoint_stop_run_clm() -> None:
    argv = [*RUN_CLM, "--model_name_or_path", "openai-community/gpt2", "--config_overrides", "n_layer=24"]
    with pytest.raises(ConfigError, match="can't be used in combination with --config_name or --model_name_or_path"):
        script(argv)


def test_an_unknown_model_type_names_what_to_give() -> None:
    with pytest.raises(ConfigError, match="--model_type falcon .* llmperf knows for gpt2 only"):
        script([*RUN_CLM[:4], "--model_type", "falcon", "--block_size", "1024", "--config_overrides", "num_hidden_layers=4"])


def test_the_era_s_gradient_checkpointing_attribute_is_priced() -> None:
    """bigscience experiments/gpt2-hf-ds/hf_ds_gpt2_perf_n16.slurm overrides `gradient_checkpointing=true,
    use_cache=False`: a GPT2Config attribute before transformers 4.11, which made the model checkpoint its blocks."""
    overrides = "n_embd=8192,n_head=32,n_layer=64,n_positions=1024,gradient_checkpointing=true,use_cache=False"
    cfg = script([*RUN_CLM, "--config_overrides", overrides])
    assert (cfg.model.num_layers, cfg.model.hidden_size) == (64, 8192)
    assert cfg.recompute.granularity == "full"
    assert "gradient_checkpointing" in str(cfg.sources["recompute"])
    assert script(RUN_CLM).recompute.granularity != "full"
