"""--num-distributed-optimizer-instances N: Megatron-core's initialize_model_parallel asserts that N divides the
data-parallel x context-parallel size ('Data parallel size should be divisible by partial DistOpt shard factor') and
the expert data-parallel size, world / (expert TP x EP x PP) ('Expert data parallel size should be divisible by
partial DistOpt shard factor'), parallel_state.py core_v0.16.1 and HEAD. --apply keeps the flag, so tune must not
propose a layout that breaks either."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from script_module import load_script

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.tune.candidates import generate_candidates, rule_masks
from llmperf_hook.tune.search_space import load_search_space

from .helpers import rule_rejected, tune_apply_json

# bench_tune's Llama-3 8B on 64 GPUs: TP 4 -> DP 16, four distributed-optimizer instances of 4 ranks each.
LLAMA3_8B_64 = [*load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "bench_tune.py").LLAMA3_8B_64,
                "--use-distributed-optimizer", "--num-distributed-optimizer-instances", "4"]
RULE = "dp*cp or expert dp % --num-distributed-optimizer-instances != 0"


def _table(argv: list[str]):
    cfg = resolve_job(argv, {})[1]
    return cfg, generate_candidates(cfg, load_search_space(None, "megatron"), 8)


def test_layouts_whose_data_parallel_size_n_does_not_divide_are_rejected() -> None:
    cfg, table = _table(LLAMA3_8B_64)
    cols = table.columns
    dp_cp = cfg.world_size // (cols["tp"] * cols["pp"])  # dp x cp = world / (tp x pp)
    expert_dp = cfg.world_size // (cols["etp"] * cols["ep"] * cols["pp"])
    breaks = (dp_cp % 4 != 0) | (expert_dp % 4 != 0)
    tiles = cfg.world_size % (cols["tp"] * cols["pp"] * cols["cp"]) == 0
    assert (breaks & tiles).any() and (~breaks & tiles).any()  # the space holds both kinds
    masks = rule_masks(cfg, cols)
    assert np.array_equal(masks[RULE] & tiles, breaks & tiles)
    assert (~rule_rejected(cfg, table) & tiles).any()  # the command's own layout and others stay possible


def test_no_rule_without_the_flag() -> None:
    cfg, table = _table(LLAMA3_8B_64[:-2])
    assert RULE not in rule_masks(cfg, table.columns)


NEEDS_DISTOPT = "--num-distributed-optimizer-instances > 1 needs the distributed optimizer"


def test_candidates_that_drop_the_distributed_optimizer_are_rejected() -> None:
    """DistributedDataParallel asserts 'Partial DistOpt cannot be used without DistOpt' and explain exits 2
    (megatron_validate_args._check_distopt_instances): --apply keeps the instances flag, so a candidate that drops
    --use-distributed-optimizer was listed (1.14x faster) and its command refused."""
    cfg, table = _table(LLAMA3_8B_64)
    masks = rule_masks(cfg, table.columns)
    assert np.array_equal(masks[NEEDS_DISTOPT], table.columns["distopt"] == 0)
    assert (table.columns["distopt"] == 0).any()  # the default space tries it off


def test_tune_never_proposes_it(tmp_path: Path, capsys) -> None:
    """Narrowed to the distributed optimizer off, only the command's own layout is left (it always competes)."""
    code, out, err = tune_apply_json(tmp_path, capsys, {"distributed_optimizer": [False], "tensor_parallel": [4],
                                                        "pipeline_parallel": [1], "context_parallel": [1],
                                                        "recompute": ["none"]}, LLAMA3_8B_64[:-1] + ["2"])
    assert code == 0, err
    data = json.loads(out)
    assert data["search"]["invalid_by_rule"].get(NEEDS_DISTOPT, 0) > 0, data["search"]
    assert all(row["distributed_optimizer"] for row in data["top"]), data["top"]
    assert "--use-distributed-optimizer" in data["applied"]["argv"]
