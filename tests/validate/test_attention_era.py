"""Which attention a Megatron-LM row is priced with: the papers' classic unfused kernels for a run dated before
2024 (a year in the framework cell, or an arXiv id / ISO date in its source), flash for a later or undated one (a
user's own job on today's Megatron-LM, which a blank framework cell means), and the row's own flag when it gives
one; the choice is named in the row's notes. Found by the issue-5 acceptance audit: a blank framework cell was
priced with 2021 unfused attention, silently (29 % slower on a GPT-1.3B-like row on dgx-h100)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.validate.launch_command import build_launch_plan
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW


@pytest.mark.parametrize(("cells", "expected"), [
    ({"framework": "Megatron-LM (2022)"}, "--attention-backend"),
    ({"framework": "Megatron-LM PTD", "source": "Narayanan et al. SC21 (arXiv:2104.04473)"}, "--attention-backend"),
    ({"framework": ""}, "--use-flash-attn"),
    ({"framework": "Megatron-LM"}, "--use-flash-attn"),
    ({"framework": "Megatron-LM (2024)"}, "--use-flash-attn"),
    ({"framework": "Megatron-LM", "source_location": "our cluster, 2025-03-01"}, "--use-flash-attn"),
    ({"framework": "Megatron-LM (2021)", "extra_args": "--use-flash-attn"}, "--use-flash-attn"),
    ({"framework": "Megatron-Core"}, "--use-flash-attn"),
    ({"framework": "Megatron-DeepSpeed"}, "--attention-backend"),
])
def test_attention_follows_the_rows_era(cells: dict[str, str], expected: str, tmp_path: Path) -> None:
    plan = build_launch_plan(build_measured_run({**BASE_ROW, "source": "", **cells}, 1), tmp_path)
    chosen = [w for w in plan.argv if w in ("--attention-backend", "--use-flash-attn")]
    assert chosen == [expected]
    if expected == "--attention-backend":
        assert plan.argv[plan.argv.index("--attention-backend") + 1] == "unfused"
    if cells.get("framework", "").startswith("Megatron-LM") or cells.get("framework") == "":
        if "extra_args" not in cells:
            assert any(note.startswith("attention: ") for note in plan.notes)
