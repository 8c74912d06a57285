"""Regressions from the robustness campaign (issue h17): ds_config and Megatron argv as the frameworks read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.frameworks.deepspeed_config import parse_ds_config, read_ds_config, strip_json_comments
from llmperf_hook.graph.stages import layers_per_virtual_stage

from .helpers import BASE, megatron, script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "ds.json"
    path.write_text(text)
    return str(path)


def test_ds_config_with_comments_and_trailing_commas(tmp_path: Path) -> None:
    # DeepSpeed reads its config with hjson: comments and trailing commas are fine (runtime/config.py).
    text = '{\n  // batch\n  "train_batch_size": 64, # hash comment\n  /* zero */ "zero_optimization": {"stage": 2,},\n}'
    cfg = script([*DS, _write(tmp_path, text)], model="llama2-7b")
    assert (cfg.batch.global_batch_size, cfg.optimizer.zero_stage) == (64, 2)


def test_comment_markers_inside_strings_are_kept() -> None:
    assert strip_json_comments('{"a": "x // y # z /* w */", "b": "q\\"#",}') == '{"a": "x // y # z /* w */", "b": "q\\"#"}'


def test_ds_config_duplicate_keys_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="twice"):
        read_ds_config(_write(tmp_path, '{"train_batch_size": 8, "train_batch_size": 16}'))


def test_ds_config_garbage_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        read_ds_config(_write(tmp_path, "not json {"))


def test_pydantic_coercions_match_deepspeed() -> None:
    # DeepSpeed's ZeRO/fp16/bf16 sections are pydantic models: "2" is stage 2 and "false" is False.
    ds = parse_ds_config({"train_batch_size": 8, "zero_optimization": {"stage": "2", "overlap_comm": "true"},
                          "fp16": {"enabled": "false"}, "bf16": {"enabled": True}, "gradient_clipping": None}, "ds.json")
    assert (ds.zero_stage, ds.overlap_comm, ds.fp16, ds.bf16, ds.gradient_clipping) == (2, True, False, True, 0.0)


@pytest.mark.parametrize(("raw", "match"), [
    ({"zero_optimization": {"stage": 4}}, "0, 1, 2 or 3"),
    ({"fp16": {"enabled": "maybe"}}, "true or false"),
    ({"gradient_clipping": "x"}, "must be a number"),
])
def test_values_deepspeed_rejects(raw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_ds_config({"train_batch_size": 8, **raw}, "ds.json")


def test_unknown_megatron_option_rejected_with_suggestion() -> None:
    # pretrain_gpt.py parses with parse_args(): an option no release defines stops the job ("unrecognized arguments").
    with pytest.raises(ConfigError, match=r"--tensor-model-paralel-size \(did you mean --tensor-model-parallel-size\?\)"):
        megatron("--tensor-model-paralel-size", "2")
    with pytest.raises(ConfigError, match="--my-flag"):
        megatron("--my-flag=3")


def test_real_megatron_options_accepted() -> None:
    cfg = megatron("--use-mcore-models", "--mock-data", "--tiktoken-pattern", "v2", "--no-mmap-bin-files",
                   "--cross-entropy-loss-fusion", "--deepspeed_mpi", "--no-gradient-accumulation-fusion")
    assert cfg.parallel.dp == 8 and not any("unknown" in w for w in cfg.warnings)


def test_respelled_and_custom_script_options_only_warn() -> None:
    cfg = megatron("--micro_batch_size", "2", "--swiglu", "--no-swiglu")
    assert cfg.batch.micro_batch_size == 2 and not cfg.model.swiglu
    assert any("--micro_batch_size" in w for w in cfg.warnings) and any("--no-swiglu" in w for w in cfg.warnings)
    custom = script(["torchrun", "--nproc-per-node", "8", "my_train.py", "--num-layers", "2", "--hidden-size", "64",
                     "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128",
                     "--vocab-size", "1000", "--micro-batch-size", "1", "--my-own-flag", "1"])
    assert any("--my-own-flag" in w for w in custom.warnings)


def test_megatron_required_and_exclusive_shape_flags() -> None:
    # arguments.py: max_position_embeddings is a required argument; seq/encoder-seq and layers/encoder-layers exclusive.
    i = BASE.index("--max-position-embeddings")
    no_positions = BASE[:i] + BASE[i + 2:]
    with pytest.raises(ConfigError, match="requires --max-position-embeddings"):
        megatron(base=no_positions)
    with pytest.raises(ConfigError, match="encoder_seq_length"):
        megatron("--encoder-seq-length", "2048")
    with pytest.raises(ConfigError, match="cannot have both"):
        megatron("--encoder-num-layers", "32")


def test_megatron_optimizer_choices() -> None:
    # arguments.py --optimizer choices include muon, lion, soap (was: exit 2 "not one Megatron-LM offers").
    cfg = megatron("--optimizer", "muon")
    assert cfg.optimizer.name == "adam" and any("--optimizer muon" in w for w in cfg.warnings)
    with pytest.raises(ConfigError, match="choices"):
        megatron("--optimizer", "adagrad")


def test_uneven_pipeline_layout_is_priced_per_stage() -> None:
    # Megatron accepts --pipeline-model-parallel-layout with layers % PP != 0; each stage gets the layers it names.
    cfg = megatron("--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Et*3|(tt|)*6L",
                   "--global-batch-size", "8", base=[*BASE[:1], "15", *BASE[2:]])
    assert (cfg.parallel.pp, cfg.parallel.vpp) == (2, 4)
    assert layers_per_virtual_stage(cfg) == [3, 2, 2, 2, 2, 2, 2, 0]
    even = megatron("--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Et*16|t*16L")
    assert even.parallel.pipeline_layout == "Et*16|t*16L" and layers_per_virtual_stage(even) == [16, 16]


def test_megatron_deepspeed_llama_flags() -> None:
    # Megatron-DeepSpeed examples_deepspeed/pretrain_llama2_distributed.sh: --normalization rmsnorm (its lowercase
    # choices) and GQA through --num-key-value-heads; they were read as LayerNorm and one group per head.
    cfg = megatron("--normalization", "rmsnorm", "--num-key-value-heads", "8")
    assert (cfg.model.normalization, cfg.model.num_query_groups) == ("RMSNorm", 8)
    assert megatron("--normalization", "RMSNorm").model.normalization == "RMSNorm"
    with pytest.raises(ConfigError, match="not a choice"):
        megatron("--normalization", "batchnorm")
    with pytest.raises(ConfigError, match="num-key-value-heads"):
        megatron("--num-key-value-heads", "5")


def test_values_given_to_megatron_switches_rejected() -> None:
    with pytest.raises(ConfigError, match="--bf16 True"):
        megatron("--bf16", "True")
    with pytest.raises(ConfigError, match="--sequence-parallel=false"):
        megatron("--sequence-parallel=false")
    assert megatron("--bf16", "--use-distributed-optimizer").precision == "bf16"


def test_offload_optimizer_ignored_at_stage_0() -> None:
    ds = parse_ds_config({"train_batch_size": 8, "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}}, "ds.json")
    assert ds.offload_optimizer == "none" and any("stage 0" in w for w in ds.warnings)
    assert parse_ds_config({"train_batch_size": 8, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}},
                           "ds.json").offload_optimizer == "cpu"


def test_step_batch_size_schedule_warns() -> None:
    # Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh ramps the batch with --step-batch-size-schedule.
    cfg = megatron("--step-batch-size-schedule", "0:16 2.4B:320 12B:1536", gpus=8)
    assert any("--step-batch-size-schedule" in w for w in cfg.warnings)


def test_more_accepted_but_not_modelled_settings_warn() -> None:
    cfg = megatron("--empty-unused-memory-level", "1", "--qk-layernorm", "--hybrid-override-pattern", "M-M*-")
    for flag in ("--empty-unused-memory-level", "--qk-layernorm", "--hybrid-override-pattern"):
        assert any(w.startswith(flag) for w in cfg.warnings), flag
    assert not any("--empty-unused-memory-level" in w for w in megatron("--empty-unused-memory-level", "0").warnings)
