"""Change a resolved TrainingConfig's parallel layout or batch the way the framework would re-derive it.

For the tuner: `with_layout(cfg, tp=4, pp=2, micro_batch_size=2)` recomputes DP = world / (TP*PP*CP), the number
of micro-batches, the default expert-TP, Megatron's padded vocabulary (it depends on TP), drops sequence
parallelism at TP = 1 as Megatron does, and validates; any rejected layout raises ConfigError.
"""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.frameworks.validation import validate_config
from llmperf_hook.frameworks.vocab import pad_vocab_size


def with_layout(
    cfg: TrainingConfig, *, tp: int | None = None, pp: int | None = None, vpp: int | None = None, cp: int | None = None,
    ep: int | None = None, micro_batch_size: int | None = None, global_batch_size: int | None = None,
    sequence_parallel: bool | None = None,
) -> TrainingConfig:
    """A validated copy of `cfg` with the given sizes (None keeps the current value); ConfigError if rejected."""
    p, b = cfg.parallel, cfg.batch
    tp, pp, cp = tp or p.tp, pp or p.pp, cp or p.cp
    vpp, ep = vpp or p.vpp, ep or p.ep
    mbs, gbs = micro_batch_size or b.micro_batch_size, global_batch_size or b.global_batch_size
    if min(tp, pp, cp, vpp, ep, mbs, gbs) < 1 or cfg.world_size % (tp * pp * cp):
        raise ConfigError(f"layout TP {tp} x PP {pp} x CP {cp} does not divide world size {cfg.world_size} "
                          "(world % (TP*PP*CP) == 0 is required), or a size is below 1.")
    dp = cfg.world_size // (tp * pp * cp)
    sp = (p.sequence_parallel if sequence_parallel is None else sequence_parallel) and tp > 1
    etp = tp if p.etp == p.tp else p.etp  # Megatron's default expert-TP follows TP
    model = cfg.model
    if model.make_vocab_size_divisible_by:
        model = replace(model, padded_vocab_size=pad_vocab_size(model.vocab_size, model.make_vocab_size_divisible_by, tp))
    parallel = replace(p, tp=tp, pp=pp, vpp=vpp, cp=cp, dp=dp, ep=ep, etp=etp, sequence_parallel=sp)
    batch = replace(b, micro_batch_size=mbs, global_batch_size=gbs, num_microbatches=max(gbs // (mbs * dp), 1))
    schedule = "none" if pp == 1 else "interleaved" if vpp > 1 else "1f1b"
    new = replace(cfg, model=model, parallel=parallel, batch=batch, pipeline_schedule=schedule)  # type: ignore[arg-type]
    validate_config(new)
    return new
