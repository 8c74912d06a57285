"""DeepSpeed zero_optimization.contiguous_gradients false (schedule/memory.zero_bucket_count): no reduction buffer is
allocated, so a bucket's gradients stay separate param.grad tensors and the reduction flattens them into a temporary
of the same size (stage_1_and_2.py buffered_reduce_fallback, stage3.py __avg_scatter_grads); ZeRO-2 with overlap_comm
keeps the previous bucket's other-partition gradients until the next reduction (previous_reduced_grads)."""

from __future__ import annotations

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory import estimate_memory, zero_reduce_bucket_bytes

BUCKET = 200_000_000


def _cfg(zero: int, contiguous: bool, overlap: bool, offload: str = "none"):
    return make_config(num_layers=2, hidden_size=1024, num_attention_heads=8, dp=8, framework="deepspeed",
                       optimizer_kw=dict(zero_stage=zero, contiguous_gradients=contiguous, overlap_grad_reduce=overlap,
                                         grad_bucket_size_elems=BUCKET, offload_optimizer=offload))


@pytest.mark.parametrize("zero, overlap, contiguous_buckets, separate_buckets", [
    (1, False, 1, 1),  # ZeRO-1: every gradient is kept anyway; the flatten temporary replaces the buffer
    (1, True, 2, 1),
    (2, False, 1, 2),  # the bucket's param.grad tensors + their flattened copy
    (2, True, 2, 3),   # + the previous bucket's other-partition gradients, cleared at the next reduction
    (3, True, 1, 2),   # stage3 allocates one buffer once; without it: gradients + reduce_scatter_coalesced's cat
])
def test_bucket_memory_with_and_without_contiguous_gradients(zero: int, overlap: bool, contiguous_buckets: int,
                                                             separate_buckets: int) -> None:
    assert zero_reduce_bucket_bytes(_cfg(zero, True, overlap)) == BUCKET * 2 * contiguous_buckets
    assert zero_reduce_bucket_bytes(_cfg(zero, False, overlap)) == BUCKET * 2 * separate_buckets


def test_offloading_zero2_forces_contiguous_gradients() -> None:
    """stage_1_and_2.py: self.contiguous_gradients = contiguous_gradients or self.cpu_offload."""
    assert zero_reduce_bucket_bytes(_cfg(2, False, True, "cpu")) == BUCKET * 2 * 2


def test_zero3_separate_gradients_are_freed_before_the_step() -> None:
    """Without the persistent buffer, ZeRO-3's bucket memory is a backward transient: the peak grows by it only where
    the backward is the peak."""
    cluster = load_cluster("dgx-h100")
    peaks = {}
    for contiguous in (True, False):
        cfg = _cfg(3, contiguous, True)
        peaks[contiguous] = estimate_memory(cfg, build_graph(cfg, cluster), cluster)
    assert peaks[False].components["zero_buckets"] == 2 * peaks[True].components["zero_buckets"]
    assert sum(peaks[False].components.values()) == peaks[False].peak_bytes_per_gpu
