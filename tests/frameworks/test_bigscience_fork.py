"""BLOOM's fork (bigscience-workshop/Megatron-DeepSpeed 8387ae1), known by an option only it defines
(megatron_entry_points.BIGSCIENCE_MARKS): its parser (megatron/arguments.py, `ArgumentParser(allow_abbrev=False)`,
plus DeepSpeed's config arguments) lacks Megatron-LM's later options, so `pretrain_gpt.py --sequence-parallel` stops at
start-up with 'unrecognized arguments' there. explain accepted it (Megatron-LM's options of every release counted)."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.megatron_entry_points import BIGSCIENCE_OPTIONS, bigscience_job, fork_parser_options
from tests.frameworks.helpers import script
from tests.launch.cli_run import llmperf

BLOOM = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
         "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
         "--micro-batch-size", "1", "--global-batch-size", "64", "--tokenizer-type", "PretrainedFromHF",
         "--tokenizer-name-or-path", "bigscience/tokenizer", "--embed-layernorm", "--bf16"]
"""train/tr11-176B-ml's options, cut down: --tokenizer-name-or-path and --embed-layernorm are the fork's own."""


@pytest.mark.parametrize("extra, named", [
    (["--sequence-parallel"], "--sequence-parallel"),
    (["--use-distributed-optimizer"], "--use-distributed-optimizer"),
    (["--recompute-granularity", "full"], "--recompute-granularity"),
    (["--recompute-activations"], "--recompute-activations"),
    (["--num-layer", "3"], "--num-layer (did you mean --num-layers?)"),
])
def test_options_the_fork_lacks_are_refused(extra: list[str], named: str) -> None:
    with pytest.raises(ConfigError, match=r"runs bigscience-workshop/Megatron-DeepSpeed \(BLOOM's fork, known by "
                                          r"--tokenizer-name-or-path.*does not know " + named.replace("(", r"\(")
                       .replace(")", r"\)").replace("?", r"\?")) as err:
        script([*BLOOM, *extra])
    assert err.value.exit_code == 2


def test_explain_exits_2_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--", *BLOOM, "--sequence-parallel")
    assert out.code == 2 and "Traceback" not in out.err and "BLOOM's fork" in out.err


def test_the_forks_own_options_run() -> None:
    cfg = script([*BLOOM, "--checkpoint-activations", "--pad-vocab-size-to", "250880", "--pp-partition-method",
                  "type:transformer|embedding", "--kill-switch-path", "/tmp/kill"])
    assert cfg.recompute.granularity == "full"


def test_without_a_mark_megatron_lms_options_count() -> None:
    """Megatron-LM's and microsoft's Megatron-DeepSpeed's pretrain_gpt.py define --sequence-parallel."""
    plain = [word for word in BLOOM if word not in ("--tokenizer-name-or-path", "bigscience/tokenizer", "--embed-layernorm")]
    plain[plain.index("PretrainedFromHF")] = "GPT2BPETokenizer"
    assert not bigscience_job("pretrain_gpt.py", plain) and fork_parser_options("pretrain_gpt.py", plain) is None
    assert script([*plain, "--vocab-size", "50257", "--tensor-model-parallel-size", "2", "--sequence-parallel"]
                  ).parallel.sequence_parallel


def test_a_users_script_is_no_fork_entry_point() -> None:
    assert not bigscience_job("my_train.py", BLOOM[4:])
    assert {"checkpoint-activations", "deepspeed", "zero-stage"} <= BIGSCIENCE_OPTIONS
    assert not {"sequence-parallel", "use-distributed-optimizer", "no-pipeline-parallel"} & BIGSCIENCE_OPTIONS
