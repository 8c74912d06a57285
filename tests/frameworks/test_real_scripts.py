"""Launch scripts of public repositories, captured as the exact commands they run (tests/frameworks/real_scripts/
cases/*.json, with repository, commit and path; table in real_scripts/README.md), explained and predicted as a
user would: the exit code, the message of a refused one, and the values the script intends (world size, TP, PP,
DP, global batch, sequence length, parameter count within 2 % of the model's published size)."""

from __future__ import annotations

import pytest

from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from tests.frameworks.real_scripts.replay import lay_out, load_cases, replay, total_params

CASES = load_cases()
LAYOUT_KEYS = ("world_size", "tp", "pp", "dp", "global_batch_size", "seq_length")


def test_at_least_sixty_scripts_from_seven_repositories() -> None:
    assert len({(c["repository"], c["path"]) for c in CASES}) >= 60
    assert len({c["repository"] for c in CASES}) >= 7


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_explain(case: dict, tmp_path) -> None:
    expect = case["expect"]
    result = replay(case, "explain", tmp_path)
    assert result.exit_code == expect["explain_exit"], result.output
    if result.exit_code:
        assert "llmperf: error:" in result.output and expect["message"] in result.output, result.output
        assert "Traceback" not in result.output
        return
    assert {k: result.data[k] for k in LAYOUT_KEYS} == {k: expect[k] for k in LAYOUT_KEYS}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_predict(case: dict, tmp_path) -> None:
    expect = case["expect"]
    result = replay(case, "predict", tmp_path)
    assert result.exit_code == expect["predict_exit"], result.output
    if result.exit_code == 0:
        assert result.data["step_time_s"] > 0 and result.data["config"]["world_size"] == expect["world_size"]


@pytest.mark.parametrize("case", [c for c in CASES if "params" in c["expect"]],
                         ids=[c["name"] for c in CASES if "params" in c["expect"]])
def test_parameter_count_is_the_published_size(case: dict, tmp_path, monkeypatch) -> None:
    words, env, cwd = lay_out(case, tmp_path)
    options, argv = words[:words.index("--")], words[words.index("--") + 1:]
    named = dict(zip(options[::2], options[1::2]))
    overrides = JobOverrides(nnodes=int(named["--nnodes"]) if "--nnodes" in named else None,
                             nproc_per_node=int(named["--nproc-per-node"]) if "--nproc-per-node" in named else None,
                             model=named.get("--model"))
    monkeypatch.chdir(cwd)
    _, cfg = resolve_job(argv, env, overrides)
    published = case["expect"]["params"]
    assert abs(total_params(cfg) / published - 1) < 0.02, (total_params(cfg), published)
