"""Launch-script forms llmperf read otherwise than bash runs them (notes of H127 / R34), each checked against bash
itself where bash is installed: a default (`${NP:-8}`) of a variable only running the script tells, whole arrays set
apart by undecided branches, `. FILE` as an `if` condition, `break abc`, and `deepspeed --exclude localhost:`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch

BASH = shutil.which("bash")
GPT = "pretrain_gpt.py --num-layers 2"
UNDECIDED = {
    "a case arm": 'case "$(hostname)" in\n  node1) NP=4 ;;\nesac',
    "two branches": 'if [ "$(hostname)" = node1 ]; then\n  NP=4\nelse\n  NP=2\nfi',
    "a command's output": "NP=$(nvidia-smi -L | wc -l)",
    "through a variable": "N=$(nvidia-smi -L | wc -l)\nNP=${N:-8}",
}


def _bash(script: Path, runner: str = "") -> subprocess.CompletedProcess[str]:
    path = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run([BASH or "bash", "-c", f'{runner}bash "$0"', str(script)], capture_output=True, text=True,
                          env=path, cwd=script.parent)


@pytest.mark.parametrize("body", UNDECIDED.values(), ids=UNDECIDED.keys())
def test_a_default_of_an_undecided_variable_is_undecided(body: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """bash gives `${NP:-8}` NP's value whenever it is set and not empty, so 8 only where NP turns out unset: llmperf
    took 8 silently. Now it refuses as for `$NP`, naming where the script sets NP."""
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{body}\ntorchrun --nproc_per_node ${{NP:-8}} {GPT}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"--nproc-per-node \$\{(NP|N):-8\} is a variable whose value only running the "
                                         r"launch script gives .*the launch script sets \$N") as err:
        parse_launch(["bash", "train.sh"], {})
    assert err.value.exit_code == 2


def test_a_default_in_the_training_arguments_stays_unexpanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.sh").write_text("#!/bin/bash\nTP=$(cat tp.txt)\nPP=2\n"
                                       f"torchrun --nproc_per_node 8 {GPT} --tp ${{TP:-1}} --pp ${{PP:-1}} --x ${{U:-3}}\n")
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {})
    assert job.script_args[-6:] == ("--tp", "${TP:-1}", "--pp", "2", "--x", "3")
    assert "TP" in job.unknown_values


ARRAYS = """#!/bin/bash
if [ "$(hostname)" = node1 ]; then
  EXTRA=({first})
else
  EXTRA=({second})
fi
{after}
torchrun --nproc_per_node 8 {gpt} "${{EXTRA[@]}}"
"""


def test_whole_arrays_of_undecided_branches_are_undecided(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two branches assign EXTRA different words: bash passes one branch's; llmperf took the last (TP 4) silently.
    Now as for a scalar set so: left unexpanded, priced without it, with a warning naming both branches."""
    (tmp_path / "train.sh").write_text(ARRAYS.format(first="--tp 2", second="--tp 4", after="", gpt=GPT))
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {})
    assert "--tp" not in job.script_args and "EXTRA" in job.unknown_values
    assert any("$EXTRA reaches the launch line unexpanded" in w and "line 3" in w and "line 5" in w
               for w in job.warnings), job.warnings


def test_flag_only_arrays_take_the_first_branch_and_keep_later_appends(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """As for a scalar holding only flags (undecided_branches._first_branch_flags); what the script appends after
    `fi` is known and stays (it was dropped with the array)."""
    (tmp_path / "train.sh").write_text(ARRAYS.format(first="--bf16", second="--fp16", after="EXTRA+=(--tp 4)", gpt=GPT))
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {})
    assert job.script_args[-3:] == ("--bf16", "--tp", "4")
    assert any("Priced with the branch read first (line 3: --bf16)" in w for w in job.warnings), job.warnings


def test_arrays_the_branches_agree_on_or_append_to_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.sh").write_text(ARRAYS.format(first="--tp 2", second="--tp 2", after="", gpt=GPT))
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["bash", "train.sh"], {}).script_args[-2:] == ("--tp", "2")


@pytest.mark.parametrize("condition", [". ./env.sh", "source ./env.sh", "! . ./env.sh"])
def test_a_file_sourced_as_an_if_condition_is_read(condition: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """bash runs the condition's first command whenever the `if` runs: FILE's variables are set after `fi` (it was
    never read, so $TP reached the launch unexpanded)."""
    (tmp_path / "env.sh").write_text("TP=2\nif [ 1 = 1 ]; then NP=4; fi\n")
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nif {condition}; then\n  echo ok\nfi\n"
                                       f"torchrun --nproc_per_node $NP {GPT} --tp $TP\n")
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {})
    assert (job.nproc_per_node, job.script_args[-2:]) == (4, ("--tp", "2"))
    if BASH:
        ran = _bash(tmp_path / "train.sh", 'torchrun() { echo "$2 ${@: -1}"; }; export -f torchrun; ')
        assert ran.stdout.split("\n")[-2] == "4 2", ran


def test_a_sourced_condition_in_an_undecided_branch_is_not_read_as_certain(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "env.sh").write_text("TP=2\n")
    (tmp_path / "train.sh").write_text('#!/bin/bash\nif [ "$(hostname)" = a ]; then\n  if . ./env.sh; then :; fi\nfi\n'
                                       f"torchrun --nproc_per_node 8 {GPT} --tp $TP\n")
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["bash", "train.sh"], {}).script_args[-1] == "$TP"


@pytest.mark.parametrize("word", ["break", "continue"])
def test_a_loop_count_that_is_no_number_ends_the_script(word: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """bash 5: "break: abc: numeric argument required", status 128, and the launch after the loop never runs."""
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\nfor i in 1 2; do\n  A=$i\n  {word} abc\ndone\n"
                      f"torchrun --nproc_per_node 8 {GPT} --x $A\n")
    monkeypatch.chdir(tmp_path)
    if BASH:
        ran = _bash(script, 'torchrun() { echo LAUNCHED; }; export -f torchrun; ')
        assert ran.returncode == 128 and "LAUNCHED" not in ran.stdout and "numeric argument required" in ran.stderr
    with pytest.raises(UsageError, match=rf"stops at line 4 \(`{word} abc`\) before any launch line: bash says "
                                         rf"'{word}: abc: numeric argument required'") as err:
        parse_launch(["bash", "train.sh"], {})
    assert err.value.exit_code == 2


def test_a_loop_count_on_an_undecided_branch_or_in_a_subshell_is_not_refused(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.sh").write_text('#!/bin/bash\nfor i in 1 2; do\n  if [ "$(hostname)" = a ]; then break abc; fi\n'
                                       f"  ( break abc )\ndone\ntorchrun --nproc_per_node 8 {GPT}\n")
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["bash", "train.sh"], {}).nproc_per_node == 8


@pytest.mark.parametrize("spec", ["localhost:", "localhost:0,", "localhost:0,,1"])
def test_deepspeed_filter_with_an_empty_slot(spec: str) -> None:
    """runner.py parse_node_config: `[int(x) for x in slots.split(",")]` fails on the empty slot (ValueError); llmperf
    said `localhost:` excluded every GPU."""
    for given in ({"nproc_per_node": 8}, {"cluster_gpus_per_node": 8}):
        with pytest.raises(UsageError, match=rf"'{spec}' has an empty slot after the ':'; DeepSpeed's launcher") as err:
            parse_launch(["deepspeed", "--exclude", spec, "train.py"], {}, **given)  # type: ignore[arg-type]
        assert err.value.exit_code == 2
    assert parse_launch(["deepspeed", "--exclude", "localhost:0,1", "train.py"], {}, cluster_gpus_per_node=8).world_size == 6
