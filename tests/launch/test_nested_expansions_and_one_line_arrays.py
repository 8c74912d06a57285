"""Launch-script forms llmperf read otherwise than bash runs them (R42's notes on H144): a default nested in a default
(`${A:-${B:-8}}`), an array assigned after `then` on the `if` line, and a blank inside `${...}` (`${NP%% *}`), each
checked against bash itself where bash is installed (bash manual 3.5.3 Shell Parameter Expansion, 6.7 Arrays)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.launch.argv_words import expand_env_refs
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_positional import expand_positional, positional_table
from llmperf_hook.launch.shell_script import shell_split, word_quoting

BASH = shutil.which("bash")
GPT = "pretrain_gpt.py --num-layers 2"
ECHO_LAUNCH = "torchrun() { printf '%s\\n' \"$@\"; }; export -f torchrun; "
"""Run the script under bash with torchrun replaced by a print of its arguments, one a line."""


def _launch(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...] = ()) -> list[str]:
    """torchrun's words as llmperf reads the script, checked against what bash passes where bash is installed."""
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh", *args], {})
    words = [f"--nproc_per_node={job.nproc_per_node}", *job.script_args]
    if BASH:
        ran = subprocess.run([BASH, "-c", f'{ECHO_LAUNCH}bash "$0" "$@"', str(script), *args], capture_output=True,
                             text=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=tmp_path)
        bash_words = ran.stdout.splitlines()
        assert bash_words[0] == f"--nproc_per_node={job.nproc_per_node}", ran
        assert bash_words[2:] == list(job.script_args), ran  # [1] is the script's path
    return words


@pytest.mark.parametrize("assign, expected", [("", "8"), ("B=2", "2"), ("A=4", "4"), ("A=4 B=2", "4"),
                                              ("A= B=2", "2"), ("A= B=", "8")])
def test_a_default_nested_in_a_default(assign: str, expected: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`${A:-${B:-8}}`: bash's closing brace is the first one outside the embedded expansion, and the inner word is
    expanded only when A is unset or empty. llmperf closed the outer expansion at the inner brace: A=4 gave `4}`,
    and an unset A left `${B:-8}` unexpanded."""
    body = f"{assign}\nTP=${{A:-${{B:-8}}}}\ntorchrun --nproc_per_node=${{A:-${{B:-8}}}} {GPT} --tp $TP --pp ${{A:-${{B:-8}}}}"
    words = _launch(tmp_path, body, monkeypatch)
    assert words[0] == f"--nproc_per_node={expected}" and words[-4:] == ["--tp", expected, "--pp", expected]


def test_nested_defaults_three_deep_and_in_alternate_values() -> None:
    env: dict[str, str] = {"C": "3", "F": "--bf16"}
    assert expand_env_refs("${A:-${B:-${C:-9}}}", env, {}) == "3"
    assert expand_env_refs("${A:-${B-${D:-9}}}x", env, {}) == "9x"
    assert expand_env_refs("${C:+${F:-x} --tp $C}", env, {}) == "--bf16 --tp 3"
    used: dict[str, str] = {}
    assert expand_env_refs("${C:-${F}}", env, used) == "3" and "F" not in used  # the word is not expanded at all


def test_a_nested_default_of_an_undecided_variable_stays_as_written() -> None:
    """A name only running the script tells (ShellVariables.undecidable) keeps its whole expansion unexpanded."""
    assert expand_env_refs("${A:-${B:-8}}", {}, {}, frozenset({"B"})) == "${B:-8}"
    assert expand_env_refs("${A:-${B:-8}}", {}, {}, frozenset({"A"})) == "${A:-${B:-8}}"


def test_a_positional_default_nested_in_a_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`${1:-${NP:-8}}` given $1 was `4}` (the brace left over); without it, NP's default."""
    assert expand_positional("${1:-${NP:-8}}", positional_table("t.sh", ["4"])) == "4"
    assert expand_positional("${2:-${1:-x}}", positional_table("t.sh", ["4"])) == "4"
    body = f"torchrun --nproc_per_node=${{1:-${{NP:-8}}}} {GPT}"
    assert _launch(tmp_path, body, monkeypatch, ("2",))[0] == "--nproc_per_node=2"
    assert _launch(tmp_path, body, monkeypatch)[0] == "--nproc_per_node=8"


@pytest.mark.parametrize("line", ["if [ 1 = 1 ]; then EXTRA=(--tp 2 --pp 2); fi",
                                  "if [ 1 = 0 ]; then EXTRA=(--tp 4); else EXTRA=(--tp 2 --pp 2); fi",
                                  "X=1; EXTRA=(--tp 2 --pp 2)",
                                  "for i in 1; do EXTRA=(--tp 2 --pp 2); done",
                                  "[ 1 = 1 ] && EXTRA=(--tp 2 --pp 2)"])
def test_an_array_assigned_after_a_keyword_or_list_operator_on_one_line(line: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """bash assigns the array wherever the command runs; llmperf assigned only an array that began its line, so
    `then EXTRA=(--tp 2 --pp 2)` left "${EXTRA[@]}" unexpanded (and set EXTRA to the scalar `(--tp`)."""
    words = _launch(tmp_path, f'{line}\ntorchrun --nproc_per_node=8 {GPT} "${{EXTRA[@]}}"', monkeypatch)
    assert words[-4:] == ["--tp", "2", "--pp", "2"]


def test_an_array_on_a_branch_that_does_not_run_is_not_assigned(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    words = _launch(tmp_path, f'EXTRA=(--tp 2)\nif [ 1 = 0 ]; then EXTRA=(--tp 4); fi\n'
                              f'torchrun --nproc_per_node=8 {GPT} "${{EXTRA[@]}}"', monkeypatch)
    assert words[-2:] == ["--tp", "2"]


def test_an_array_on_an_undecided_branch_line_is_undecided(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As for an array on a line of its own in such a branch (H144, note_array_assigned)."""
    (tmp_path / "train.sh").write_text('#!/bin/bash\nif [ "$(hostname)" = a ]; then EXTRA=(--tp 2); '
                                       f'else EXTRA=(--tp 4); fi\ntorchrun --nproc_per_node=8 {GPT} "${{EXTRA[@]}}"\n')
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {})
    assert "--tp" not in job.script_args and "EXTRA" in job.unknown_values


def test_a_blank_inside_a_parameter_expansion_splits_no_word() -> None:
    assert shell_split("torchrun --nproc ${NP%% *} x.py") == ["torchrun", "--nproc", "${NP%% *}", "x.py"]
    assert shell_split('a ${A:-${B:- 8}} "${C% *}" b') == ["a", "${A:-${B:- 8}}", "${C% *}", "b"]
    assert word_quoting("a ${NP%% *}\tb") == [False, True, False]


@pytest.mark.parametrize("trim, expected", [("%% *", "8"), ("% *", "8 GPUs per"), ("#* ", "GPUs per node"), ("##* ", "node"),
                                            ("/ GPUs per node/", "8")])
def test_a_trim_pattern_with_a_blank(trim: str, expected: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`${NP%% *}` is one word whose value bash then splits: llmperf cut it at the blank into `${NP%%` and `*}`."""
    body = f'NP="8 GPUs per node"\ntorchrun --nproc_per_node=8 {GPT} --x "${{NP{trim}}}"'
    assert _launch(tmp_path, body, monkeypatch)[-1:] == [expected]
    body = f'NP="8 GPUs"\ntorchrun --nproc_per_node=${{NP%% *}} {GPT}'
    assert _launch(tmp_path, body, monkeypatch)[0] == "--nproc_per_node=8"
