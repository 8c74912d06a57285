"""How layers are split over pipeline ranks and virtual stages (Megatron-core semantics)."""

from __future__ import annotations

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.training_config import TrainingConfig


def layers_per_virtual_stage(cfg: TrainingConfig) -> list[int]:
    """Layer counts of the pp * vpp model chunks in model order (chunk number v = vchunk * pp + stage).

    Uneven first/last stages (--decoder-first/last-pipeline-num-layers) take their layers first and the
    rest is split evenly over the remaining chunks (megatron/core/transformer/transformer_block.py).
    --account-for-embedding/loss-in-pipeline-split count the embedding / loss as one layer each: the split is
    of num_layers + 1 (+ 1) and the first (last) chunk holds one transformer layer fewer.
    """
    p, total = cfg.parallel, cfg.model.num_layers
    chunks = p.pp * p.vpp
    extra_first = int(getattr(p, "account_for_embedding_in_pipeline_split", False))
    extra_last = int(getattr(p, "account_for_loss_in_pipeline_split", False))
    if extra_first or extra_last:
        virtual = total + extra_first + extra_last
        if virtual % chunks:
            raise ConfigError(
                f"num-layers {total} plus {extra_first + extra_last} (embedding/loss counted as layers) = {virtual} "
                f"does not divide over {chunks} pipeline chunks (Megatron rule with --account-for-embedding/"
                f"loss-in-pipeline-split). Change --num-layers or the pipeline sizes.")
        counts = [virtual // chunks] * chunks
        counts[0] -= extra_first
        counts[-1] -= extra_last
        return counts
    first, last = p.decoder_first_pipeline_num_layers, p.decoder_last_pipeline_num_layers
    fixed = {0: first} if first is not None else {}
    if last is not None:
        fixed[chunks - 1] = last
    rest_layers = total - sum(fixed.values())
    rest_chunks = chunks - len(fixed)
    if rest_layers < 0 or (rest_chunks == 0 and rest_layers) or (rest_chunks and rest_layers % rest_chunks):
        raise ConfigError(
            f"num-layers {total} cannot be split over {p.pp} pipeline stages x {p.vpp} virtual stages with "
            f"first/last stage layers {first}/{last}: the remaining {rest_layers} layers must divide evenly over "
            f"{rest_chunks} chunks (Megatron rule). Change --num-layers, --pipeline-model-parallel-size or the "
            f"--decoder-first/last-pipeline-num-layers values."
        )
    even = rest_layers // rest_chunks if rest_chunks else 0
    return [fixed.get(v, even) for v in range(chunks)]


def chunk_layer_range(cfg: TrainingConfig, stage: int, chunk: int) -> tuple[int, int]:
    """[start, end) global layer indices held by `chunk` of pipeline rank `stage`."""
    counts = layers_per_virtual_stage(cfg)
    v = chunk * cfg.parallel.pp + stage
    start = sum(counts[:v])
    return start, start + counts[v]
