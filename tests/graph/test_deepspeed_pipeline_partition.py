"""Megatron-DeepSpeed's pipeline engine splits any layer count over PP, as DeepSpeed's PipelineModule does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.graph.stages import _partition_balanced, _partition_uniform, layers_per_virtual_stage


@pytest.mark.parametrize("layers, stages", [(70, 12), (30, 4), (41, 8), (95, 16), (7, 3), (24, 5)])
@pytest.mark.parametrize("mixed_precision", [True, False])
def test_partition_is_deepspeeds_own(layers: int, stages: int, mixed_precision: bool) -> None:
    from deepspeed.runtime.utils import partition_balanced

    # GPTModelPipe's specs: _to_float16, embedding, the transformer layers, norm, head, float16_to_fp32 (fp16/bf16).
    weights = [0, 0] + [1] * layers + [0, 0] + [0] * int(mixed_precision)  # partition_method='type:transformer'
    assert _partition_balanced(tuple(map(float, weights)), stages) == tuple(partition_balanced(weights, stages))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.integers(1, 12))
def test_balanced_and_uniform_splits_are_deepspeeds_own(weights: list[int], stages: int) -> None:
    from deepspeed.runtime.utils import partition_balanced, partition_uniform

    if stages <= len(weights):
        assert _partition_balanced(tuple(map(float, weights)), stages) == tuple(partition_balanced(weights, stages))
    assert _partition_uniform(len(weights), stages) == tuple(partition_uniform(len(weights), stages))


def _bloom_argv(tmp_path: Path, *extra: str) -> list[str]:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 2048,
                              "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}))
    return ["torchrun", "--nnodes", "48", "--nproc-per-node", "8", "pretrain_gpt.py",
            "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "12", "--num-layers", "70",
            "--hidden-size", "14336", "--num-attention-heads", "112", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--micro-batch-size", "2", "--global-batch-size", "2048", "--bf16",
            "--vocab-size", "250880", "--deepspeed", "--deepspeed_config", str(ds), "--zero-stage", "1", *extra]


def _bloom_fork_argv(tmp_path: Path, *extra: str) -> list[str]:
    """The same job as BLOOM's fork writes it (train/tr11-176B-ml): an option only the fork defines makes it that fork,
    whose parser has no --vocab-size; its vocabulary comes from the tokenizer, padded by --pad-vocab-size-to."""
    argv = _bloom_argv(tmp_path, *extra)
    at = argv.index("--vocab-size")
    return argv[:at] + ["--tokenizer-type", "PretrainedFromHF", "--tokenizer-name-or-path", "bigscience/tokenizer",
                        "--pad-vocab-size-to", "250880"] + argv[at + 2:]


def test_bloom_176b_layout_is_accepted_with_the_engines_split(tmp_path: Path) -> None:
    _, cfg = resolve_job(_bloom_argv(tmp_path), {})
    assert cfg.deepspeed_pipeline_engine
    assert layers_per_virtual_stage(cfg) == [6] * 10 + [5, 5]


def test_without_the_pipeline_engine_megatron_rule_holds(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not divisible by"):
        resolve_job(_bloom_argv(tmp_path)[:-5] + ["--bf16"], {})  # plain Megatron-LM: layers % PP == 0


def test_bigscience_fork_options_are_known(tmp_path: Path) -> None:
    # BLOOM's training script (bigscience-workshop/Megatron-DeepSpeed) adds options of its fork.
    argv = _bloom_fork_argv(tmp_path, "--embed-layernorm", "--pp-partition-method", "type:transformer|embedding",
                            "--abort-on-unmet-fused-kernel-constraints")
    _, cfg = resolve_job(argv, {})
    assert not any("--pp-partition-method" in w for w in cfg.warnings)
    assert any("--embed-layernorm" in w for w in cfg.warnings)
    with pytest.raises(ConfigError, match="did you mean --embed-layernorm"):
        resolve_job(_bloom_fork_argv(tmp_path, "--embed-layernom"), {})


def test_bloom_split_counts_the_two_embeddings_as_layers(tmp_path: Path) -> None:
    # 70 transformer layers + 2 embeddings = 72 weighted entries, 6 per stage: the first and last stage hold the
    # embedding / the tied head and 5 transformer layers (BLOOM-176B's 'type:transformer|embedding').
    _, cfg = resolve_job(_bloom_fork_argv(tmp_path, "--pp-partition-method", "type:transformer|embedding"), {})
    assert layers_per_virtual_stage(cfg) == [5] + [6] * 10 + [5]
    _, cfg = resolve_job(_bloom_fork_argv(tmp_path, "--pp-partition-method", "TYPE:Transformer"), {})
    assert layers_per_virtual_stage(cfg) == [6] * 10 + [5, 5]
    _, cfg = resolve_job(_bloom_fork_argv(tmp_path, "--pp-partition-method", "uniform"), {})
    # 77 entries (cast, embedding, transpose, 70 layers, undo, norm, head, cast) over 12: 7 x 5, then 6 x 7.
    assert layers_per_virtual_stage(cfg) == [4, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 2]
    _, cfg = resolve_job(_bloom_fork_argv(tmp_path, "--pp-partition-method", "parameters"), {})
    assert sum(layers_per_virtual_stage(cfg)) == 70 and min(layers_per_virtual_stage(cfg)) >= 1


@pytest.mark.parametrize("method, message", [("type:mamba", "matches none"), ("profile", "not a DeepSpeed partition"),
                                             ("type:(", "not a regular expression")])
def test_partition_methods_deepspeed_refuses_exit_2(tmp_path: Path, method: str, message: str) -> None:
    _, cfg = resolve_job(_bloom_fork_argv(tmp_path, "--pp-partition-method", method), {})
    with pytest.raises(ConfigError, match=message):
        layers_per_virtual_stage(cfg)


def test_uneven_first_stage_is_split_over_its_virtual_chunks() -> None:
    # Megatron "Uneven PP" with VPP: stage 0 holds 20 layers (10 per chunk), stage 1 the other 28 (14 per chunk);
    # chunk v = vchunk * PP + stage. explain accepted this and predict used to refuse it.
    from tests.frameworks.helpers import megatron

    cfg = megatron("--num-layers", "48", "--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers",
                   "20", "--num-virtual-stages-per-pipeline-rank", "2", "--global-batch-size", "16")
    assert layers_per_virtual_stage(cfg) == [10, 14, 10, 14]
    cfg = megatron("--num-layers", "30", "--pipeline-model-parallel-size", "4", "--decoder-first-pipeline-num-layers",
                   "6", "--decoder-last-pipeline-num-layers", "8", "--global-batch-size", "16")
    assert layers_per_virtual_stage(cfg) == [6, 8, 8, 8]
