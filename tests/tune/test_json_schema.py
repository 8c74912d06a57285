"""`tune --format json` keeps one schema (tune/render.py's docstring): each kind of object a run can print has the keys
pinned here, so a key that is renamed or dropped fails a test (raise render.JSON_SCHEMA with it). Every object carries
`schema`; every one of a run that exits non-zero carries `error` and `exit_code` (exit 2 after a search, an --apply
refused on a launch script, printed the result object with neither)."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.tune.render import JSON_SCHEMA

from .helpers import run_cli
from .test_apply_launch_script import FORWARDING, SPACE
from .test_tune_command import SMALL_MEGATRON

RESULT = {"schema", "job", "cluster", "search_space", "knobs", "search", "baseline", "top", "speedup_over_baseline",
          "applied"}
ROW = {"tp", "pp", "vpp", "cp", "sequence_parallel", "micro_batch_size", "recompute", "recompute_num_layers",
       "distributed_optimizer", "zero_stage", "ep", "etp", "layout", "step_time_s", "tokens_per_s", "mfu",
       "peak_bytes_per_gpu", "capacity_bytes", "headroom_bytes", "fits", "host_bytes_per_node", "host_fits",
       "tight", "verdict"}
SEARCH = {"num_generated", "num_considered", "num_invalid", "invalid_by_rule", "num_oom_estimated", "num_oom_predicted",
          "num_oom_host", "num_oom_elastic_minimum", "num_over_margin", "host_capacity_bytes", "num_slower_by_estimate",
          "num_fitting", "num_full_predictions",
          "memory_margin", "elapsed_s", "candidates_per_s"}
NEAREST = {"layout", "peak_bytes", "must_fit_bytes", "host_bytes_per_node", "short_of", "short_bytes",
           "layers_that_fit", "layers_that_fit_means", "seq_length_that_fits"}
GPT3_ON_8 = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "96", "--hidden-size", "12288",
             "--num-attention-heads", "96", "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size",
             "50257", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16"]


def _tune(capsys, *args: str) -> tuple[int, dict]:
    code, out, _ = run_cli(["tune", "--cluster", "dgx-a100", "--format", "json", *args], capsys)
    return code, json.loads(out)


def test_result_object(tmp_path: Path, capsys) -> None:
    (tmp_path / "s.yaml").write_text("micro_batch_size: [1, 2]\nrecompute: [full]\ncontext_parallel: [1]\n")
    code, data = _tune(capsys, "--search", str(tmp_path / "s.yaml"), "--apply", "--dry-run", "--", *SMALL_MEGATRON)
    assert code == 0 and set(data) == RESULT and data["schema"] == JSON_SCHEMA
    assert set(data["search"]) == SEARCH and set(data["knobs"]) == {"searched", "kept", "rules"}
    assert set(data["baseline"]) == ROW and all(set(row) == ROW | {"changes"} for row in data["top"])
    assert all(set(c) == {"where", "key", "old", "new"} for row in data["top"] for c in row["changes"])
    assert set(data["applied"]) == {"argv", "new_files"}
    # on a GPU headroom_bytes is predict's: the capacity less the peak (the allocator's reserve included)
    assert all(row["headroom_bytes"] == row["capacity_bytes"] - row["peak_bytes_per_gpu"]
               for row in (data["baseline"], *data["top"]))


def test_bad_input_object(capsys) -> None:
    code, data = _tune(capsys, "--top", "x", "--", *SMALL_MEGATRON)
    assert code == 2 and data == {"schema": JSON_SCHEMA, "error": data["error"], "exit_code": 2}


def test_nothing_fits_object(capsys) -> None:
    code, data = _tune(capsys, "--", *GPT3_ON_8)
    assert code == 3 and set(data) == {"schema", "error", "exit_code", "fits", "header", "knobs", "search", "nearest"}
    assert data["schema"] == JSON_SCHEMA and data["exit_code"] == 3 and data["fits"] is False
    assert set(data["search"]) == SEARCH and set(data["nearest"]) == NEAREST


def test_refused_apply_object_says_why(tmp_path: Path, capsys, monkeypatch) -> None:
    """The script does not pass "$@" on: exit 2 with the result (the changes to make by hand) and the reason."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(FORWARDING.format(extra="").replace(' "$@"', ""))
    (tmp_path / "s.yaml").write_text(SPACE)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--search", "s.yaml", "--apply",
                              "--dry-run", "--", "bash", "train.sh"], capsys)
    data = json.loads(out)
    assert code == 2 and set(data) == RESULT | {"error", "exit_code"} and data["exit_code"] == 2
    assert data["applied"] is None and '"$@"' in data["error"] and data["error"] in err
