"""Golden launch commands -> explain JSON.

Each folder under tests/golden/explain/ holds case.yaml (the command as a shell line, env, llmperf overrides, and a
hand-checked `expect:` subset or an `error:`) plus fixtures (ds_config, hostfile, model dirs) it names relatively.
expected.json is the full explain output, regenerated only with LLMPERF_REGEN_GOLDEN=1; the hand-written `expect`
values are checked independently of it, so regenerating cannot bless a wrong derivation.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
import yaml

from llmperf_hook.errors import ConfigError, LlmperfError
from llmperf_hook.frameworks import explain_json
from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job

GOLDEN = Path(__file__).parent / "explain"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "case.yaml").is_file())
REGEN = os.environ.get("LLMPERF_REGEN_GOLDEN") == "1"


def _load(name: str) -> dict:
    return yaml.safe_load((GOLDEN / name / "case.yaml").read_text())


def _run(case: dict) -> dict:
    overrides = JobOverrides(**case.get("overrides", {}))
    job, cfg = resolve_job(shlex.split(case["command"]), case.get("env", {}), overrides)
    return explain_json(cfg, job)


def test_enough_scenarios() -> None:
    assert len([c for c in CASES if "error" not in _load(c)]) >= 15


@pytest.mark.parametrize("name", CASES)
def test_golden(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case = _load(name)
    monkeypatch.chdir(GOLDEN / name)
    if "error" in case:
        with pytest.raises(LlmperfError) as info:
            _run(case)
        assert info.value.exit_code == 2
        for fragment in case["error"]["contains"]:
            assert fragment in str(info.value), (fragment, str(info.value))
        return
    got = _run(case)
    for key, value in case["expect"].items():
        assert got[key] == value, (key, got[key], value)
    path = GOLDEN / name / "expected.json"
    if REGEN:
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert path.is_file(), f"{path} missing: run with LLMPERF_REGEN_GOLDEN=1 once and review it"
    assert got == json.loads(path.read_text())


def test_error_is_config_error_not_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(GOLDEN / "error-heads-not-divisible-by-tp")
    with pytest.raises(ConfigError):
        _run(_load("error-heads-not-divisible-by-tp"))
