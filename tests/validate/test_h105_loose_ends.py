"""`validate` loose ends: a derived cluster is reported by what it is, not by the path of a file in a deleted
temporary folder; `position_embedding` takes Megatron-LM's --position-embedding-type choices and passes them on;
docs/validate.md lists for each word column exactly what the reader accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

import pytest
from click.testing import CliRunner

from llmperf_hook.commands.validate import command
from llmperf_hook.errors import UsageError
from llmperf_hook.validate import runner
from llmperf_hook.validate.launch_command import build_launch_plan
from llmperf_hook.validate.measured_run import (NO_WORDS, POSITION_EMBEDDING_CHOICES, YES_WORDS, parse_recompute,
                                                parse_zero)
from llmperf_hook.validate.runner import PredictedStep
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW, write_csv

DOC = Path(__file__).resolve().parents[2] / "docs" / "validate.md"
MEGATRON = "git --git-dir=/work/.mirror/NVIDIA+Megatron-LM/repo"


def _fake(argv: Sequence[str], cluster: str) -> PredictedStep:
    return PredictedStep(step_time_s=2.0, fits=True)


def test_a_derived_cluster_is_named_by_what_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  clusters_dir: Path) -> None:
    """A 100 Gb/s x4 network matches no preset: the row runs on a cluster derived from dgx-a100, written into
    validate's temporary folder. The JSON used to carry that file's path, gone once the report was printed."""
    monkeypatch.setattr(runner, "predict_with_api", _fake)
    monkeypatch.setattr("llmperf_hook.resources.configs_dir", lambda: clusters_dir.parent)
    path = write_csv(tmp_path / "runs.csv", [{**BASE_ROW, "inter_node_network": "4x 100Gb/s per node"}])
    out = CliRunner().invoke(command, [str(path), "--format", "json"])
    assert out.exit_code == 0, out.output
    cluster = json.loads(out.stdout)["rows"][0]["cluster"]
    assert "derived from preset" in cluster and "6.25 GB/s per GPU" in cluster and "--write-batch" in cluster
    assert not re.search(r"/\S+\.yaml", cluster)
    batch = CliRunner().invoke(command, [str(path), "--format", "json", "--write-batch", str(tmp_path / "b")])
    assert batch.exit_code == 0 and list((tmp_path / "b").glob("cluster-*.yaml"))


@pytest.mark.parametrize("cell", ["yarn", "MRoPE", "none", "relative", "rope"])
def test_position_embedding_takes_megatron_choices_and_passes_them_on(cell: str, tmp_path: Path) -> None:
    run = build_measured_run({**BASE_ROW, "position_embedding": cell}, 1)
    argv = build_launch_plan(run, tmp_path).argv
    assert argv[argv.index("--position-embedding-type") + 1] == cell.lower()


def test_position_embedding_default_and_refusal_list_the_choices(tmp_path: Path) -> None:
    argv = build_launch_plan(build_measured_run({**BASE_ROW, "position_embedding": ""}, 1), tmp_path).argv
    assert "--position-embedding-type" not in argv
    with pytest.raises(UsageError, match="learned_absolute, rope, yarn, mrope, relative, none"):
        build_measured_run({**BASE_ROW, "position_embedding": "alibi"}, 1)


def test_choices_are_megatrons() -> None:
    """The choices of --position-embedding-type in the Megatron-LM mirror's arguments.py."""
    import subprocess

    text = subprocess.run(f"{MEGATRON} show HEAD:megatron/training/arguments.py", shell=True, capture_output=True,
                          text=True).stdout
    if not text:
        pytest.skip("no Megatron-LM mirror")
    match = re.search(r"'--position-embedding-type'.*?choices=\[([^\]]*)\]", text, re.S)
    assert match and tuple(re.findall(r"'(\w+)'", match.group(1))) == POSITION_EMBEDDING_CHOICES


def _doc_row(column: str) -> str:
    row = next(line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith(f"| `{column}` |"))
    return row.split("|")[3]


def test_the_doc_lists_what_the_reader_accepts() -> None:
    """Every word the doc names for a word column is read as the doc says, and every word the reader accepts is
    named (a doc that promised `rope` only, or left out `dist_opt`, was wrong)."""
    switch = _doc_row("sequence_parallel")
    assert all(re.search(rf"\b{re.escape(w)}\b", switch) for w in YES_WORDS + NO_WORDS)
    assert all(re.search(rf"\b{c}\b", _doc_row("position_embedding")) for c in POSITION_EMBEDDING_CHOICES)
    for word in re.findall(r"\w+", _doc_row("recompute")):
        parse_recompute(word, "doc")
    zero = _doc_row("zero_stage_or_dist_opt")
    for spelling in ("zero0", "zero3", "ZeRO-3", "zero stage 2", "distributed optimizer", "dist_opt", "none", "off"):
        assert spelling in zero
        parse_zero(spelling, "doc")


def test_a_rows_ds_config_is_named_and_given_not_left_as_a_deleted_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        clusters_dir: Path) -> None:
    """A DeepSpeed row's command named the ds_config validate wrote into its temporary folder, gone once the report
    was printed: the command now names the file, and the row's notes give its content."""
    monkeypatch.setattr(runner, "predict_with_api", _fake)
    monkeypatch.setattr("llmperf_hook.resources.configs_dir", lambda: clusters_dir.parent)
    path = write_csv(tmp_path / "runs.csv", [{**BASE_ROW, "framework": "Megatron-DeepSpeed",
                                              "zero_stage_or_dist_opt": "zero1"}])
    out = CliRunner().invoke(command, [str(path), "--format", "json"])
    assert out.exit_code == 0, out.output
    row = json.loads(out.stdout)["rows"][0]
    name = row["command"].split("--deepspeed_config ")[1].split()[0]
    assert re.fullmatch(r"ds_config-[0-9a-f]+\.json", name), row["command"]
    note = next(n for n in row["notes"] if n.startswith(name))
    config = json.loads(note.split(": ", 1)[1])
    assert config["zero_optimization"] == {"stage": 1} and config["train_batch_size"] == 64
