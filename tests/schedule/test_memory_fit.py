"""The memory verdict (schedule/memory_fit.py): what the job allocates must fit the GPU (schedule/memory_rule.py),
the caching allocator's reserve need not; a fit by less than the fragmentation or the
model's error band is "fits, tight", with a warning."""

import dataclasses

import pytest

from llmperf_hook.api import predict_config
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory import estimate_memory
from llmperf_hook.schedule.memory_fit import MODEL_ERROR_FRACTION, fit_verdict, tight_fit_warning, verdict_words

CLUSTER = load_cluster("dgx-h100")
MEGATRON = make_config(num_layers=8, hidden_size=2048, num_attention_heads=16, seq_length=2048, micro_batch_size=4,
                       dp=8, global_batch_size=64)
CFG = dataclasses.replace(MEGATRON, framework="deepspeed",
                          optimizer=dataclasses.replace(MEGATRON.optimizer, zero_stage=1))
"""A ZeRO-1 job: its reserve holds the step's flat buffers in segments of their own, which the allocator frees."""


def _with_capacity(capacity_bytes: int):
    return dataclasses.replace(CLUSTER, gpu=dataclasses.replace(CLUSTER.gpu, memory_capacity_bytes=capacity_bytes))


def _memory(capacity_bytes: int):
    cluster = _with_capacity(capacity_bytes)
    return estimate_memory(CFG, build_graph(CFG, cluster), cluster)


@pytest.fixture(scope="module")
def reference():
    """(peak, fragmentation, must-fit bytes) of CFG: the capacity does not change them."""
    mem = estimate_memory(CFG, build_graph(CFG, CLUSTER), CLUSTER)
    assert mem.fragmentation_bytes == mem.components["allocator_fragmentation"] > 0
    assert mem.must_fit_bytes == mem.peak_bytes_per_gpu - mem.fragmentation_bytes
    return mem.peak_bytes_per_gpu, mem.fragmentation_bytes, mem.must_fit_bytes


def test_fit_verdict_boundaries() -> None:
    peak, must = 100.0, 92.0
    assert fit_verdict(peak, must, 92.0) == fit_verdict(peak, must, 99.0)  # must-fit bytes fit exactly: tight
    assert fit_verdict(peak, must, 92.0).fits and fit_verdict(peak, must, 92.0).tight
    assert not fit_verdict(peak, must, 91.99).fits and not fit_verdict(peak, must, 91.99).tight
    assert fit_verdict(peak, must, 100.0).tight  # the peak fits, by nothing: within the model's error band
    band_edge = peak * (1 + MODEL_ERROR_FRACTION)
    assert fit_verdict(peak, must, band_edge - 1e-6).tight and not fit_verdict(peak, must, band_edge).tight
    assert fit_verdict(peak, must, band_edge).fits


def test_a_megatron_job_must_fit_its_allocated_bytes() -> None:
    """Megatron-LM's reserve is the residue over its transients; how much of it PyTorch's free-and-retry cannot hand
    back is not measured (schedule/memory_rule.py), so its allocated bytes decide: a capacity below the peak but at
    them fits, tight; one byte less does not fit."""
    mem = estimate_memory(MEGATRON, build_graph(MEGATRON, CLUSTER), CLUSTER)
    assert 0 < mem.fragmentation_bytes and mem.must_fit_bytes == mem.peak_bytes_per_gpu - mem.fragmentation_bytes
    at, below = _with_capacity(mem.must_fit_bytes), _with_capacity(mem.must_fit_bytes - 1)
    tight = estimate_memory(MEGATRON, build_graph(MEGATRON, at), at)
    assert tight.fits and tight.tight
    assert not estimate_memory(MEGATRON, build_graph(MEGATRON, below), below).fits


def test_verdict_words() -> None:
    assert [verdict_words(*v) for v in ((True, False), (True, True), (False, False))] == [
        "fits", "fits, tight", "DOES NOT FIT"]


def test_estimate_memory_at_the_must_fit_boundary(reference) -> None:
    peak, _frag, must = reference
    at = _memory(must)
    assert at.fits and at.tight and at.headroom_bytes == must - peak  # short by the freeable reserve: still runs
    over = _memory(must - 1)
    assert not over.fits and not over.tight
    roomy = _memory(int(peak * (1 + MODEL_ERROR_FRACTION)) + 1)
    assert roomy.fits and not roomy.tight
    inside_band = _memory(peak + 1)
    assert inside_band.fits and inside_band.tight and inside_band.headroom_bytes == 1


def test_every_stage_must_fit_its_allocated_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict covers every pipeline rank: the rank with the highest peak may need less than another (more of
    its peak is freeable reserve), and the other one decides."""
    import llmperf_hook.schedule.memory as memory

    cfg = make_config(num_layers=8, hidden_size=2048, num_attention_heads=16, pp=2, dp=4, global_batch_size=64)
    parts = {0: {"weights": 50, "allocator_fragmentation": 50}, 1: {"weights": 98, "allocator_fragmentation": 0}}
    monkeypatch.setattr(memory, "stage_memory", lambda _cfg, stage, *_a: parts[stage.stage])
    mem = estimate_memory(cfg, build_graph(cfg, CLUSTER), _with_capacity(97))
    assert mem.stage == 0 and mem.peak_bytes_per_gpu == 100 and mem.fragmentation_bytes == 50
    assert not mem.fits  # stage 0 allocates 50, stage 1 98 > 97
    assert estimate_memory(cfg, build_graph(cfg, CLUSTER), _with_capacity(98)).tight


def test_tight_fit_warns_with_margin_fragmentation_and_fix(reference) -> None:
    peak, frag, must = reference
    capacity = (peak + must) // 2
    est = predict_config(CFG, _with_capacity(capacity))
    warning = next(w for w in est.warnings if w.startswith("memory fits, tight"))
    assert f"{frag / 2**30:.2f} GiB of allocator fragmentation" in warning
    assert f"by {(peak - capacity) / 2**30:.2f} GiB" in warning
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in warning
    assert "train_micro_batch_size_per_gpu" in warning and "activation checkpointing" in warning
    near = predict_config(CFG, _with_capacity(peak + 2**20))
    assert any("less than the memory model's error band" in w for w in near.warnings)
    roomy = predict_config(CFG, _with_capacity(2 * peak))
    assert not any("tight" in w for w in roomy.warnings)
    assert f"the allocated bytes, {must / 2**30:.2f} GiB, fit" in warning
    short = predict_config(CFG, _with_capacity(must - 2**20))
    assert not short.memory.fits and not any("tight" in w for w in short.warnings)


def test_the_fixes_are_those_the_job_can_still_make(reference) -> None:
    """A micro-batch of 1 cannot shrink and full recompute is the most there is: the warning offers neither then;
    the micro-batch is named in the framework's words."""
    peak, _frag, must = reference
    cluster = _with_capacity((peak + must) // 2)
    done = dataclasses.replace(MEGATRON, batch=dataclasses.replace(CFG.batch, micro_batch_size=1),
                               recompute=dataclasses.replace(CFG.recompute, granularity="full"))
    mem = estimate_memory(done, build_graph(done, cluster), cluster)
    warning = tight_fit_warning(dataclasses.replace(mem, tight=True), done)
    assert "expandable_segments:True" in warning and "micro-batch" not in warning and "recompute" not in warning
    assert "a smaller train_micro_batch_size_per_gpu" in tight_fit_warning(mem, CFG)
    selective = dataclasses.replace(MEGATRON, recompute=dataclasses.replace(CFG.recompute, granularity="selective"))
    assert "--recompute-granularity full" in tight_fit_warning(mem, selective)
