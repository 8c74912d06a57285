"""An optimizer op priced by a fitted profile, in the bytes of the Adam the job runs.

A profile's optimizer regressor answers "the Adam its samples timed, over p parameters" (features._optimizer
normalises every step to one fixed roofline, so the op's own bytes never reach it): `llmperf profile` times an fp32
torch.optim.Adam (profile_io.SAMPLER_ADAM_BYTES_PER_PARAM, 72 B per parameter), while a job steps Megatron's or
DeepSpeed's fused Adam (28 B), torch AdamW over its 16-bit model (40 B) or over an fp32 partition (80 B)
(graph/step_ops.adam_bytes_per_param). The step streams memory, so its time scales with the bytes it moves:

    t = regressor(p) x (op bytes per parameter) / (sampled bytes per parameter)

For the 1.75 B-parameter bf16 AdamW of measurements/h200-sxm-141gb-2026-11-28 run h06: 35.9 ms x 40 / 72 = 19.9 ms
(its foreach kernels: 22.8 ms; a 16-bit pass runs below the fp32 passes' share of the bandwidth).
"""

from __future__ import annotations

from typing import Sequence

from llmperf_hook.graph.op import Op
from llmperf_hook.profile.profile_io import ProfileMeta, optimizer_sample_bytes_per_param


def optimizer_bytes_scale(op: Op, meta: ProfileMeta | None) -> float:
    """The factor on a fitted profile's time for `op`: 1 for any other class, a profile without metadata (not
    fitted from samples), or an op that does not say its bytes."""
    params = op.dims.get("params", 0)
    if op.op_class != "optimizer" or meta is None or params <= 0 or op.bytes_moved <= 0:
        return 1.0
    return op.bytes_moved / params / optimizer_sample_bytes_per_param(meta)


def scale_optimizer_times(ops: Sequence[Op], seconds: Sequence[float], meta: ProfileMeta | None) -> list[float]:
    """`seconds` (a fitted profile's answers for `ops`) with each optimizer op's in its own Adam's bytes."""
    return [t * optimizer_bytes_scale(op, meta) for op, t in zip(ops, seconds)]
