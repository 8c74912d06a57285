"""`llmperf predict` on rows of the reference table: the printed verdict and headroom and the --format json memory
fields agree with each other and with the per-term figures the reference tests check (test_memory_reference.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llmperf_hook.cli import main
from llmperf_hook.graph.build import build_graph
from llmperf_hook.report.units import fmt_bytes
from llmperf_hook.schedule.memory import estimate_memory
from tests.schedule.test_memory_reference import CASES, STATE_PARTS, Case, resolve

ROWS = ("gpt175b tp8 pp8 sp sel", "llama3-8b tp1 full", "llama3-8b tp2 cp2 sp distopt", "llama2-7b zero1",
        "llama2-13b zero3", "mixtral zero2")
"""Fitting and non-fitting rows, Megatron and DeepSpeed, a pipeline whose busiest stage is not the last."""


def _cli(case: Case, folder: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    folder.mkdir(parents=True, exist_ok=True)
    if case.ds_config is not None:
        (folder / "ds.json").write_text(json.dumps(case.ds_config))
    if case.hostfile is not None:
        (folder / "hosts").write_text(case.hostfile)
    model = ["--model", case.model] if case.model else []
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with pytest.raises(SystemExit) as ex:
            main(["predict", "--cluster", case.cluster, *model, "--format", fmt, "--", *case.launch.split()])
    finally:
        os.chdir(cwd)
    out, _ = capsys.readouterr()
    return int(ex.value.code or 0), out


@pytest.mark.parametrize("name", ROWS)
def test_predict_json_and_text_memory_agree_with_the_table(name: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in CASES if c.name == name)
    r = resolve(case, tmp_path / "resolve")
    expected = estimate_memory(r.cfg, build_graph(r.cfg, r.cluster), r.cluster)
    code, out = _cli(case, tmp_path / "json", "json", capsys)
    assert code == 0
    mem = json.loads(out)["memory"]
    assert mem["peak_bytes_per_gpu"] == expected.peak_bytes_per_gpu == sum(mem["components"].values())
    assert mem["capacity_bytes"] == r.cluster.gpu.memory_capacity_bytes
    assert mem["headroom_bytes"] == mem["capacity_bytes"] - mem["peak_bytes_per_gpu"]
    allocated = mem["peak_bytes_per_gpu"] - mem["fragmentation_bytes"]  # what must fit (schedule/memory_fit.py)
    assert mem["fits"] is (allocated <= mem["capacity_bytes"]) and mem["tight"] is expected.tight
    # The model states printed are the table's, for the busiest stage.
    states = r.stage_states[mem["stage"]]
    assert all(mem["components"][k] == int(states[k]) for k in STATE_PARTS)

    code, text = _cli(case, tmp_path / "text", "table", capsys)
    short = "headroom" if mem["headroom_bytes"] >= 0 else "short by"
    line = next(x for x in text.splitlines() if x.strip().startswith("memory per GPU"))
    assert f"{fmt_bytes(mem['peak_bytes_per_gpu'])} of {fmt_bytes(mem['capacity_bytes'])}: {mem['verdict']} (" in line
    assert f"({short} {fmt_bytes(abs(mem['headroom_bytes']))}" in line and f"busiest stage {mem['stage']})" in line


def test_the_rows_cover_both_verdicts(tmp_path: Path) -> None:
    verdicts = set()
    for name in ROWS:
        r = resolve(next(c for c in CASES if c.name == name), tmp_path / name.replace(" ", "_"))
        verdicts.add(estimate_memory(r.cfg, build_graph(r.cfg, r.cluster), r.cluster).fits)
    assert verdicts == {True, False}
