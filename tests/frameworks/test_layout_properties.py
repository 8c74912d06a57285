"""Property: any (TP, PP, CP, MBS, GBS) on any world size either resolves or raises ConfigError, nothing else;
when it resolves, Megatron's identities hold."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.relayout import with_layout
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.training_config import BatchConfig, ParallelLayout
from llmperf_hook.frameworks.validation import validate_config
from tests.frameworks.helpers import BASE, megatron

_SIZE = st.sampled_from([1, 2, 3, 4, 6, 8, 16])
_BATCH = st.integers(min_value=1, max_value=64)


def _check(cfg) -> None:
    p, b = cfg.parallel, cfg.batch
    assert p.tp * p.pp * p.cp * p.dp == cfg.world_size
    assert b.global_batch_size == b.micro_batch_size * b.num_microbatches * p.dp
    assert cfg.model.padded_vocab_size % (128 * p.tp) == 0 and cfg.model.padded_vocab_size >= cfg.model.vocab_size


@settings(max_examples=250, deadline=None)
@given(nodes=st.integers(1, 4), gpus=st.sampled_from([1, 2, 4, 6, 8]), tp=_SIZE, pp=_SIZE, cp=_SIZE, mbs=_BATCH,
       gbs=st.one_of(st.none(), st.integers(1, 512)), vpp=st.sampled_from([None, 1, 2]))
def test_resolve_or_config_error(nodes: int, gpus: int, tp: int, pp: int, cp: int, mbs: int, gbs: int | None, vpp: int | None) -> None:
    argv = ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(gpus), "pretrain_gpt.py", *BASE,
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
            "--context-parallel-size", str(cp), "--micro-batch-size", str(mbs)]
    argv += ["--global-batch-size", str(gbs)] if gbs else []
    argv += ["--num-virtual-stages-per-pipeline-rank", str(vpp)] if vpp else []
    try:
        _, cfg = resolve_job(argv, {})
    except ConfigError:
        return
    _check(cfg)


@settings(max_examples=250, deadline=None)
@given(tp=_SIZE, pp=_SIZE, cp=_SIZE, mbs=_BATCH, gbs=st.integers(1, 512), ep=st.sampled_from([1, 2, 4, 8]))
def test_with_layout_or_config_error(tp: int, pp: int, cp: int, mbs: int, gbs: int, ep: int) -> None:
    base = megatron("--num-experts", "8", gpus=8, nodes=2)
    try:
        cfg = with_layout(base, tp=tp, pp=pp, cp=cp, ep=ep, micro_batch_size=mbs, global_batch_size=gbs)
    except ConfigError:
        return
    _check(cfg)


@settings(max_examples=250, deadline=None)
@given(world=st.integers(1, 64), tp=_SIZE, pp=_SIZE, cp=_SIZE, mbs=_BATCH, gbs=st.integers(1, 512))
def test_validate_config_direct(world: int, tp: int, pp: int, cp: int, mbs: int, gbs: int) -> None:
    """The tuner's path: dataclasses.replace on a resolved config, then validate_config."""
    base = megatron(gpus=1)
    dp = max(world // (tp * pp * cp), 1)
    cfg = replace(base, world_size=tp * pp * cp * dp, parallel=ParallelLayout(tp=tp, pp=pp, cp=cp, dp=dp),
                  batch=BatchConfig(mbs, gbs, max(gbs // (mbs * dp), 1)))
    try:
        validate_config(cfg)
    except ConfigError:
        return
    assert gbs % (mbs * dp) == 0 and 32 % tp == 0 and 32 % pp == 0
