"""tune agrees with predict's memory verdict (schedule/memory_fit.py: fits / fits, tight / DOES NOT FIT): a command
predict says fits is never "(no fit)" in tune's table, and never called infeasible, even where it is over tune's own
95 % margin (which still decides what tune lists).

The GPU's capacity is set per test from the command's predicted bytes (an H100 hardware file with
memory_capacity_GiB changed), so each case sits where it is meant to whatever the memory model's numbers are. The rule
(schedule/memory_rule.py) compares the allocated bytes (peak less the allocator's reserve, ~4 % of this peak): tight
and over tune's margin (allocated 97 % of capacity: the peak over it), over a 10 % margin but not tight (allocated
91 %, peak under 96.3 %), within the margin (peak 90 %), beyond (allocated 5 % over capacity).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from llmperf_hook.resources import configs_dir

from .helpers import run_cli

GiB = float(1 << 30)
ARGV = ["torchrun", "--nnodes", "1", "--nproc-per-node", "8", "pretrain_gpt.py",
        "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
        "--max-position-embeddings", "2048", "--tokenizer-type", "GPT2BPETokenizer",
        "--micro-batch-size", "4", "--global-batch-size", "256", "--tensor-model-parallel-size", "2", "--bf16"]
PINNED = ("micro_batch_size: [4]\ntensor_parallel: [2]\npipeline_parallel: [1]\nvirtual_pipeline: [1]\n"
          "context_parallel: [1]\nsequence_parallel: [false]\nrecompute: [none]\ndistributed_optimizer: [false]\n"
          "memory_margin: 0.05\n")
"""A search space of the command's own layout only: nothing but the user's configuration is considered."""


@pytest.fixture
def memory(capsys) -> dict:
    """predict's memory object of ARGV on a DGX H100 (the peak does not depend on the capacity)."""
    code, out, err = run_cli(["predict", "--cluster", "dgx-h100", "--format", "json", "--", *ARGV], capsys)
    assert code == 0, err
    return json.loads(out)["memory"]


def _hardware(tmp_path: Path, capacity_gib: float) -> str:
    raw = yaml.safe_load((configs_dir() / "hardware" / "h100-sxm5-80gb.yaml").read_text())
    raw["memory_capacity_GiB"] = capacity_gib
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _tune(tmp_path: Path, capsys, peak_share: float, memory: dict, *extra: str) -> tuple[int, str, str]:
    """tune ARGV on a GPU whose capacity puts the predicted peak at `peak_share` of it."""
    hw = _hardware(tmp_path, memory["peak_bytes_per_gpu"] / peak_share / GiB)
    return run_cli(["tune", "--cluster", "dgx-h100", "--hardware", hw, "--top", "3", *extra, "--", *ARGV], capsys)


def _allocated(memory: dict) -> float:
    return memory["peak_bytes_per_gpu"] - memory["fragmentation_bytes"]


def _tune_allocated(tmp_path: Path, capsys, share: float, memory: dict, *extra: str) -> tuple[int, str, str]:
    """tune ARGV on a GPU whose capacity puts the allocated bytes (what must fit) at `share` of it."""
    hw = _hardware(tmp_path, _allocated(memory) / share / GiB)
    return run_cli(["tune", "--cluster", "dgx-h100", "--hardware", hw, "--top", "3", *extra, "--", *ARGV], capsys)


def _pinned(tmp_path: Path) -> str:
    (tmp_path / "pin.yaml").write_text(PINNED)
    return str(tmp_path / "pin.yaml")


def _you(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("you  "))


def _adds_up(search: dict) -> None:
    assert search["num_considered"] == (search["num_invalid"] + search["num_oom_estimated"] + search["num_oom_predicted"]
                                        + search["num_over_margin"] + search["num_slower_by_estimate"]
                                        + search["num_fitting"])


def test_a_tight_command_says_fits_tight_not_no_fit(tmp_path: Path, capsys, memory: dict) -> None:
    assert memory["fragmentation_bytes"] > 0 and memory["peak_bytes_per_gpu"] > _allocated(memory) / 0.97
    code, out, err = _tune_allocated(tmp_path, capsys, 0.97, memory)
    assert code == 0, err
    assert _you(out).endswith("(your command)  (fits, tight: over tune's 95 % margin)"), _you(out)
    assert "no fit" not in _you(out)
    assert "1 (your command) fits by predict's verdict but is over tune's margin" in out
    assert "Your command fits, tight by llmperf predict's verdict" in out and "NOT to fit" not in out
    code, out, err = _tune_allocated(tmp_path, capsys, 0.97, memory, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    base = data["baseline"]
    assert (base["fits"], base["tight"], base["verdict"]) == (False, True, "fits, tight")
    # listed rows: their allocated bytes within the margin; a reserve past the GPU makes predict call them tight
    assert data["top"] and all(row["fits"] and row["verdict"] in ("fits", "fits, tight") for row in data["top"])
    assert data["search"]["num_over_margin"] == 1
    _adds_up(data["search"])


def test_over_the_margin_but_not_tight_says_fits(tmp_path: Path, capsys, memory: dict) -> None:
    """Allocated 91 % of the GPU, over a 10 % margin; the peak under 1 / 1.038 of it: not tight."""
    assert memory["peak_bytes_per_gpu"] * 1.038 < _allocated(memory) / 0.91
    (tmp_path / "pin.yaml").write_text(PINNED.replace("memory_margin: 0.05", "memory_margin: 0.10"))
    code, out, err = _tune_allocated(tmp_path, capsys, 0.91, memory, "--search", str(tmp_path / "pin.yaml"))
    assert code == 0, err
    assert _you(out).endswith("(your command)  (fits: over tune's 90 % margin)"), _you(out)
    assert "Your command fits by llmperf predict's verdict" in out


def test_a_command_within_the_margin_fits(tmp_path: Path, capsys, memory: dict) -> None:
    code, out, err = _tune(tmp_path, capsys, 0.90, memory, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    base = data["baseline"]
    assert (base["fits"], base["tight"], base["verdict"]) == (True, False, "fits")
    assert data["search"]["num_over_margin"] == 0
    _adds_up(data["search"])
    code, out, err = _tune(tmp_path, capsys, 0.90, memory)
    assert code == 0 and _you(out).endswith("(your command)"), _you(out)


def test_a_command_beyond_capacity_does_not_fit(tmp_path: Path, capsys, memory: dict) -> None:
    code, out, err = _tune_allocated(tmp_path, capsys, 1.05, memory, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    base = data["baseline"]
    assert (base["fits"], base["tight"], base["verdict"]) == (False, False, "DOES NOT FIT")
    assert data["search"]["num_over_margin"] == 0
    code, out, err = _tune_allocated(tmp_path, capsys, 1.05, memory)
    assert _you(out).endswith("(your command)  (no fit)") and "NOT to fit" in out


def test_only_the_tight_command_is_shown_exit_0_not_infeasible(tmp_path: Path, capsys, memory: dict) -> None:
    """Nothing passes the margin, but the user's command fits, tight: predict says it runs, so no exit 3, and it is
    not counted out of memory."""
    code, out, err = _tune_allocated(tmp_path, capsys, 0.97, memory, "--search", _pinned(tmp_path))
    assert code == 0, err
    assert "0 out of memory" in out and "1 (your command) fits by predict's verdict" in out
    assert "nothing fits tune's 95 % margin. Your command fits, tight" in out
    assert _you(out).endswith("(fits, tight: over tune's 95 % margin)")
    code, out, err = _tune_allocated(tmp_path, capsys, 0.97, memory, "--search", _pinned(tmp_path), "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["top"] == [] and data["baseline"]["verdict"] == "fits, tight"
    assert (data["search"]["num_oom_estimated"], data["search"]["num_oom_predicted"]) == (0, 0)
    assert data["search"]["num_over_margin"] == 1
    _adds_up(data["search"])


def test_apply_with_only_the_tight_command_exits_3_saying_it_fits(tmp_path: Path, capsys, memory: dict) -> None:
    """--apply has nothing within the margin to launch (exit 3), but the message says the command itself fits."""
    code, out, err = _tune_allocated(tmp_path, capsys, 0.97, memory, "--search", _pinned(tmp_path), "--apply",
                                     "--dry-run")
    assert code == 3
    assert "nothing fits tune's 95 % margin, so --apply has nothing to launch" in err
    assert "Your command fits, tight by llmperf predict's verdict" in err
    assert "0 are predicted out of memory" in err


def test_nothing_fitting_at_all_still_exits_3(tmp_path: Path, capsys, memory: dict) -> None:
    code, out, err = _tune_allocated(tmp_path, capsys, 1.05, memory, "--search", _pinned(tmp_path), "--format", "json")
    assert code == 3
    data = json.loads(out)
    assert data["error"].startswith("nothing fits: ") and "Your command fits" not in data["error"]
    assert data["search"]["num_over_margin"] == 0 and data["search"]["num_oom_estimated"] + \
        data["search"]["num_oom_predicted"] == 1


def test_a_listed_row_within_a_smaller_margin_can_be_tight(tmp_path: Path, capsys, memory: dict) -> None:
    """--search memory_margin 0.01 admits allocated bytes at 97 % of capacity: listed, and still called tight
    (the peak is over the GPU)."""
    (tmp_path / "pin.yaml").write_text(PINNED.replace("memory_margin: 0.05", "memory_margin: 0.01"))
    code, out, err = _tune_allocated(tmp_path, capsys, 0.97, memory, "--search", str(tmp_path / "pin.yaml"))
    assert code == 0, err
    assert _you(out).endswith("(your command)  (fits, tight)"), _you(out)
    row = next(ln for ln in out.splitlines() if ln.startswith("  1  "))
    assert row.endswith("(same as yours)  (fits, tight)"), row
