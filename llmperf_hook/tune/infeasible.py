"""What `llmperf tune` says when nothing fits (exit 3), and what of the command keeps state in host memory.

The message names the least-memory configuration the search found (or the one that pins the least host RAM, where it
is the host that rules it out), by how much it is short, and the largest configuration that would fit: the most
layers of this model (whole pipeline chunks) with that layout, width, sequence, batch and GPUs kept (search.py
_layers_that_fit), or that not even one chunk fits, or that it is not known.
"""

from __future__ import annotations

from typing import Any, Mapping

from llmperf_hook.schedule.memory_rule import fits_gpu
from llmperf_hook.tune.elastic import elastic_pruned_sentence, starting_nothing_sentence

GiB = float(1 << 30)


def predict_verdict(ev: Any) -> tuple[bool, bool]:
    """`llmperf predict`'s GPU memory verdict of one evaluated configuration, (fits, tight): the full estimate's
    MemoryEstimate (schedule/memory_fit.py: must-fit bytes within capacity; tight within the model's 3.8 % error
    band). Tune's rule is the same one (schedule/memory_rule.py fits_gpu) within (1 - memory_margin) of the capacity
    (Evaluated.fits): a configuration can fit, even tightly, by predict's verdict and still be over tune's margin."""
    mem = getattr(ev.estimate, "memory", None)  # None: an estimate without one (tests' stand-ins): peak vs capacity
    fits = getattr(mem, "fits", ev.peak_bytes <= ev.capacity_bytes)
    return bool(fits), bool(fits and getattr(mem, "tight", False))


def over_margin_only(ev: Any) -> bool:
    """Fits by predict's verdict (fits or fits, tight) and the host RAM, but over tune's margin: not out of memory."""
    return ev is not None and not ev.fits and ev.host_fits and predict_verdict(ev)[0]


def own_fits_over_margin(result: Any) -> bool:
    """Nothing passed tune's margin, but the user's own configuration fits by predict's verdict: the job runs as it
    is, so it is not infeasible."""
    return not result.top and over_margin_only(result.baseline)


def own_over_margin_sentence(result: Any) -> str:
    """Why the user's own configuration is not in the list although predict says it fits."""
    base = result.baseline
    band = ": within the memory model's 3.8 % error band, so it may run out" if predict_verdict(base)[1] else ""
    usable = (1 - result.memory_margin) * base.capacity_bytes / GiB
    return (f"Your command fits{', tight' * bool(band)} by llmperf predict's verdict ({base.must_fit_bytes / GiB:.1f} "
            f"GiB allocated with the allocator's residue, {base.peak_bytes / GiB:.1f} GiB predicted peak, on "
            f"{base.capacity_bytes / GiB:.1f} GiB{band}), but is over tune's "
            f"{100 * (1 - result.memory_margin):.0f} % margin ({usable:.1f} GiB usable), so tune does not list it.")


def host_offloads(cfg: Any) -> list[str]:
    """What of the command keeps state in host memory (schedule/host_memory.py), in its framework's words: tune keeps
    these settings and checks each candidate's host RAM against the cluster's where it states it."""
    o = cfg.optimizer
    if "deepspeed" not in cfg.framework:  # Megatron-LM's --optimizer-cpu-offload or torch FSDP's CPU offload
        if o.offload_optimizer == "none":
            return []
        return [f"--optimizer-cpu-offload (--optimizer-offload-fraction {o.offload_optimizer_ratio:g})"
                if cfg.framework == "megatron" else "FSDP CPU offload"]
    parts = [f"offload_optimizer {o.offload_optimizer}" if o.offload_optimizer != "none" else "",
             f"offload_param {o.offload_param}" if o.offload_param != "none" else "",
             _checkpoint_in_cpu(cfg.recompute)]
    return [p for p in parts if p]


def _checkpoint_in_cpu(r: Any) -> str:
    """--checkpoint-in-cpu keeps full recompute's layer checkpoints in host RAM (schedule/host_memory.py); the flag
    stays in every tuned command, so under selective or no recompute it still does for full-recompute candidates."""
    if not r.checkpoint_in_cpu:
        return ""
    return "--checkpoint-in-cpu" if r.granularity == "full" else "--checkpoint-in-cpu (full-recompute candidates)"


def host_unchecked(cfg: Any, spec: Any) -> str:
    return (f"the command keeps state in host memory ({', '.join(host_offloads(cfg))}), but cluster {spec.name} does not "
            "state its host RAM (host_memory_GiB in its YAML), so no candidate's host memory is checked: one that tune "
            "lists may not fit the nodes' RAM. Give --cluster a YAML with host_memory_GiB to check it.")


def nearest_json(result: Any) -> dict[str, Any] | None:
    """The least-memory configuration an infeasible search found (what the message names), as JSON."""
    near = result.nearest
    if near is None:
        return None
    host_bound = _host_bound(result, near)
    short = (near.host_bytes - near.host_capacity_bytes if host_bound
             else near.must_fit_bytes - (1 - result.memory_margin) * near.capacity_bytes)
    return {"layout": near.candidate.describe(), "peak_bytes": near.peak_bytes, "must_fit_bytes": near.must_fit_bytes,
            "host_bytes_per_node": near.host_bytes,
            "short_of": "host" if host_bound else "gpu", "short_bytes": short,
            "layers_that_fit": result.layers_that_fit, "layers_that_fit_means": _layers_meaning(result.layers_that_fit),
            "seq_length_that_fits": result.seq_length_that_fits}


def _host_bound(result: Any, near: Any) -> bool:
    """The host, not the GPU, rules the nearest layout out: it fits the usable GPU memory, not the host RAM."""
    return bool(fits_gpu(near.must_fit_bytes, near.capacity_bytes, result.memory_margin)) and not near.host_fits


def _layers_meaning(layers: int | None) -> str:
    """What `nearest.layers_that_fit` says: null was both "no layer count fits" and "not known"."""
    if layers is None:
        return ("not known: with fewer layers the command's own stage split (--decoder-first/last-pipeline-num-layers, "
                "an embedding or loss counted in the split) breaks Megatron's rules, so no smaller model was priced")
    if layers == 0:
        return "no layer count fits: not even one layer per pipeline chunk, with the hidden size, sequence, batch and GPUs kept"
    return "the most layers (whole pipeline chunks) that fit with this layout, hidden size, sequence, batch and GPUs kept"


def infeasible_message(result: Any, cfg: Any, header: dict[str, Any], elastic_sentence: str = "") -> str:
    """`elastic_sentence`: for an elastic launch whose layouts fit only at more nodes than its minimum, which range
    would fit (tune/elastic.over_at_minimum_sentence)."""
    usable = (1 - result.memory_margin) * header["capacity_bytes"] / GiB
    host_gib = header.get("host_capacity_bytes", 0) / GiB
    host = (f", {result.num_oom_host:,} of them out of host RAM ({host_gib:,.0f} GiB per node) while fitting the GPU"
            if result.num_oom_host else "")
    host += (f", {len(result.over_at_minimum):,} of them at the elastic minimum (the fewest nodes the job may start "
             "with)" if result.over_at_minimum else "")
    counts = (f"Of {result.num_considered:,} candidates, {result.num_invalid:,} are invalid and "
              f"{result.num_oom_estimated + result.num_oom_predicted:,} are predicted out of memory "
              f"(usable {usable:.1f} GiB = {100 * (1 - result.memory_margin):.0f} % of "
              f"{header['capacity_bytes'] / GiB:.1f} GiB on {header['cluster']}){host}.")
    lead = "nothing fits"
    if own_fits_over_margin(result):  # --apply: nothing to launch, but the user's command is not infeasible
        lead = f"nothing fits tune's {100 * (1 - result.memory_margin):.0f} % margin, so --apply has nothing to launch"
        counts = f"{own_over_margin_sentence(result)} To run it as it is, launch it without tune. {counts}"
    near = result.nearest
    if near is None and result.over_at_minimum:
        return f"{lead}: {counts}{elastic_sentence}{elastic_pruned_sentence(result.invalid_by_rule)}"
    if near is None and result.elastic_counts_starting_nothing:
        return lead + ": " + counts + starting_nothing_sentence(result.elastic_counts_starting_nothing,
                                                               result.invalid_by_rule) + elastic_sentence
    if near is None:
        return f"{lead}: {counts} No candidate passed the layout rules; widen the space with --search."
    host_bound = _host_bound(result, near)
    if host_bound:  # it is the host that rules this one out: say how far over, and what pins the memory
        msg = (f"{lead}: {counts} The configuration that pins the least host memory, {near.candidate.describe()}, "
               f"fits the GPU ({near.must_fit_bytes / GiB:.1f} GiB) but its offloads ({', '.join(host_offloads(cfg))}) pin "
               f"{near.host_bytes / GiB:,.0f} GiB of host RAM per node, {(near.host_bytes / GiB - host_gib):,.0f} GiB over "
               f"{header['cluster']}'s {host_gib:,.0f} GiB (its host_memory_GiB).")
    else:
        per = "per host (its ranks' resident memory together)" if _on_cpu(header) else "per GPU"
        msg = (f"{lead}: {counts} The least-memory configuration, {near.candidate.describe()}, needs "
               f"{near.must_fit_bytes / GiB:.1f} GiB {per}, {near.must_fit_bytes / GiB - usable:.1f} GiB over the "
               "usable.")
    gpus = _gpus_word(header)
    sentence, widen = ("", True) if host_bound else _largest_split_sentence(cfg, near, header.get("knobs"), gpus)
    # elastic_sentence here: the model grid a node range allows (tune/elastic.model_grid_sentence), past which more
    # TP / PP is no advice
    return (msg + sentence + elastic_pruned_sentence(result.invalid_by_rule) + elastic_sentence +
            _largest_model(result, cfg, near, gpus) +
            _infeasible_advice(cfg, host_bound, widen and not elastic_sentence, _on_cpu(header)))


def _on_cpu(header: Mapping[str, Any]) -> bool:
    """A job on CPU hardware (HardwareSpec.device): each rank is a process, and a host's ranks share its RAM
    (schedule/memory_cpu.py), so the messages speak of ranks and hosts, not GPUs."""
    return header.get("device") == "cpu"


def _gpus_word(header: Mapping[str, Any]) -> str:
    return "ranks" if _on_cpu(header) else "GPUs"


def _largest_split(cfg: Any, knobs: Any) -> int:
    """The most GPUs one model replica's weights can be split over by TP x PP (CP and DP hold whole copies of a stage's
    weights) in the searched space: the largest values tried (or kept) of each, at most the world size."""
    def most(knob: str) -> int:
        tried = (knobs or {}).get("searched", {}).get(knob) or [(knobs or {}).get("kept", {}).get(knob) or 1]
        return max(int(v) for v in tried)

    return min(cfg.world_size, most("tp") * most("pp"))


def _largest_split_sentence(cfg: Any, near: Any, knobs: Any, gpus: str = "GPUs") -> tuple[str, bool]:
    """(the sentence saying that even the largest split searched does not fit, or "", whether more TP/PP is still
    advice): where tune searches TP or PP, the least-memory layout at the largest TP x PP; where it keeps them (a
    script whose parser or framework does not take them), ZeRO-3, the most DeepSpeed shards."""
    c, searched = near.candidate, (knobs or {}).get("searched", {})
    if len(searched.get("tp", ())) > 1 or len(searched.get("pp", ())) > 1:
        limit = _largest_split(cfg, knobs)
        if c.tp * c.pp < limit:
            return "", True
        where = (f"over all {cfg.world_size} {gpus}, the most there are" if limit >= cfg.world_size else
                 f"over {limit} of the {cfg.world_size} {gpus}, the largest TP x PP the search space allows")
        return (f" Nothing fits even at the largest TP/PP: that layout already splits the model's weights (TP {c.tp} x "
                f"PP {c.pp}) {where}.", limit < cfg.world_size)
    if c.zero_stage == 3:
        dp = cfg.world_size // (c.tp * c.pp * c.cp)
        return (f" Nothing fits even at ZeRO-3, which shards the weights, gradients and optimizer states over all {dp} "
                f"data-parallel {gpus}; TP {c.tp} and PP {c.pp} are the command's, which tune does not change for it.",
                False)
    return "", "tp" not in (knobs or {}).get("rules", {})  # a rule (the script's parser) keeps TP: no advice to widen


def _largest_model(result: Any, cfg: Any, near: Any, gpus: str = "GPUs") -> str:
    """The sentence naming the largest model of this shape that would fit with `near`'s layout (or why none / unknown)."""
    if result.layers_that_fit:
        return (f" With that layout the largest model that would fit has {result.layers_that_fit} layers "
                f"(this one has {cfg.model.num_layers}; largest = most layers, in whole pipeline chunks, with the "
                f"hidden size, sequence length, batch and {gpus} kept).")
    if result.layers_that_fit == 0:  # not even one chunk fits by memory: say it, so the largest is never unsaid
        chunk = near.config.parallel.pp * near.config.parallel.vpp
        return (f" With that layout the largest model that would fit has no layers: no smaller model of this shape "
                f"fits either, not even {chunk} layer{'s' * (chunk > 1)} (one per pipeline chunk) with hidden size "
                f"{cfg.model.hidden_size}, sequence length {cfg.model.seq_length}, batch and {gpus} kept."
                + _longest_sequence(result, cfg, gpus == "ranks"))
    # None: the smaller models broke a stage rule of the command, so the largest that fits is not known
    return f" The largest model that would fit with that layout is {_layers_meaning(None)}."


def _longest_sequence(result: Any, cfg: Any, on_cpu: bool = False) -> str:
    """Where no layer count fits: the longest sequence with which the whole model would (its activations, not its
    weights, are over), else that none would."""
    seq = result.seq_length_that_fits
    if seq is None:
        alone = "each rank's process with its weights and optimizer state" if on_cpu else "the weights and optimizer state"
        return f" Nor would a shorter sequence: {alone} alone are over."
    pow2 = 1 << (seq.bit_length() - 1)  # the sequence lengths models are trained at are powers of two (2048 ... 128k)
    return (f" The largest configuration that would fit with that layout keeps all {cfg.model.num_layers} layers with "
            f"a sequence of at most {seq:,} tokens (this one has {cfg.model.seq_length:,}), e.g. --seq-length {pow2}.")


def _infeasible_advice(cfg: Any, host_bound: bool, widen: bool = True, on_cpu: bool = False) -> str:
    """What to change; `widen` False: the layout already spans every GPU, so more TP/PP is no advice; on a CPU the
    host's RAM holds all its ranks: fewer of them a host, or more RAM."""
    if on_cpu and not host_bound:
        return (" Run fewer ranks on each host (the same number over more hosts), or use hosts with more RAM (a "
                "hardware file's memory_capacity_GiB, --hardware / --cluster).")
    if host_bound:  # the host knobs of run --require-fit (schedule/memory_knobs._host_knobs), in the same words
        less = {"megatron": "a smaller --optimizer-offload-fraction, or no --optimizer-cpu-offload",
                "torch": "no FSDP CPU offload"}.get(cfg.framework, "offload_param / offload_optimizer to none or nvme, "
                                                    "a smaller offload_optimizer.ratio, no --checkpoint-in-cpu")
        return f" Offload less ({less}), use more nodes, or a cluster with more host RAM (--cluster)."
    if cfg.framework in ("megatron", "megatron-deepspeed"):
        more = ", or widen the search (--search) with more TP/PP" if widen else ""
        return f" Use more GPUs or a larger-memory GPU (--hardware){more}."
    if cfg.framework == "torch":  # DDP or FSDP: no ds_config to offload in, no knob tune changes in the command
        shard = ("" if cfg.optimizer.fsdp != "none" else
                 "shard the weights, gradients and optimizer state (FSDP, or DeepSpeed ZeRO with a ds_config), ")
        return (" Use more GPUs, a larger-memory GPU (--hardware), or cut memory where tune does not search it: "
                f"{shard}activation (gradient) checkpointing in the training script, or CPU offload.")
    script = "" if cfg.framework == "hf-deepspeed" else ", or activation checkpointing in the training script"
    return (" Use more GPUs, a larger-memory GPU (--hardware), or cut memory where tune does not search it: "
            f"offload_optimizer / offload_param to the CPU (offload_param needs ZeRO-3) in the ds_config{script}.")
