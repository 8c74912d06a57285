"""DeepSpeed ZeRO-3's hooks run on the host beside the pass's kernels (schedule/zero3_hook_overlap.py): a pass lasts
max(GPU time, host issue + hooks), so a GPU-bound model hides them and a host-bound one shows them whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.zero3_hooks import ZERO3_HOOK_S_PER_TENSOR
from llmperf_hook.schedule.compose import PassCost
from llmperf_hook.schedule.zero3_hook_overlap import ZERO3_HOOK_FORWARD_SHARE, hooked_pass, pass_hooks_s

TRAIN = str(Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed" / "train_gpt.py")


def _pass(total_s: float) -> PassCost:
    return PassCost(total_s, total_s, 0.0, {})


def test_gpu_bound_pass_hides_the_hooks() -> None:
    cost = hooked_pass(_pass(10e-3), pass_host_s=3e-3, hooks_s=5e-3, overlap=True)
    assert cost.total_s == pytest.approx(10e-3)
    assert cost.hooks_wait_s == 0.0


def test_host_bound_pass_lasts_issue_plus_hooks() -> None:
    cost = hooked_pass(_pass(10e-3), pass_host_s=8e-3, hooks_s=5e-3, overlap=True)
    assert cost.total_s == pytest.approx(13e-3)
    assert cost.hooks_wait_s == pytest.approx(3e-3)


def test_without_overlap_the_hooks_add() -> None:
    """A CPU device (host_per_op_s 0: the host runs the ops itself), or DeepSpeed before v0.5.5 (every fetch after a
    device synchronize): the hooks come on top."""
    cost = hooked_pass(_pass(10e-3), pass_host_s=0.0, hooks_s=5e-3, overlap=False)
    assert cost.total_s == pytest.approx(15e-3)
    assert cost.hooks_wait_s == pytest.approx(5e-3)


def test_split_between_passes_and_recompute() -> None:
    """The forward carries its cProfile share; the backward the rest, plus the forward's again for what it
    recomputes (the recomputed modules' fetch and release hooks run once more)."""
    fwd, bwd = pass_hooks_s(1.0, False, 0.0), pass_hooks_s(1.0, True, 0.0)
    assert fwd == pytest.approx(ZERO3_HOOK_FORWARD_SHARE)
    assert fwd + bwd == pytest.approx(1.0)
    assert pass_hooks_s(1.0, True, 1.0) == pytest.approx(1.0)
    assert pass_hooks_s(1.0, True, 0.5) == pytest.approx(bwd + 0.5 * fwd)


def _zero3(tmp_path: Path, layers: int, hidden: int, micro: int, heads: int = 16) -> tuple[float, dict[str, float]]:
    ds = tmp_path / "ds3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": micro,
                              "train_batch_size": micro}))
    shape = ["--no-pipeline-parallel", "--num-layers", str(layers), "--hidden-size", str(hidden),
             "--num-attention-heads", str(heads), "--seq-length", "2048", "--max-position-embeddings", "2048",
             "--vocab-size", "32000", "--bf16", "--micro-batch-size", str(micro), "--global-batch-size", str(micro)]
    pred = predict_command(["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(ds), *shape], {},
                           cluster="dgx-h100")
    return pred.estimate.step_time_s, dict(pred.estimate.breakdown)


def test_large_layers_hide_their_hooks_small_ones_do_not(tmp_path: Path) -> None:
    """4 layers: 52 tensors. hidden 8192, micro-batch 8: each layer's GEMMs outlast its hooks (~0.4 ms a tensor),
    nothing shows; hidden 512, micro-batch 1: the GPU idles for almost all of them."""
    big_s, big = _zero3(tmp_path, 4, 8192, 8, heads=64)
    assert big.get("host_zero3_hooks", 0.0) == 0.0
    small_s, small = _zero3(tmp_path, 4, 512, 1, heads=8)
    hooks_s = 52 * ZERO3_HOOK_S_PER_TENSOR
    assert 0.7 * hooks_s < small["host_zero3_hooks"] <= hooks_s
    for step_s, parts in ((big_s, big), (small_s, small)):
        assert sum(parts.values()) == pytest.approx(step_s, rel=1e-6)


def test_releases_whose_fetch_synchronises_add_the_hooks(tmp_path: Path) -> None:
    """DeepSpeed before v0.5.5 (LLMPERF_DEEPSPEED_VERSION=0.4.2, frameworks/deepspeed_release.py): the large model
    whose kernels hide today's hooks shows them whole."""
    ds = tmp_path / "ds3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 8,
                              "train_batch_size": 8}))
    shape = ["--no-pipeline-parallel", "--num-layers", "4", "--hidden-size", "8192", "--num-attention-heads", "64",
             "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size", "32000", "--bf16",
             "--micro-batch-size", "8", "--global-batch-size", "8"]
    argv = ["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(ds), *shape]
    old = predict_command(["env", "LLMPERF_DEEPSPEED_VERSION=0.4.2", *argv], {}, cluster="dgx-h100")
    parts = old.estimate.breakdown
    assert parts["host_zero3_hooks"] == pytest.approx(52 * ZERO3_HOOK_S_PER_TENSOR, rel=1e-6)
    assert sum(parts.values()) == pytest.approx(old.estimate.step_time_s, rel=1e-6)


def _large(tmp_path: Path, zero: dict, gpus: int) -> dict[str, float]:
    """The 4 x 8192 model, micro-batch 8, whose kernels hide today's hooks, with `zero` in zero_optimization."""
    ds = tmp_path / "ds3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3, **zero}, "train_micro_batch_size_per_gpu": 8,
                              "train_batch_size": 8 * gpus}))
    shape = ["--no-pipeline-parallel", "--num-layers", "4", "--hidden-size", "8192", "--num-attention-heads", "64",
             "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size", "32000", "--bf16",
             "--micro-batch-size", "8", "--global-batch-size", str(8 * gpus)]
    pred = predict_command(["deepspeed", "--num_gpus", str(gpus), TRAIN, "--deepspeed_config", str(ds), *shape], {},
                           cluster="dgx-h100")
    assert sum(pred.estimate.breakdown.values()) == pytest.approx(pred.estimate.step_time_s, rel=1e-6)
    return dict(pred.estimate.breakdown)


def test_one_rank_without_overlap_comm_fetches_behind_a_device_synchronize(tmp_path: Path) -> None:
    """overlap_comm false puts the all-gather stream on the default stream (parameter_offload.py:
    `Stream() if overlap_comm else default_stream()`); on one rank every fetch's handle is a NoGatherCoalescedHandle,
    whose wait() synchronises that stream, the compute stream: the host waits for the device at every fetch and the
    hooks add whole. With two ranks the handle waits on NCCL's work (no host wait) and the kernels still hide them."""
    hooks_s = 52 * ZERO3_HOOK_S_PER_TENSOR
    assert _large(tmp_path, {}, 1).get("host_zero3_hooks", 0.0) == 0.0
    assert _large(tmp_path, {"overlap_comm": False}, 1)["host_zero3_hooks"] == pytest.approx(hooks_s, rel=1e-6)
    assert _large(tmp_path, {"overlap_comm": False}, 2).get("host_zero3_hooks", 0.0) == 0.0


def test_only_full_recompute_fetches_again(tmp_path: Path) -> None:
    """Full recompute re-runs the layers' modules, and their fetch hooks, in the backward; selective recompute
    re-runs the core attention, which holds no parameter (Megatron-DeepSpeed --recompute-activations)."""
    from llmperf_hook.api import resolve_command
    from llmperf_hook.schedule.zero3_hook_overlap import recomputed_hook_share

    ds = tmp_path / "ds3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1,
                              "train_batch_size": 1}))
    base = ["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(ds), "--no-pipeline-parallel",
            "--num-layers", "4", "--hidden-size", "512", "--num-attention-heads", "8", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--vocab-size", "32000", "--bf16", "--micro-batch-size", "1",
            "--global-batch-size", "1"]
    shares = {}
    for name, flags in (("none", []), ("selective", ["--recompute-activations"]),
                        ("full", ["--recompute-granularity", "full", "--recompute-method", "uniform",
                                  "--recompute-num-layers", "1"])):
        _, cfg, _, _ = resolve_command([*base, *flags], {}, cluster="dgx-h100")
        assert cfg.recompute.granularity == name
        shares[name] = recomputed_hook_share(cfg, 0.3, 0.6)
    assert shares == {"none": 0.0, "selective": 0.0, "full": pytest.approx(0.5)}


def test_ulysses_ranks_partition_the_parameters_too(tmp_path: Path) -> None:
    """ZeRO-3 partitions over the sequence-data-parallel group under DeepSpeed-Ulysses (modelled as cp): one
    data-parallel rank with sequence parallelism 2 gathers through NCCL, no device synchronise."""
    from dataclasses import replace

    from llmperf_hook.api import resolve_command
    from llmperf_hook.schedule.zero3_hook_overlap import fetch_syncs_device

    ds = tmp_path / "ds3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3, "overlap_comm": False},
                              "train_micro_batch_size_per_gpu": 1, "train_batch_size": 1}))
    _, cfg, _, _ = resolve_command(["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(ds),
                                    "--no-pipeline-parallel", "--num-layers", "2", "--hidden-size", "512",
                                    "--num-attention-heads", "8", "--seq-length", "2048", "--max-position-embeddings",
                                    "2048", "--vocab-size", "32000", "--bf16", "--micro-batch-size", "1",
                                    "--global-batch-size", "1"], {}, cluster="dgx-h100")
    assert fetch_syncs_device(cfg)
    assert not fetch_syncs_device(replace(cfg, parallel=replace(cfg.parallel, cp=2), world_size=2))
    assert not fetch_syncs_device(replace(cfg, optimizer=replace(cfg.optimizer, overlap_grad_reduce=True)))
