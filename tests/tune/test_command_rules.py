"""Rules of flags the TrainingConfig does not carry, read from the command's script words (tune/command_rules.py):
tune listed layouts whose --apply command Megatron refuses (explain exits 2, or the job dies at a ramp-up step)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.tune.candidates import generate_candidates
from llmperf_hook.frameworks.megatron_rampup import rampup_divisor
from llmperf_hook.tune.command_rules import RAMPUP_RULE, command_rule_masks
from llmperf_hook.tune.search_space import load_search_space

from .helpers import run_cli, tune_apply_json

GPT = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size",
       "2048", "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
       "--vocab-size", "50257", "--micro-batch-size", "1", "--global-batch-size", "256",
       "--tensor-model-parallel-size", "2", "--bf16", "--train-samples", "100000"]


def _masks(extra: list[str]):
    job, cfg = resolve_job([*GPT, *extra], {})
    table = generate_candidates(cfg, load_search_space(None, "megatron"), 8)
    cols = table.columns
    dp = np.maximum(cfg.world_size // (cols["tp"] * cols["pp"] * cols["cp"]), 1)
    return cols, dp, command_rule_masks(cfg, job.script_args)(cols)


@pytest.mark.parametrize("start, increment, samples, divisor", [(16, 16, 1000, 16), (32, 8, 1000, 8),
                                                                   (128, 64, 32, 128)])
def test_every_ramp_up_batch_must_divide_by_micro_batch_times_dp(start: int, increment: int, samples: int,
                                                                  divisor: int) -> None:
    """Each step's global batch must divide by micro-batch x DP. Explain checks START only; (32, 8) with
    micro-batch x DP 16 passes it and dies at the second ramp size (batch 40). (128, 64) over 32 samples jumps from
    128 to the global 256 at the second step, so an increment that micro-batch x DP does not divide is accepted."""
    cols, dp, masks = _masks(["--rampup-batch-size", str(start), str(increment), str(samples)])
    step = cols["mbs"] * dp
    expected = divisor % step != 0
    tiles = dp * cols["tp"] * cols["pp"] * cols["cp"] == 16
    assert np.array_equal(masks[RAMPUP_RULE] & tiles, expected & tiles) and (expected & tiles).any()
    assert (~expected & tiles & (increment % step != 0)).any() == (divisor != math.gcd(start, increment))


def _megatron_calculator():
    """megatron-core's num_microbatches_calculator.py, loaded from its file (the package imports torch)."""
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron-core is not installed")
    path = Path(spec.submodule_search_locations[0]) / "core" / "num_microbatches_calculator.py"
    module_spec = importlib.util.spec_from_file_location("num_microbatches_calculator", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.RampupBatchsizeNumMicroBatchesCalculator


@pytest.mark.parametrize("start, increment, samples, global_batch", [
    (32, 32, 1953125, 1536), (16, 16, 1000, 256), (32, 8, 1000, 256), (128, 64, 32, 256), (8, 4, 8, 16),
    (3, 6, 50, 63), (64, 12, 100000, 76), (1, 1, 2000, 4096), (24, 16, 333, 600)])
def test_divisor_is_that_of_the_batches_megatron_runs(start: int, increment: int, samples: int,
                                                       global_batch: int) -> None:
    """Megatron's own calculator, stepped as train() steps it (consumed samples grow by each step's batch until the
    global batch): the greatest common divisor of the batches below the global one."""
    calc = _megatron_calculator()(global_batch, 1, 1, False, 1, start, increment, samples)
    divisor, consumed = 0, 0
    while True:
        calc.update(consumed, consistency_check=True)
        batch = calc.get_current_global_batch_size()
        if batch == global_batch:
            break
        divisor, consumed = math.gcd(divisor, batch), consumed + batch
    assert rampup_divisor([str(start), str(increment), str(samples)], global_batch) == divisor


def test_no_rule_when_megatron_rounds_the_batch_down_or_without_a_ramp() -> None:
    assert RAMPUP_RULE not in _masks(["--rampup-batch-size", "16", "16", "1000", "--decrease-batch-size-if-needed"])[2]
    assert _masks([])[2] == {}


def test_the_applied_command_is_accepted_by_explain(tmp_path: Path, capsys) -> None:
    """Without the rule the best was 'tp1 pp1 mbs16', refused (16 % (16 x 16))."""
    space = {"micro_batch_size": [1, 2, 4, 16], "tensor_parallel": [1, 2], "pipeline_parallel": [1],
             "context_parallel": [1], "recompute": ["none"]}
    code, out, err = tune_apply_json(tmp_path, capsys, space, [*GPT, "--rampup-batch-size", "16", "16", "1000"])
    assert code == 0, err
    data = json.loads(out)
    assert data["search"]["invalid_by_rule"].get(RAMPUP_RULE, 0) > 0
    code, _, err = run_cli(["explain", "--", *data["applied"]["argv"]], capsys)
    assert code == 0, err


def test_kept_sizes_hold_the_layout_as_explain_does() -> None:
    """--hierarchical-context-parallel-sizes 2 2 (validate_args: CP == their product) and
    --tensor-parallel-num-weight-shards 4 (resolve_tensor_parallel_weight_shards: >= TP and a multiple of it; the world
    divides by TP x PP x CP x shards / TP): explain refuses the other layouts (megatron_validate_args), and tune had no
    rule for either, so --apply could write a command explain refuses (H212)."""
    from llmperf_hook.tune.command_rules import HIERARCHICAL_CP_RULE, WEIGHT_SHARDS_RULE

    from .helpers import gpt_config

    cfg = gpt_config(layers=8, hidden=1024, heads=16, world=16, tp=1, pp=1, gbs=64, recompute="none")
    cols = {"tp": np.array([1, 2, 4, 8, 4]), "pp": np.ones(5, dtype=int), "cp": np.array([4, 4, 2, 1, 1]),
            "mbs": np.ones(5, dtype=int), "vpp": np.ones(5, dtype=int), "sp": np.zeros(5, dtype=int)}
    masks = command_rule_masks(cfg, ["--hierarchical-context-parallel-sizes", "2", "2",
                                     "--tensor-parallel-num-weight-shards", "4"])(cols)
    assert masks[HIERARCHICAL_CP_RULE].tolist() == [False, False, True, True, True]
    # tp 1: 4 shards per rank, dp 4 splits; tp 2: 2 per rank, dp 2; tp 4: plain TP; tp 8: fewer shards than TP
    assert masks[WEIGHT_SHARDS_RULE].tolist() == [False, False, False, True, False]
