"""Megatron-LM's single-data-source assert (validate_args, core_v0.7.0 on: --mock-data, --data-path and the
--train/valid/test-data-path set count at most one) is applied again: it had been dropped because the script reader
took both branches of every `if`. Branches are now decided as bash decides them; where a condition cannot be decided
(a command's output) both are still read, and the rule is then a warning naming the lines, never a refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job

GPT = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
       "--micro-batch-size 1 --vocab-size 1000 --tokenizer-type NullTokenizer").split()
LAUNCH = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *GPT]


@pytest.mark.parametrize("extra, named", [
    (["--mock-data", "--data-path", "/d/train_text_document"], "--mock-data and --data-path"),
    (["--data-path", "/d/a", "--train-data-path", "/d/t"], "--data-path and --train-data-path"),
    (["--mock-data", "--valid-data-path", "/d/v", "--test-data-path", "/d/t"],
     "--mock-data and --valid-data-path / --test-data-path"),
])
def test_two_sources_exit_2(extra: list[str], named: str) -> None:
    with pytest.raises(ConfigError, match=f"{named} are both given: .*'A single data source must be provided"):
        resolve_job([*LAUNCH, *extra], {})


@pytest.mark.parametrize("extra", [["--mock-data"], ["--data-path", "/d/a"], ["--data-path"],
                                   ["--train-data-path", "/d/t", "--valid-data-path", "/d/v"], []])
def test_one_source_or_none_is_fine(extra: list[str]) -> None:
    resolve_job([*LAUNCH, *extra], {})


def test_megatron_deepspeed_has_no_such_rule(tmp_path: Path) -> None:
    """microsoft/Megatron-DeepSpeed's validate_args has no --mock-data and no single-source assert."""
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1, "train_batch_size": 8}')
    resolve_job(["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *GPT, "--deepspeed", "--deepspeed_config",
                 str(tmp_path / "ds.json"), "--data-path", "/d/a", "--train-data-path", "/d/t"], {})


SCRIPT = """#!/bin/bash
ARGS=({gpt})
if {condition}; then
    ARGS+=(--mock-data)
else
    ARGS+=(--data-path /data/text_document)
fi
torchrun --nproc-per-node 8 pretrain_gpt.py "${{ARGS[@]}}"
"""


def _script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, condition: str) -> list[str]:
    (tmp_path / "train.sh").write_text(SCRIPT.format(gpt=" ".join(GPT), condition=condition))
    monkeypatch.chdir(tmp_path)
    return resolve_job(["bash", "train.sh"], {})[1].warnings


@pytest.mark.parametrize("condition", ['[ "$DATA" = "" ]', '[[ -n "$DATA" ]]'])
def test_a_decided_branch_gives_one_source(condition: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not any("single data source" in w for w in _script(tmp_path, monkeypatch, condition))


def test_an_undecided_branch_warns_instead_of_refusing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`if [ "$(hostname)" = login ]`: llmperf cannot run hostname, reads both branches, and the launch gets both
    sources; bash gives one. A warning names the lines, the job is priced."""
    warnings = _script(tmp_path, monkeypatch, '[ "$(hostname)" = login ]')
    found = [w for w in warnings if "single data source" in w]
    assert found and "line 4, line 6" in found[0] and "could not decide" in found[0]


def test_an_undecided_and_list_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nDATA=--mock-data\n[ -d \"$(ls /nonexistent)\" ] && "
                                       "DATA=\"--data-path /d\"\ntorchrun --nproc-per-node 8 pretrain_gpt.py "
                                       f"{' '.join(GPT)} --mock-data $DATA\n")
    monkeypatch.chdir(tmp_path)
    warnings = resolve_job(["bash", "train.sh"], {})[1].warnings
    assert any("single data source" in w and "line 3" in w for w in warnings)
