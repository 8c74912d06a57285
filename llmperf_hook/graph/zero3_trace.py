"""DeepSpeed ZeRO-3's fetch trace of one micro-batch: which fetches the reuse distance skips, and the peak of
parameter elements held gathered.

DeepSpeed records the order in which modules fetch their parameters in the first step (forward, then backward in
reverse order, with a recomputed checkpoint's forward again inside the backward) and from then on follows it
(deepspeed/runtime/zero/partitioned_param_coordinator.py, reset_step at the start of every forward):
- release_sub_module -> __params_to_release: after a module runs, a parameter is *kept* gathered when it is used
  again within stage3_max_reuse_distance elements (default 1e9) of the modules that follow in the trace: the walk
  adds each following module's ds_numel (the whole, unpartitioned size) and stops once the sum reaches the
  distance. Parameters are identified by ds_id, so a tied output layer (Hugging Face lm_head sharing
  embed_tokens.weight) is the embedding's parameter and can stay gathered from the embedding's forward on.
- fetch_sub_module: after a module's own fetch, pop the fetch queue (the trace's parameter uses, consumed: each
  call continues where the last stopped) and gather the parameters not available, a whole one at a time, while
  fewer than min(stage3_prefetch_bucket_size, stage3_max_live_parameters - available) elements were taken in this
  call. So up to a bucket more per module is gathered ahead until max_live_parameters (1e9 elements, ~2 GB in 16
  bits) caps what is available, overshot by at most one parameter; parameters kept by the reuse distance stay
  gathered whatever it says. A popped use of a parameter still available is marked
  (most_recent_step_id_param_fetched_for), and __params_to_release then keeps that parameter gathered, whatever
  the reuse distance, when the marked use lies beyond the next module.
- Parameters under stage3_param_persistence_threshold (1e5 elements: norms, biases) are never released
  (ds_persist); they are not in this trace and are priced with the weights.
So the first fetch of a micro-batch (the word embedding's) has nothing to hide behind, the output layer stays
gathered from its forward to its backward (the loss has no parameters), and the last layers' parameters stay
gathered across the forward/backward turn: as many as fit in half the reuse distance (each is passed twice), and
those whose backward use the prefetch queue reached before their forward release.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.stages import chunk_layer_range

REUSE_DISTANCE_DEFAULT = 1_000_000_000
"""stage3_max_reuse_distance default (deepspeed/runtime/zero/config.py: max_reuse_distance = Field(pp_int(1e9)))."""
PREFETCH_BUCKET_DEFAULT = 50_000_000
"""stage3_prefetch_bucket_size default (zero/config.py prefetch_bucket_size = Field(pp_int(5e7)))."""
MAX_LIVE_DEFAULT = 1_000_000_000
"""stage3_max_live_parameters default (zero/config.py max_live_parameters = Field(pp_int(1e9)))."""


@dataclass(frozen=True)
class Zero3Trace:
    """What the trace of one micro-batch on a pipeline rank means for the word embedding and the output layer."""

    embedding_elems: int
    """Word-embedding (+ learned position table, OPT's project_in) elements of the rank; 0 off the first stage."""
    output_elems: int
    """Untied output layer (+ OPT's project_out) elements of the rank; 0 when tied on a one-stage model or off the
    last stage."""
    head_fwd_fetch: bool
    """The output layer is gathered before the head's forward (False: tied and still gathered since the embedding's
    forward, within the reuse distance)."""
    head_bwd_fetch: bool
    """Gathered again before the head's backward (only when the reuse distance is 0)."""
    embedding_bwd_fetch: bool
    """The embedding is gathered again before its backward (False: still gathered, the whole trace in between
    being under the reuse distance)."""
    layer_bwd_fetch_skipped: int
    """Layers at the end of the rank whose backward fetch is skipped (all their modules still gathered)."""
    layer_bwd_fetches: float
    """Fetches of the rank's layer modules after the forward (the backward's, and a fully recomputed layer's
    recompute), in layers: the elements gathered there over the elements of all the rank's layers (0 to 2)."""
    peak_live_elems: int
    """The most parameter elements gathered at once over the micro-batch: held by the reuse distance or a passed
    use, the module running, and what the prefetch gathered ahead."""


def _forward_units(cfg: TrainingConfig, stage: int) -> list[tuple[str, int]]:
    """(parameter id, elements) of the rank's fetched parameters in forward order: the embedding, every layer's
    modules (QKV, projection, MLP up, MLP down: params.zero3_gather_modules), the output layer."""
    p = cfg.parallel
    units: list[tuple[str, int]] = []
    if stage == 0:
        units.append(("word", pc.embedding_params(cfg)))
    for chunk in range(p.vpp):
        start, end = chunk_layer_range(cfg, stage, chunk)
        for layer in range(start, end):
            modules = pc.zero3_gather_modules(cfg, pc.layer_params(cfg, pc.is_moe_layer(cfg, layer)))
            units += [(f"layer{layer}.{k}", n) for k, n in enumerate(modules)]
    if stage == p.pp - 1 and not root_holds_embedding(cfg):
        output = output_elems(cfg)
        units.append(("output", output) if output else ("word", pc.embedding_params(cfg)))
    return units


def rank_fetched_elems(cfg: TrainingConfig, stage: int) -> int:
    """Elements of the rank's parameters that ZeRO-3 fetches (_forward_units; the tied word weight counted once)."""
    return sum(dict(_forward_units(cfg, stage)).values())


def root_holds_embedding(cfg: TrainingConfig) -> bool:
    """Megatron-DeepSpeed with a tied output layer computes the logits from word_embeddings.weight in GPTModel's own
    forward (parallel_lm_logits), outside the embedding module: ZeROOrderedDict.__getitem__ registers the weight as
    an external parameter of the module running (parameter_offload.py, automatic since DeepSpeed 0.3.15, the ZeRO
    tutorial's 'Registering external parameters'), the root, whose fetch opens every trace and whose release ends
    it: the weight is gathered once per micro-batch and held through its forward and backward."""
    return cfg.framework == "megatron-deepspeed" and cfg.parallel.pp == 1 and not output_elems(cfg)


def output_elems(cfg: TrainingConfig) -> int:
    """Elements of the rank's output layer as a parameter of its own: untied, or a copy on the last pipeline stage."""
    return pc.head_params(cfg) - pc.norm_params(cfg) if (cfg.model.untie_embeddings or cfg.parallel.pp > 1) else 0


def _trace(cfg: TrainingConfig, stage: int) -> list[tuple[str, int]]:
    """Forward, then backward in reverse order; under full recompute each checkpointed unit of layers runs its
    forward again first (_recompute_unit)."""
    fwd = _forward_units(cfg, stage)
    if cfg.recompute.granularity != "full":
        return fwd + fwd[::-1]
    bwd: list[tuple[str, int]] = []
    i = len(fwd)
    while i > 0:
        unit = _recompute_unit(cfg, fwd[i - 1][0])
        j = i
        while j > 0 and _recompute_unit(cfg, fwd[j - 1][0]) == unit:
            j -= 1
        group = fwd[j:i]
        bwd += (group + group[::-1]) if unit.startswith("layer") else group[::-1]
        i = j
    return fwd + bwd


def _recompute_unit(cfg: TrainingConfig, uid: str) -> str:
    """The checkpoint a parameter use belongs to: the uniform method checkpoints recompute_num_layers layers at
    once (Megatron-LM transformer_block.py _checkpointed_forward, Megatron-DeepSpeed transformer.py with
    --checkpoint-num-layers: checkpoint(custom(l, l + n)) for l = 0, n, 2n, ...), which are recomputed together
    before their backward; otherwise one layer. Counted from the rank's first layer: ZeRO-3 runs without pipeline
    parallelism (frameworks/validation.py)."""
    head = uid.split(".")[0]
    r = cfg.recompute
    if not head.startswith("layer") or r.method != "uniform" or (r.num_layers or 1) <= 1:
        return head
    return f"layer{int(head.removeprefix('layer')) // r.num_layers}"


def _kept(trace: list[tuple[str, int]], reuse: int, pinned: frozenset[str]) -> list[bool]:
    """kept[i]: the parameter used at position i is still gathered at its next use (__params_to_release: the
    elements of the modules strictly between stay under the reuse distance); `pinned` ones always are."""
    kept = [uid in pinned for uid, _ in trace]
    last: dict[str, int] = {}
    prefix = [0]
    for _, n in trace:
        prefix.append(prefix[-1] + n)
    for i, (uid, _) in enumerate(trace):
        if uid in last:
            j = last[uid]
            kept[j] = kept[j] or prefix[i] - prefix[j + 1] < reuse
        last[uid] = i
    return kept


def _prefetch(trace: list[tuple[str, int]], front: int, held: dict[str, int], passed: dict[str, int],
              fetched_at: list[bool], limit: int) -> tuple[int, int]:
    """fetch_sub_module's prefetch: pop the queue from `front` while fewer than `limit` elements are being gathered,
    gathering each parameter not yet held (a whole one, so it can overshoot) and marking every popped use in `passed`
    (most_recent_step_id_param_fetched_for). Returns (new front, elements gathered)."""
    gathered = 0
    while front < len(trace) and gathered < limit:
        uid, n = trace[front]
        passed[uid] = max(passed.get(uid, -1), front)
        if uid not in held:
            held[uid], fetched_at[front] = n, True
            gathered += n
        front += 1
    return front, gathered


def zero3_trace(cfg: TrainingConfig, stage: int) -> Zero3Trace:
    """The ZeRO-3 fetch trace of pipeline rank `stage` under the ds_config's reuse distance, prefetch bucket and
    live-parameter limit (DeepSpeed's defaults where not given)."""
    o = cfg.optimizer
    reuse = REUSE_DISTANCE_DEFAULT if o.stage3_max_reuse_distance is None else o.stage3_max_reuse_distance
    bucket = o.stage3_prefetch_bucket_size_elems
    bucket = PREFETCH_BUCKET_DEFAULT if bucket is None else bucket
    max_live = MAX_LIVE_DEFAULT if o.stage3_max_live_parameters is None else o.stage3_max_live_parameters
    trace = _trace(cfg, stage)
    kept = _kept(trace, reuse, frozenset({"word"}) if root_holds_embedding(cfg) else frozenset())
    held: dict[str, int] = {}
    passed: dict[str, int] = {}
    fetched_at = [False] * len(trace)
    front = peak = live = 0
    for i, (uid, n) in enumerate(trace):
        if uid not in held:  # not prefetched, not kept: fetched on demand
            held[uid], fetched_at[i] = n, True
            live += n
        if front <= i:  # its own use leaves the queue (the queue is consumed: no position is popped twice)
            front, passed[uid] = i + 1, i
        if bucket > 0:
            front, gathered = _prefetch(trace, front, held, passed, fetched_at, min(bucket, max_live - live))
            live += gathered
        peak = max(peak, live)
        # __params_to_release at step_id i + 1: a later use the queue passed (most_recent_step_id_param_fetched_for
        # > step_id) keeps it gathered; the very next module's use counts only through the reuse distance
        if not kept[i] and passed[uid] <= i + 1:
            live -= held.pop(uid)
    return _summary(cfg, stage, trace, fetched_at, peak)


def _summary(cfg: TrainingConfig, stage: int, trace: list[tuple[str, int]], fetched_at: list[bool],
             peak: int) -> Zero3Trace:
    """The fetches of the embedding and output layer that run: the embedding's backward one is the word weight's last
    use in the trace; the output layer's forward and backward are its last two uses, or, tied, the two before."""
    def fetched(uid: str, nth_from_end: int) -> bool:
        uses = [i for i, (u, _) in enumerate(trace) if u == uid]
        return len(uses) >= nth_from_end and fetched_at[uses[-nth_from_end]]

    last = stage == cfg.parallel.pp - 1 and not root_holds_embedding(cfg)
    head, back = ("output", 0) if output_elems(cfg) else ("word", 1)  # tied: the embedding's backward use is last
    half = len(trace) // 2 if cfg.recompute.granularity != "full" else None
    num_fwd = len(_forward_units(cfg, stage))
    return Zero3Trace(
        embedding_elems=pc.embedding_params(cfg) if stage == 0 else 0,
        output_elems=output_elems(cfg) if stage == cfg.parallel.pp - 1 else 0,
        head_fwd_fetch=last and fetched(head, 2 + back), head_bwd_fetch=last and fetched(head, 1 + back),
        embedding_bwd_fetch=stage == 0 and fetched("word", 1),
        layer_bwd_fetch_skipped=_skipped_layers(trace, fetched_at, half),
        layer_bwd_fetches=_layer_fetches(trace[num_fwd:], fetched_at[num_fwd:]) / max(1, _layer_fetches(
            trace[:num_fwd], [True] * num_fwd)), peak_live_elems=peak)


def _layer_fetches(trace: list[tuple[str, int]], fetched_at: list[bool]) -> int:
    """Elements of the layer modules fetched along `trace` (a use that found its parameter gathered fetches none)."""
    return sum(n for (uid, n), was in zip(trace, fetched_at) if was and uid.startswith("layer"))


def _skipped_layers(trace: list[tuple[str, int]], fetched_at: list[bool], half: int | None) -> int:
    """Layers whose every module's first backward use found it still gathered (no recompute: the backward half)."""
    if half is None:
        return 0
    fetched: dict[str, bool] = {}
    for i in range(half, len(trace)):
        layer = trace[i][0].split(".")[0]
        if layer.startswith("layer"):
            fetched[layer] = fetched.get(layer, False) or fetched_at[i]
    return sum(1 for was_fetched in fetched.values() if not was_fetched)


def deepspeed_zero(cfg: TrainingConfig) -> bool:
    """DeepSpeed ZeRO-2/3 (partitioned gradients), whose embedding and output layer are handled here."""
    return "deepspeed" in cfg.framework and cfg.optimizer.zero_stage >= 2


_TRACES: dict[tuple, Zero3Trace] = {}


def stage_trace(cfg: TrainingConfig, stage: int) -> Zero3Trace:
    """zero3_trace, memoised on what it reads (TrainingConfig itself is unhashable): the graph's blocks and the
    memory model ask for the same rank's trace, and tune asks for the same layouts again."""
    key = (cfg.framework, cfg.model, cfg.parallel, cfg.recompute.granularity, cfg.optimizer, stage)
    if key not in _TRACES:
        if len(_TRACES) > 1024:
            _TRACES.clear()
        _TRACES[key] = zero3_trace(cfg, stage)
    return _TRACES[key]


def layer_bwd_fetch_share(cfg: TrainingConfig, stage: int) -> float:
    """Share of the rank's layers whose backward fetch runs: the last layers stay gathered across the forward/
    backward turn under the reuse distance (zero3_trace); 1.0 outside DeepSpeed ZeRO-3 or under full recompute
    (recomputed_layer_fetches prices those layers)."""
    if not deepspeed_zero(cfg) or cfg.optimizer.zero_stage < 3 or cfg.recompute.granularity == "full":
        return 1.0
    layers = max(1, cfg.model.num_layers // cfg.parallel.pp)
    return max(0.0, 1.0 - stage_trace(cfg, stage).layer_bwd_fetch_skipped / layers)


def recomputed_layer_fetches(cfg: TrainingConfig, stage: int) -> float:
    """A fully recomputed layer's fetches after its forward, on average over the rank's layers (0 to 2): the
    recompute's and the backward's. The recompute runs the layer's modules again with their ZeRO-3 hooks
    (torch.utils.checkpoint and deepspeed.checkpointing call the module's forward inside backward), and the release
    after each module's recomputed forward (__params_to_release) keeps it gathered when its backward use, right after
    the recompute, lies within stage3_max_reuse_distance: the recompute's gather then serves the backward, and only
    the modules farther than it are fetched twice (zero3_trace). 2 outside DeepSpeed ZeRO-3."""
    if not deepspeed_zero(cfg) or cfg.optimizer.zero_stage < 3 or cfg.recompute.granularity != "full":
        return 2.0
    return stage_trace(cfg, stage).layer_bwd_fetches
