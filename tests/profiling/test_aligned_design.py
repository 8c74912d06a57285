"""The plan's power-of-two GEMM shapes (plan.aligned_specs): models run their hidden, FFN and head sizes, where the
design's multiples of 8 almost never land, and the bf16 GEMM backward is 2x slower at k = 256 or 512 on an AVX2 CPU
thread (plan.ALIGNED_CLASSES)."""

from __future__ import annotations

import math

from llmperf_hook.profile import plan


def test_aligned_shapes_are_powers_of_two_within_range_cheapest_first() -> None:
    specs = plan.aligned_specs(plan.CPU_DEFAULT_OPS, plan.CPU_RANGES)
    assert specs and {s.op_class for s in specs} == {"gemm"} and {s.origin for s in specs} == {"aligned"}
    for s in specs:
        for key, value in s.dims.items():
            lo, hi = plan.CPU_RANGES["gemm"][key]
            assert lo <= value <= hi and math.log2(value).is_integer(), (key, value)
    bwd = [math.prod(s.dims.values()) for s in specs if s.phase == "bwd"]
    assert bwd == sorted(bwd) and len(bwd) == len({tuple(sorted(s.dims.items())) for s in specs if s.phase == "bwd"})


def test_the_design_an_earlier_profile_stored_is_unchanged() -> None:
    """gelu_exact comes last and the aligned shapes draw from their own stream: the design's points of the classes
    an earlier profile sampled are the same, so a top-up measures only what is new."""
    before = plan.design_specs(plan.CPU_DEFAULT_OPS[:-1], plan.CPU_RANGES, 32)
    now = plan.design_specs(plan.CPU_DEFAULT_OPS, plan.CPU_RANGES, 32)
    assert plan.CPU_DEFAULT_OPS[-1] == "gelu_exact"
    assert [s for s in now if s.op_class != "gelu_exact"] == before


def test_classes_without_an_aligned_design_get_none() -> None:
    assert plan.aligned_specs(("layernorm", "gelu"), plan.CPU_RANGES) == []


def test_adaptive_rounds_sample_only_the_classes_asked_for(monkeypatch) -> None:
    """A top-up `--ops gelu_exact` of a stored profile spent its time left on every other class's adaptive shapes,
    whose new samples then cost those dtypes their framework cost (profile_fit.framework_file_after_refit)."""
    import time
    from types import SimpleNamespace

    from llmperf_hook.profile import sampler

    seen: list[set] = []
    stored = {("gemm", "fwd", "fp32"): object(), ("gelu_exact", "fwd", "fp32"): object()}
    monkeypatch.setattr(sampler, "_samples_by_class", lambda *a, **k: dict(stored))
    monkeypatch.setattr(sampler, "_done_keys", lambda *a, **k: set())
    monkeypatch.setattr(sampler, "_adaptive_specs", lambda groups, *a, **k: seen.append(set(groups)) or [])
    deadline = SimpleNamespace(now_s=lambda: time.perf_counter() + 60.0)
    req = sampler.ProfileRequest(dtype="fp32", ops=("gelu_exact",))
    assert sampler._adaptive_rounds(None, req, "x", None, "fp", deadline, None, ("gelu_exact",)) == 0
    assert seen == [{("gelu_exact", "fwd", "fp32")}]


def test_a_for_plan_measures_the_job_first_and_the_aligned_shapes_last() -> None:
    """The power-of-two GEMMs come after the job's own shapes and the whole design: a short --budget is spent on
    the job first, and the slowest aligned shape (bf16 bwd m4096 n2048 k512: 37 s a call here) comes last."""
    from llmperf_hook.profile.features import RooflineConstants
    from llmperf_hook.profile.sampler import ProfileRequest, _specs

    argv = ("torchrun --nproc-per-node 1 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
            "--seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 --global-batch-size 8 "
            "--vocab-size 1000").split()
    specs = _specs(ProfileRequest(ops=("gemm",), job_argv=tuple(argv)), ("gemm",), RooflineConstants(1e11, 1e10, 1, 4),
                   "x")
    origins = [s.origin for s in specs]
    rank = {"job": 0, "neighbour": 1, "design": 2, "aligned": 3}
    assert origins[0] == "job" and origins[-1] == "aligned"
    assert [rank[o] for o in origins] == sorted(rank[o] for o in origins)
    aligned = [s for s in specs if s.origin == "aligned"]
    assert len(aligned) == 2 * len({tuple(sorted(s.dims.items())) for s in aligned})  # fwd and bwd of each shape
