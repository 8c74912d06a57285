"""How layers are split over pipeline ranks and virtual stages (Megatron-core semantics)."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.pipeline_layout import layout_layers_per_stage
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph import params as pc


def layers_per_virtual_stage(cfg: TrainingConfig) -> list[int]:
    """Layer counts of the pp * vpp model chunks in model order (chunk number v = vchunk * pp + stage).

    Uneven first/last stages (--decoder-first/last-pipeline-num-layers) take their layers, the middle stages split
    the rest evenly, and every stage splits its layers evenly over its virtual chunks (Megatron's "Uneven PP").
    --account-for-embedding/loss-in-pipeline-split count the embedding / loss as one layer each: the split is
    of num_layers + 1 (+ 1) and the first (last) chunk holds one transformer layer fewer. A
    --pipeline-model-parallel-layout gives every chunk's layers itself.
    """
    p, total = cfg.parallel, cfg.model.num_layers
    chunks = p.pp * p.vpp
    if p.pipeline_layout:  # --pipeline-model-parallel-layout names each chunk's layers (checked by validation.py)
        return list(layout_layers_per_stage(p.pipeline_layout))
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
    engine_split = total % p.pp or p.pp_partition_method is not None
    if cfg.deepspeed_pipeline_engine and chunks == p.pp and first is None and last is None and engine_split:
        return list(deepspeed_pipeline_partition(cfg))
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


TRANSFORMER_SPEC = "ParallelTransformerLayerPipe"


def gpt_model_pipe_specs(cfg: TrainingConfig) -> list[tuple[str, int]]:
    """(class or function name, parameters) of each entry of Megatron-DeepSpeed's GPTModelPipe layer list.

    microsoft fork (megatron/model/gpt_model.py): _to_float16, EmbeddingPipe, the transformer layers (then
    _calculate_moe_loss for an MoE model), the final norm, the head (the tied EmbeddingPipe, or LMHeadPipe when
    untied), float16_to_fp32 (fp16/bf16 only).
    bigscience fork (the one with --pp-partition-method): a transpose lambda after the embedding and `undo`
    before its MixedFusedLayerNorm; the head is always the tied EmbeddingPipe. DeepSpeed counts a tied layer's
    parameters at each of its places (PipelineModule._count_layer_params builds every LayerSpec)."""
    layers = [(TRANSFORMER_SPEC, pc.layer_params(cfg, pc.is_moe_layer(cfg, i))) for i in range(cfg.model.num_layers)]
    embedding, norm = ("EmbeddingPipe", pc.embedding_params(cfg)), ("MixedFusedLayerNorm", pc.norm_params(cfg))
    cast = [("float16_to_fp32", 0)] if cfg.precision != "fp32" else []
    if cfg.parallel.pp_partition_method is not None:
        return [("_to_float16", 0), embedding, ("<lambda>", 0), *layers, ("undo", 0), norm, embedding, *cast]
    head = ("LMHeadPipe", pc.head_params(cfg) - pc.norm_params(cfg)) if cfg.model.untie_embeddings else embedding
    moe_loss = [("_calculate_moe_loss", 0)] if cfg.model.num_experts else []
    return [("_to_float16", 0), embedding, *layers, *moe_loss, norm, head, *cast]


def deepspeed_pipeline_partition(cfg: TrainingConfig) -> tuple[int, ...]:
    """Transformer layers per stage as DeepSpeed's PipelineModule._partition_layers splits GPTModelPipe.

    partition_method (lower-cased, as DeepSpeed does): 'type:REGEX' weighs 1 each entry whose name the regex
    finds (case-insensitive; 'type:transformer|embedding' also counts the two embeddings, as BLOOM-176B was
    split), 'parameters' weighs entries by their parameters, both split by partition_balanced; 'uniform' splits
    the entries by count (partition_uniform). Anything else DeepSpeed refuses (NotImplementedError), a regex
    that finds nothing too (RuntimeError), and the fork's pipeline fails on a stage without a transformer layer."""
    specs, stages = gpt_model_pipe_specs(cfg), cfg.parallel.pp
    method = (cfg.parallel.pp_partition_method or "type:transformer").lower()
    if method == "uniform":
        parts = _partition_uniform(len(specs), stages)
    elif method == "parameters":
        parts = _partition_balanced(tuple(float(n) for _, n in specs), stages)
    elif method.startswith("type:"):
        pattern = _layer_type_regex(method.split(":")[1], method)
        weights = tuple(1.0 if pattern.search(name) else 0.0 for name, _ in specs)
        if not any(weights):
            raise ConfigError(f"--pp-partition-method {method!r} matches none of GPTModelPipe's layers "
                              f"({', '.join(sorted({n for n, _ in specs}))}); DeepSpeed raises 'found no valid layers "
                              "to partition'. Use e.g. 'type:transformer' or 'type:transformer|embedding'.")
        parts = _partition_balanced(weights, stages)
    else:
        raise ConfigError(f"--pp-partition-method {method!r} is not a DeepSpeed partition method (PipelineModule "
                          "raises NotImplementedError); use 'type:REGEX' (e.g. 'type:transformer|embedding'), "
                          "'uniform' or 'parameters'.")
    counts = tuple(sum(name == TRANSFORMER_SPEC for name, _ in specs[a:b]) for a, b in zip(parts[:-1], parts[1:]))
    if min(counts) == 0:
        raise ConfigError(f"--pp-partition-method {method!r} leaves a pipeline stage without a transformer layer "
                          f"(layers per stage {list(counts)}); the bigscience fork's pipeline fails then (its "
                          "gpt_model.py says so). Use fewer pipeline stages or 'type:transformer'.")
    return counts


def _layer_type_regex(text: str, method: str) -> re.Pattern[str]:
    try:
        return re.compile(text, re.IGNORECASE)
    except re.error as err:
        raise ConfigError(f"--pp-partition-method {method!r}: {text!r} is not a regular expression ({err}).") from None


def _partition_uniform(num_items: int, num_parts: int) -> tuple[int, ...]:
    """deepspeed/runtime/utils.py partition_uniform: boundaries of num_parts nearly equal runs, the first
    (num_items mod num_parts) one longer; one item per part (then empty parts) when there are too few."""
    if num_items <= num_parts:
        return tuple(min(p, num_items) for p in range(num_parts + 1))
    size, residual = divmod(num_items, num_parts)
    return tuple(p * size + min(p, residual) for p in range(num_parts + 1))


@lru_cache(maxsize=256)
def _partition_balanced(weights: tuple[float, ...], num_stages: int) -> tuple[int, ...]:
    """deepspeed/runtime/utils.py partition_balanced: part boundaries minimising the spread (max - min) of the
    part weights, a dynamic programme; on ties it keeps the last split point it tried (`if dp_cost[i, j] >=
    cost`). Vectorised over the split point and the part count; the same parts as DeepSpeed's loops."""
    weights = np.asarray(weights, dtype=float)
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
    return tuple(parts)
