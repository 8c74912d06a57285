"""OpenRLHF trainers (`deepspeed --module openrlhf.cli.train_sft ...`): DeepspeedStrategy builds the ds_config from the
script's own flags, so tune --apply rewrites those flags; the table named every row "(same as yours)" and --apply
left the command unchanged while the rows differed in micro batch and ZeRO stage."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.tune.apply import plan_tuned_command
from llmperf_hook.tune.candidate import apply_candidate, candidate_of

from .helpers import run_cli

CASE = Path(__file__).parents[1] / "frameworks" / "real_scripts" / "cases" / "openrlhf_sft_llama3_8b.json"
SFT = json.loads(CASE.read_text())["argv"]  # OpenRLHF examples/scripts/train_sft_llama.sh, as the script runs it
OPTIONS = ["--model", "llama3-8b", "--nproc-per-node", "8"]
OVERRIDES = JobOverrides(model="llama3-8b", nproc_per_node=8)


def _explain(argv: list[str], capsys) -> dict:
    code, out, err = run_cli(["explain", "--format", "json", *OPTIONS, "--", *argv], capsys)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("micro, stage, recompute", [(8, 1, "full"), (2, 3, "none"), (16, 2, "full"), (2, 2, "full")])
def test_a_planned_openrlhf_command_resolves_to_the_candidate(micro: int, stage: int, recompute: str) -> None:
    _, cfg = resolve_job(SFT, {}, OVERRIDES)
    new = replace(candidate_of(cfg), micro_batch_size=micro, zero_stage=stage, recompute=recompute,
                  recompute_num_layers=1 if recompute == "full" else None)
    plan = plan_tuned_command(SFT, cfg, new, apply_candidate(cfg, new))
    assert not plan.new_files  # no ds_config file: the flags are the config
    _, again = resolve_job(list(plan.argv), {}, OVERRIDES)
    assert candidate_of(again) == new
    assert (again.batch.global_batch_size, again.batch.num_microbatches) == (256, 256 // (micro * 8))
    if new == candidate_of(cfg):  # the user's own layout: the command is left exactly as written
        assert list(plan.argv) == SFT and not plan.notes
    else:
        assert any("OpenRLHF flags" in note for note in plan.notes)


def test_only_the_flags_that_change_are_touched() -> None:
    # --zero_stage absent: the script's default (2) is what runs, so a ZeRO-2 candidate adds no --zero_stage.
    k = SFT.index("--zero_stage")
    argv = SFT[:k] + SFT[k + 2:]
    _, cfg = resolve_job(argv, {}, OVERRIDES)
    assert cfg.optimizer.zero_stage == 2
    new = replace(candidate_of(cfg), micro_batch_size=4)
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new))
    m = argv.index("--micro_train_batch_size") + 1
    assert list(plan.argv) == [*argv[:m], "4", *argv[m + 1:]]


def test_tune_table_and_apply_on_an_openrlhf_command(capsys) -> None:
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", *OPTIONS, "--format", "json", "--apply", "--dry-run",
                              "--", *SFT], capsys)
    assert code == 0, err
    data = json.loads(out)
    base = data["baseline"]
    for row in data["top"]:
        moved = (row["micro_batch_size"], row["zero_stage"]) != (base["micro_batch_size"], base["zero_stage"])
        keys = {c["key"] for c in row["changes"]}
        assert bool(keys) == moved, row  # a differing row lists its flags; the user's own layout lists none
        assert keys <= {"--micro_train_batch_size", "--zero_stage"}
    best = data["top"][0]
    resolved = _explain(data["applied"]["argv"], capsys)
    assert (resolved["micro_batch_size"], resolved["zero_stage"], resolved["global_batch_size"]) == (
        best["micro_batch_size"], best["zero_stage"], 256)


def _evaluated(candidate, cfg):
    from types import SimpleNamespace

    from llmperf_hook.tune.search import Evaluated

    return Evaluated(candidate, cfg, SimpleNamespace(tokens_per_s=1.0, mfu=0.5), 1.0, float(1 << 30), float(80 << 30),
                     True)


def test_a_differing_row_with_no_change_is_not_called_the_same() -> None:
    """The label compares layouts, not only the rewritten command: a row whose layout differs while no flag or
    ds_config key changed says --apply cannot express it."""
    from llmperf_hook.tune.render import render_table
    from llmperf_hook.tune.search import TuneResult

    from .helpers import gpt_config

    cfg = gpt_config(world=8, tp=1, pp=1, gbs=64, framework="deepspeed")
    mine, other = candidate_of(cfg), replace(candidate_of(cfg), micro_batch_size=2)
    res = TuneResult(top=(_evaluated(mine, cfg), _evaluated(other, cfg)), baseline=_evaluated(mine, cfg),
                     num_generated=2, num_considered=2, invalid_by_rule={}, num_oom_estimated=0, num_oom_predicted=0,
                     num_slower=0, num_full_predictions=2, num_fitting=2, memory_margin=0.05)
    table = render_table(res, [[], []], {"job": "j", "cluster": "c", "space": "s", "elapsed_s": 1.0,
                                         "capacity_bytes": 80 << 30})
    rows = [ln for ln in table.splitlines() if ln.startswith(("  1", "  2"))]
    assert "(same as yours)" in rows[0]
    assert "(same as yours)" not in rows[1] and "no flag or ds_config key" in rows[1]
