"""Issue 7's --apply criteria on a second corpus of commands users write (tests/tune/apply_corpus_users.py): every
applied command is one explain accepts with tune's layout and global batch, predict prices it as tune listed it,
DeepSpeed's DeepSpeedConfig reads each written ds_config as tuned, the user's files are byte-identical, a refused job
exits 2 and one that does not fit exits 3 naming the largest configuration that would; the JSON parses, its rows are
sorted by step time, and the first row's "changes" are exactly the difference between the two commands (flags, and
the keys of the written ds_config). `tune --format json` without --apply searches exactly what --apply searched (so
its search is replayed, tests/tune/search_replay.py), lists the same rows and applies nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.tune import search as tune_search

from .apply_corpus import check_case
from .apply_corpus_users import CASES
from .helpers import run_cli
from .search_replay import SearchReplay


def _flags(argv: list[str]) -> dict[str, str]:
    """--flag -> its last value ("" for a switch): argparse's last-wins reading, written apart from render.argv_flags."""
    out: dict[str, str] = {}
    for i, word in enumerate(argv):
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word.partition("=")
            following = argv[i + 1] if i + 1 < len(argv) else ""
            out[name] = value if eq else ("" if following.startswith("--") else following)
    return out


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix[:-1]: node}
    return {k: v for key, sub in node.items() for k, v in _leaves(sub, f"{prefix}{key}.").items()}


def _expected_changes(user_argv: list[str], applied: dict[str, Any]) -> set[tuple[str, str]]:
    before, after = _flags(user_argv), _flags(applied["argv"])
    want = {("argv", k) for k in {*before, *after} if before.get(k) != after.get(k)}
    for path in applied["new_files"]:  # ds.llmperf-tuned[-N].json beside the user's ds.json
        new = _leaves(json.loads(Path(path).read_text()))
        old = _leaves(json.loads(Path(re.sub(r"\.llmperf-tuned(-\d+)?(?=\.json$)", "", path)).read_text()))
        want |= {(path, k) for k in {*old, *new} if old.get(k) != new.get(k)}
    return want


def _check_listing(data: dict[str, Any], user_argv: list[str]) -> list[str]:
    problems = []
    times = [row["step_time_s"] for row in data["top"]]
    if times != sorted(times):
        problems.append(f"rows not sorted by step time: {times}")
    got = {(c["where"], c["key"]) for c in data["top"][0]["changes"]}
    want = _expected_changes(user_argv, data["applied"])
    if got != want:
        problems.append(f"changes listed {sorted(got - want)} beyond the diff, missing {sorted(want - got)}")
    return problems


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_user_commands_apply_cleanly(case, deepspeed_config, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no accelerate default_config.yaml of this machine
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    replay = SearchReplay(tune_search.search_candidates)  # one search for the two tunes below (search_replay.py)
    monkeypatch.setattr(tune_search, "search_candidates", replay)
    seen: dict[str, Any] = {}
    assert check_case(case, tmp_path, lambda args: run_cli(args, capsys), deepspeed_config, seen) == []
    data = seen["data"]
    if case.expect != 0:
        assert "Traceback" not in data["error"]
        return
    assert _check_listing(data, list(case.argv)) == []
    model = ["--model", case.model] if case.model else []
    search = ["--search", str(tmp_path / "llmperf-search.yaml")] if case.search else []
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", *model, *search, "--",
                              *case.argv], capsys)
    plain = json.loads(out)
    assert code == 0 and plain["applied"] is None, err
    assert replay.replayed == 1, "tune without --apply searched other inputs than with it"
    assert [row["layout"] for row in plain["top"]] == [row["layout"] for row in data["top"]]


def test_the_corpus_is_varied() -> None:
    assert len(CASES) >= 30 and len({c.name for c in CASES}) == len(CASES)
    refused_or_infeasible = {c.expect for c in CASES}
    assert refused_or_infeasible == {0, 2, 3}
