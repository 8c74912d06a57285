"""How layers are split over pipeline ranks and virtual stages (Megatron-core semantics)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.training_config import TrainingConfig


def layers_per_virtual_stage(cfg: TrainingConfig) -> list[int]:
    """Layer counts of the pp * vpp model chunks in model order (chunk number v = vchunk * pp + stage).

    Uneven first/last stages (--decoder-first/last-pipeline-num-layers) take their layers, the middle stages split
    the rest evenly, and every stage splits its layers evenly over its virtual chunks (Megatron's "Uneven PP").
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
    if cfg.deepspeed_pipeline_engine and chunks == p.pp and first is None and last is None and total % p.pp:
        return list(deepspeed_transformer_partition(total, p.pp, cfg.precision != "fp32"))
    # Uneven PP (megatron/core/transformer/transformer_config.py): the first / last pipeline STAGE holds the given
    # layers, the middle stages split the rest evenly, and each stage splits its layers evenly over its VPP chunks.
    fixed = {0: first} if first is not None else {}
    if last is not None:
        fixed[p.pp - 1] = last
    rest_layers = total - sum(fixed.values())
    rest_stages = p.pp - len(fixed)
    per_stage = [fixed.get(s, rest_layers // rest_stages if rest_stages else 0) for s in range(p.pp)]
    if (rest_layers < 0 or (rest_stages == 0 and rest_layers) or (rest_stages and rest_layers % rest_stages)
            or any(n % p.vpp for n in per_stage)):
        raise ConfigError(
            f"num-layers {total} cannot be split over {p.pp} pipeline stages x {p.vpp} virtual stages with "
            f"first/last stage layers {first}/{last}: the remaining {rest_layers} layers must divide evenly over "
            f"{rest_stages} stages and each stage's layers over its {p.vpp} virtual stages (Megatron rule). Change "
            f"--num-layers, --pipeline-model-parallel-size or the --decoder-first/last-pipeline-num-layers values."
        )
    return [per_stage[v % p.pp] // p.vpp for v in range(chunks)]


def chunk_layer_range(cfg: TrainingConfig, stage: int, chunk: int) -> tuple[int, int]:
    """[start, end) global layer indices held by `chunk` of pipeline rank `stage`."""
    counts = layers_per_virtual_stage(cfg)
    v = chunk * cfg.parallel.pp + stage
    start = sum(counts[:v])
    return start, start + counts[v]


@lru_cache(maxsize=256)
def deepspeed_transformer_partition(num_layers: int, num_stages: int, mixed_precision: bool) -> tuple[int, ...]:
    """Transformer layers per stage as DeepSpeed's PipelineModule splits Megatron-DeepSpeed's GPTModelPipe.

    GPTModelPipe (Megatron-DeepSpeed megatron/model/gpt_model.py) lists its layers as [to-half cast, embedding,
    num_layers transformer layers, final norm, head, to-fp32 cast (fp16/bf16 only)] and partitions
    them with partition_method='type:transformer': weight 1 per transformer layer, 0 for the rest, split by
    deepspeed/runtime/utils.py partition_balanced, a dynamic programme minimising the spread (max - min) of the
    stage weights; on ties it keeps the last split point it tried (`if dp_cost[i, j] >= cost`). So a layer count
    not divisible by PP is legal there (BLOOM-176B: 70 layers on 12 stages). Vectorised over the split point and
    the stage count; the same parts as DeepSpeed's loops.
    """
    weights = np.array([0, 0] + [1] * num_layers + [0, 0] + [0] * int(mixed_precision), dtype=float)
    n, m = len(weights), num_stages
    prefix = np.concatenate(([0.0], np.cumsum(weights)))
    dp_max = np.full((n + 1, m + 1), np.inf)
    dp_min = np.full((n + 1, m + 1), np.inf)
    position = np.zeros((n + 1, m + 1), dtype=int)
    dp_max[0, 0] = 0.0
    for i in range(1, n + 1):
        js = np.arange(1, min(i, m) + 1)
        seg = (prefix[i] - prefix[:i])[:, None]                       # [k, 1]: weight of layers k..i-1
        max_sum = np.maximum(dp_max[:i, js - 1], seg)
        min_sum = np.minimum(dp_min[:i, js - 1], seg)
        cost = max_sum - min_sum                                      # [k, j]
        best = cost.min(axis=0)
        k = i - 1 - np.argmax((cost == best)[::-1], axis=0)           # the last k reaching the minimum
        dp_max[i, js], dp_min[i, js], position[i, js] = max_sum[k, js - 1], min_sum[k, js - 1], k
    parts = [n]
    for j in range(m, 0, -1):
        parts.append(int(position[parts[-1], j]))
    parts.reverse()
    return tuple(int(prefix[b] - prefix[a]) for a, b in zip(parts[:-1], parts[1:]))
