"""A `$` bash takes literally in a launch script (`'$NPROC'`) is quoted as `$` in llmperf's errors and warnings, never
as the placeholder shell_script.protect_literal_dollars stands in for it while the script is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_script import LITERAL_DOLLAR


def _script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "train.sh"
    path.write_text("#!/bin/bash\n" + text)
    return str(path)


def test_an_error_quotes_a_literal_dollar_as_bash_has_it(tmp_path: Path) -> None:
    # bash passes `$NPROC` itself to torchrun, which stops: "invalid int value: '$NPROC'"
    path = _script(tmp_path, "NP='$NPROC'\ntorchrun --nproc-per-node $NP pretrain_gpt.py --num-layers 2\n")
    with pytest.raises(UsageError) as refused:
        parse_launch(["bash", path], {})
    message = str(refused.value)
    assert "'$NPROC'" in message and LITERAL_DOLLAR not in message and "\\ue024" not in message


def test_a_warning_quotes_a_literal_dollar_as_bash_has_it(tmp_path: Path) -> None:
    path = _script(tmp_path, "ft_launcher --nproc-per-node 2 --some-option='$X' train.py --lr 1\n")
    job = parse_launch(["bash", path], {})
    quoting = [w for w in job.warnings if "--some-option" in w]
    assert quoting and all("$X" in w and LITERAL_DOLLAR not in w for w in quoting), job.warnings


def test_the_command_that_writes_a_file_is_quoted_as_bash_has_it(tmp_path: Path) -> None:
    path = _script(tmp_path, "sed 's/$MBS/1/' tmpl.json > ds.json\ntorchrun --nproc-per-node 2 train.py --lr 1\n")
    job = parse_launch(["bash", path], {})
    written = next(iter(job.script_files.values()))
    assert written.command.startswith("sed s/$MBS/1/") and LITERAL_DOLLAR not in written.command
