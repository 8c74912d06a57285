"""Round-4 campaign: predict --batch line forms."""

from __future__ import annotations

import pytest

from llmperf_hook.commands.predict import parse_batch_line
from llmperf_hook.errors import UsageError


def test_a_bare_separator_before_the_command() -> None:
    assert parse_batch_line("-- torchrun --nproc-per-node 8 pretrain_gpt.py", {}) == (
        ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py"], {})


@pytest.mark.parametrize(("line", "fragment"), [
    ("--bogus 3 -- torchrun pretrain_gpt.py", "unknown llmperf option --bogus"),
    ("--format json -- torchrun pretrain_gpt.py", "unknown llmperf option --format"),
    ("--model llama2-7b deepspeed train.py", "separate them"),
])
def test_line_options_are_named(line: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_batch_line(line, {})
