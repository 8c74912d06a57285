"""`--search FILE` narrows: a knob given as an explicit list is searched as given. The command's own
micro-batch size and recompute mode used to join every cross product (so `recompute: [full]` still ranked
`rc:none` rows, combined with knobs the user's command does not have); only the command itself may appear,
as one candidate, marked "(same as yours)"."""

from __future__ import annotations

import json

from llmperf_hook.tune.candidates import generate_candidates, knob_values
from llmperf_hook.tune.search_space import parse_search_space

from .helpers import gpt_config, run_cli

MEGATRON = [
    "torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32",
    "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "4096", "--max-position-embeddings",
    "4096", "--micro-batch-size", "1", "--global-batch-size", "512", "--tensor-model-parallel-size", "4",
    "--pipeline-model-parallel-size", "2", "--bf16", "--vocab-size", "32000",
]


def _is_users(row: dict) -> bool:
    return not row["changes"]


def test_explicit_lists_are_searched_as_given(tmp_path, capsys) -> None:
    (tmp_path / "s.yaml").write_text("micro_batch_size: [4]\nrecompute: [full]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "10", "--format", "json",
                              "--search", str(tmp_path / "s.yaml"), "--", *MEGATRON], capsys)
    assert code == 0, err
    rows = [r for r in json.loads(out)["top"] if not _is_users(r)]
    assert len(rows) == 10
    assert {r["micro_batch_size"] for r in rows} == {4}
    assert {r["recompute"] for r in rows} == {"full"}


def test_auto_micro_batch_still_adds_the_commands_own() -> None:
    cfg = gpt_config(layers=24, hidden=2048, heads=16, world=8, tp=1, pp=1, mbs=3, gbs=48)
    auto = knob_values(cfg, parse_search_space({"max_micro_batch_size": 4}, "t"), 8)
    assert auto["mbs"] == [1, 2, 3, 4]
    listed = knob_values(cfg, parse_search_space({"micro_batch_size": [2, 4]}, "t"), 8)
    assert listed["mbs"] == [2, 4]


def test_own_recompute_joins_only_when_its_mode_is_searched() -> None:
    cfg = gpt_config(layers=24, hidden=2048, heads=16, world=8, tp=1, pp=1, mbs=1, gbs=48, recompute="full")
    only_none = generate_candidates(cfg, parse_search_space({"recompute": ["none"], "micro_batch_size": [2]}, "t"), 8)
    rows = [only_none.candidate(i) for i in range(len(only_none))]
    # the command itself (full recompute, mbs 1) is the one full-recompute row
    assert [(c.recompute, c.micro_batch_size) for c in rows if c.recompute != "none"] == [("full", 1)]
    with_full = generate_candidates(cfg, parse_search_space({"recompute": ["full"], "micro_batch_size": [2]}, "t"), 8)
    assert {with_full.candidate(i).recompute for i in range(len(with_full))} == {"full"}
