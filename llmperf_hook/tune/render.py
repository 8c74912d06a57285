"""Render a TuneResult: the top-K table (or JSON), the gain over the user's command, and the pruning counts.

Human units only here (GiB = 2**30 bytes, percent). "Changes" are shown as the exact flags / ds_config keys
that differ between the user's command and the tuned one (tune/apply.py produced both).

JSON (`--format json`, schema 1): `job`, `cluster`, `search_space`; `elastic` (only for a range of node counts, torchrun
--nnodes MIN:MAX or Slurm -N MIN-MAX: the size tune ranks at and what it checks at the smaller counts, tune/elastic.py);
`knobs` {searched {knob: values tried}, kept {knob: the command's value}, rules {knob: the framework rule that narrows
or fixes it}} (a setting the framework does not have, e.g. ZeRO under Megatron-LM, is in neither); `search`
{num_generated, num_considered, num_invalid, invalid_by_rule {rule: count}, num_oom_estimated, num_oom_predicted,
num_oom_host (of num_oom_predicted: fit the GPU, not the host RAM the offloads pin), num_oom_elastic_minimum (of
num_oom_predicted: an elastic range's layouts over memory at its minimum, tune/elastic.py; 0 otherwise), num_over_margin
(1: the user's command fits by predict's verdict, over tune's margin; in neither out-of-memory count),
host_capacity_bytes (per node; null = the cluster does not state it, not
checked), num_slower_by_estimate, num_fitting, num_full_predictions, memory_margin, elapsed_s, candidates_per_s};
`baseline` and each of `top` {tp, pp, vpp, cp, sequence_parallel, micro_batch_size, recompute,
recompute_num_layers, distributed_optimizer, zero_stage, ep, etp (null = expert TP follows TP), layout (the table's
layout column), step_time_s, tokens_per_s, mfu, peak_bytes_per_gpu, capacity_bytes, headroom_bytes (capacity less
predict's need: the peak on a GPU, a host's ranks together and their offloads on a CPU: headroom_bytes()), fits,
host_bytes_per_node, host_fits, tight, verdict (predict's GPU verdict: "fits", "fits, tight", "DOES NOT FIT"; `fits`
is tune's stricter rule)}, `top` entries also `changes` [{where: "argv" | ds_config path, key, old, new}]
(null = absent / removed); `speedup_over_baseline`; `applied` {argv, new_files} with --apply, else null.
Nothing fits (exit 3): {schema, error, exit_code 3, fits false, header, knobs, search, nearest {layout, peak_bytes,
must_fit_bytes (the allocated bytes tune's rule compares), host_bytes_per_node, short_of ("gpu" | "host"),
short_bytes (must_fit_bytes over the usable GPU memory, or the host bytes over the host RAM),
layers_that_fit (0 = no layer count fits, null = not known), layers_that_fit_means}}. Bad input (exit 2): {schema,
error, exit_code}; an --apply refused after the search (a launch script that does not pass its arguments on): the
result object above with error and exit_code 2 added (the changes to make by hand stay listed).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from llmperf_hook.schedule.memory_fit import verdict_words
from llmperf_hook.tune.apply import TunedCommand
from llmperf_hook.tune.infeasible import own_fits_over_margin, own_over_margin_sentence, predict_verdict
from llmperf_hook.tune.search import Evaluated, TuneResult

GiB = float(1 << 30)
JSON_SCHEMA = 1
"""The `schema` of every JSON object tune prints; raised only when a key changes meaning or goes away."""


@dataclass(frozen=True)
class Change:
    """One flag or config key that differs from the user's command."""

    where: str
    """"argv" or the ds_config path."""
    key: str
    old: str | None
    """None = absent in the user's command."""
    new: str | None
    """None = removed."""

    def __str__(self) -> str:
        prefix = "" if self.where == "argv" else "accelerate config " if self.where.endswith((".yaml", ".yml")) \
            else "ds_config "
        if self.new is None:
            return f"drop {prefix}{self.key}" + (f" {self.old}" if self.old else "")
        if self.old is None:
            return f"add {prefix}{self.key}" + (f" {self.new}" if self.new else "")
        if not self.old or not self.new:  # a bare switch (nargs='?') gains or loses its value: both forms as typed
            return " -> ".join(f"{prefix}{self.key} {v}".rstrip() for v in (self.old, self.new))
        return f"{prefix}{self.key} {self.old}->{self.new}"


def argv_flags(argv: Sequence[str]) -> dict[str, str]:
    """Flag -> value ("" for a switch); argparse's last-wins reading of `--flag value` / `--flag=value`."""
    out: dict[str, str] = {}
    for i, word in enumerate(argv):
        if not word.startswith("--") or word == "--":
            continue
        if "=" in word:
            key, value = word.split("=", 1)
            out[key] = value
        else:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            out[word] = "" if nxt.startswith("--") else nxt
    return out


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(_flatten(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


INLINE_WHERE = "ds_config in argv"
"""`where` of a key changed inside a config given in argv itself (base64 or JSON in place of a path)."""


def command_changes(user_argv: Sequence[str], tuned: TunedCommand, ds_original: Mapping[str, Any] | None,
                    script_at: tuple[int | None, int | None] = (None, None)) -> list[Change]:
    """`script_at`: where the training script stands in `user_argv` and in the tuned argv (apply.script_index), so the
    launcher's options and the script's flags are compared apart: `accelerate launch --gradient_accumulation_steps 2`
    is not the Trainer's --gradient_accumulation_steps, which --apply adds after the script."""
    changes: list[Change] = []
    for user_words, tuned_words in _sides(user_argv, tuned.argv, script_at):
        before, after = argv_flags(user_words), argv_flags(tuned_words)
        for k in [*before, *[k for k in after if k not in before]]:
            if before.get(k) != after.get(k):
                changes += _inline_config_changes(k, before.get(k), after.get(k)) or [
                    Change("argv", k, before.get(k), after.get(k))]
    for path, content in tuned.new_files.items():
        if Path(path).suffix in (".yaml", ".yml"):  # accelerate's config copy (tune/accelerate_fsdp_apply.py)
            changes += _key_changes(path, _untuned_yaml(path, user_argv), yaml.safe_load(content))
        else:
            changes += _key_changes(path, ds_original or {}, json.loads(content))
    return changes


def _untuned_yaml(path: str, user_argv: Sequence[str]) -> Mapping[str, Any]:
    """The accelerate config a tuned copy was made from, as loaded: the user's `accelerate launch --config_file`, else
    the copy's own name untuned (`default_config.llmperf-tuned.yaml` -> `default_config.yaml`, ds_config_rewrite.
    fresh_path's names); {} when it is gone."""
    from llmperf_hook.tune.accelerate_apply import accelerate_options_span
    from llmperf_hook.tune.accelerate_fsdp_apply import CONFIG_FILE_OPTIONS
    from llmperf_hook.tune.argv_edit import flag_value
    from llmperf_hook.tune.ds_config_rewrite import TUNED_SUFFIX

    span = accelerate_options_span(user_argv)
    given = flag_value(list(user_argv[span[0]:span[1]]), CONFIG_FILE_OPTIONS) if span else None
    original = Path(given or re.sub(re.escape(TUNED_SUFFIX) + r"(-\d+)?(\.[^.]*)$", r"\2", path))
    try:
        data = yaml.safe_load(original.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _sides(user_argv: Sequence[str], tuned_argv: Sequence[str],
           script_at: tuple[int | None, int | None]) -> list[tuple[Sequence[str], Sequence[str]]]:
    user_at, tuned_at = script_at
    if user_at is None or tuned_at is None:
        return [(user_argv, tuned_argv)]
    return [(user_argv[:user_at], tuned_argv[:tuned_at]), (user_argv[user_at:], tuned_argv[tuned_at:])]


def _key_changes(where: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    old, new = _flatten(before), _flatten(after)
    return [Change(where, k, _s(old.get(k)), _s(new.get(k))) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def _inline_config_changes(flag: str, old: str | None, new: str | None) -> list[Change]:
    """A ds_config flag whose value is the config itself (tune --apply rewrites it in place): its keys that changed,
    not two unreadable base64 words. [] when `flag` is not such a flag or either value is a path."""
    from llmperf_hook.frameworks.deepspeed_config import read_ds_config
    from llmperf_hook.tune import ds_config_rewrite as dsr

    if flag not in (*dsr.DS_CONFIG_FLAGS, dsr.HF_DEEPSPEED_FLAG) or not old or not new:
        return []
    hf = flag == dsr.HF_DEEPSPEED_FLAG
    if not (dsr.inline_form(old, hf) and dsr.inline_form(new, hf)):
        return []
    return _key_changes(INLINE_WHERE, read_ds_config(old, hf), read_ds_config(new, hf))


def _s(v: Any) -> str | None:
    return None if v is None else json.dumps(v) if not isinstance(v, str) else v


def _fit_label(ev: Evaluated, margin: float) -> str:
    """A row's memory verdict where it is not a plain fit within tune's margin. A row that predict's verdict says
    fits (schedule/memory_fit.py) is never "no fit": it fits, or fits, tight, over tune's stricter margin."""
    fits, tight = predict_verdict(ev)
    if ev.fits:  # within a --search memory_margin under the 3.8 % band, a listed row can still be tight
        return "  (fits, tight)" if tight else ""
    if not fits:
        return "  (no fit)"
    if not ev.host_fits:
        return "  (no fit: host RAM)"
    return f"  ({verdict_words(fits, tight)}: over tune's {100 * (1 - margin):.0f} % margin)"


def headroom_bytes(ev: Evaluated) -> float:
    """predict's own MemoryEstimate.headroom_bytes of the row: on a GPU the capacity less the peak (schedule/memory.py);
    on a CPU the host's RAM less its need, every rank of the host and the offloads it pins together, as they share it
    (schedule/memory_cpu.cpu_memory_estimate), not one rank's peak. A row without a memory estimate (a test's stand-in):
    capacity less peak."""
    memory = getattr(ev.estimate, "memory", None)
    return float(memory.headroom_bytes) if memory is not None else ev.capacity_bytes - ev.peak_bytes


def _row(rank: str, ev: Evaluated, changes: str, margin: float) -> str:
    e = ev.estimate
    head = headroom_bytes(ev) / GiB
    # The verdict goes last: inside the free-GiB column it pushed the layout and changes out of their columns.
    fit = _fit_label(ev, margin)
    return (f"{rank:>3}  {ev.step_time_s:9.3f}  {float(e.tokens_per_s):11,.0f}  {100 * float(e.mfu):5.1f}%  "
            f"{ev.peak_bytes / GiB:8.1f}  {head:8.1f}  {ev.candidate.describe():<40} {changes}{fit}")


def render_table(res: TuneResult, changes: Sequence[Sequence[Change]], header: Mapping[str, Any]) -> str:
    lines = [f"llmperf tune: {header['job']} on {header['cluster']}",
             f"search space: {header['space']}",
             *([f"elastic: {header['elastic']}"] if header.get("elastic") else []),
             *([knobs_line(header["knobs"], header.get("framework", "megatron"))] if header.get("knobs") else []),
             _pruning_line(res, header)]
    usable = (1 - res.memory_margin) * header["capacity_bytes"] / GiB
    cpu = header.get("device") == "cpu"  # schedule/memory_cpu.py: a host's ranks share its RAM
    fitted, ram = ("the resident memory of a host's ranks together", " of RAM") if cpu else ("allocated bytes", "")
    peak = ("is one rank's resident memory, free GiB the RAM left once a host's ranks (and offloads) are resident"
            if cpu else "includes the allocator's reserve")
    lines.append(f"fits = {fitted} (predict's rule) <= {usable:.1f} GiB ({100 * (1 - res.memory_margin):.0f} % of "
                 f"{header['capacity_bytes'] / GiB:.1f} GiB{ram}: memory_margin {res.memory_margin:g}); peak GiB {peak}"
                 f"{_host_clause(header)}")
    lines.append("")
    # The same widths as _row, so every heading sits over its column.
    lines.append(f"{'#':>3}  {'step (s)':>9}  {'tokens/s':>11}  {'MFU':>6}  {'peak GiB':>8}  {'free GiB':>8}  "
                 f"{'layout':<40} changes vs your command")
    if res.baseline is not None:
        lines.append(_row("you", res.baseline, "(your command)", res.memory_margin))
    for i, (ev, ch) in enumerate(zip(res.top, changes), 1):
        lines.append(_row(str(i), ev, ", ".join(str(c) for c in ch) or _no_change_label(ev, res.baseline),
                          res.memory_margin))
    gain = gain_line(res)
    if gain:
        lines += ["", gain]
    return "\n".join(lines)


MFU_WARNING = "predicted MFU "
"""How api.predict_config's implausible-MFU warning starts (api.mfu_bound)."""


def cost_model_notes(res: TuneResult) -> list[str]:
    """What `llmperf predict` says about its cost model, said once for the table: the warnings that every row's full
    prediction shares (the hardware's profile and its gaps: a CPU profile without its framework cost, a roofline in
    place of a profile, a calibration), and the highest implausible MFU among the rows with the row it is in (tune
    printed neither, so a CPU job's table showed step times predict itself flags as likely low)."""
    own = [("your command", res.baseline)] if res.baseline is not None else []
    rows = own + [(f"row {i}", ev) for i, ev in enumerate(res.top, 1)]
    if not rows:
        return []
    warnings = [tuple(getattr(ev.estimate, "warnings", ())) for _, ev in rows]
    notes = [w for w in dict.fromkeys(warnings[0]) if not w.startswith(MFU_WARNING) and all(w in ws for ws in warnings)]
    flagged = [(float(ev.estimate.mfu), label, w) for (label, ev), ws in zip(rows, warnings) for w in ws
               if w.startswith(MFU_WARNING)]
    if flagged:
        _, label, worst = max(flagged)
        others = len({lab for _, lab, _ in flagged}) - 1
        rows_text = label + (f" and {others} other row{'s' * (others > 1)}" if others else "")
        notes.append(f"{rows_text}: {worst}")
    return notes


_KNOB_NAMES = {"micro_batch_size": "micro-batch", "tp": "TP", "pp": "PP", "vpp": "VPP", "cp": "CP",
               "sequence_parallel": "SP", "recompute": "recompute", "distributed_optimizer": "distributed optimizer",
               "zero_stage": "ZeRO", "ep": "EP", "etp": "expert TP"}


def split_knobs(values: Mapping[str, Sequence[Any]], own: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{"searched": {knob: values tried}, "kept": {knob: the command's value}}: a knob whose only value is the
    command's own was not searched (the framework cannot change it from the command, or --search pinned it)."""
    searched = {k: list(v) for k, v in values.items() if list(v) != [own.get(k)]}
    kept = {k: own.get(k) for k in values if k not in searched}
    return {"searched": searched, "kept": kept}


def knobs_line(knobs: Mapping[str, Mapping[str, Any]], framework: str = "megatron") -> str:
    """The table's 'searched: TP 1, 2, 4, 8; ... | kept as your command: PP 2' line (split_knobs' two halves), then
    one line per framework rule that narrows or fixes a knob (candidates.knob_rules). Outside Megatron-LM the
    sequence split is DeepSpeed-Ulysses (--ds-sequence-parallel-size, ds_config sequence_parallel_size), named so."""
    names = {**_KNOB_NAMES, **({"cp": "Ulysses SP"} if framework != "megatron" else {})}
    searched = "; ".join(f"{names.get(k, k)} {', '.join(map(_knob_value, v))}" for k, v in knobs["searched"].items())
    kept = "; ".join(f"{names.get(k, k)} {_knob_value(v)}" for k, v in knobs["kept"].items())
    rules = [f"  {names.get(k, k)}: {why}" for k, why in knobs.get("rules", {}).items()]
    return "\n".join([f"searched: {searched or 'nothing'} | kept as your command: {kept or 'nothing'}", *rules])


def _knob_value(value: Any) -> str:
    """A switch reads on / off; None is expert TP left to follow TP (candidates.FOLLOW_TP)."""
    if value is None:
        return "follows TP"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _no_change_label(ev: Evaluated, baseline: Evaluated | None) -> str:
    """What a row whose command equals the user's says: "(same as yours)" only when its layout is the user's too; a
    layout that differs with no flag or ds_config key changed means --apply cannot express it (OpenRLHF rows were
    labelled "(same as yours)" while their micro batch and ZeRO stage differed), and the row says so."""
    if baseline is None or ev.candidate == baseline.candidate:
        return "(same as yours)"
    return "(differs from yours, but no flag or ds_config key of your command sets it: change it by hand)"


def _pruning_line(res: TuneResult, header: Mapping[str, Any]) -> str:
    rules = "; ".join(f"{k}: {v:,}" for k, v in res.invalid_by_rule.items())
    return (f"{res.num_considered:,} distinct candidates ({res.num_generated:,} generated) in "
            f"{header['elapsed_s']:.2f} s: {res.num_invalid:,} invalid ({rules or 'none'}); "
            f"{res.num_oom_estimated + res.num_oom_predicted:,} out of memory ({res.num_oom_estimated:,} by the "
            f"memory model alone, {res.num_oom_predicted:,} by the full prediction{_host_pruned(res, header)}"
            f"{_elastic_pruned(res)}); "
            f"{_over_margin_count(res)}{res.num_slower:,} slower than the "
            f"top {len(res.top) or 'K'} by estimate; {res.num_fitting:,} predicted in full and fit")


def _host_clause(header: Mapping[str, Any]) -> str:
    """The host half of the fit rule, for a command whose offloads keep state in host memory."""
    if not header.get("host_offload"):
        return ""
    capacity = header.get("host_capacity_bytes") or 0
    if not capacity:
        return "; host memory of the offloads NOT checked: the cluster states no host RAM (host_memory_GiB)"
    return f" and the offloads' host memory <= {capacity / GiB:,.0f} GiB per node (the cluster's host RAM)"


def _host_pruned(res: TuneResult, header: Mapping[str, Any]) -> str:
    """', N of them out of host RAM (...)' where the command offloads and the cluster states its host RAM."""
    capacity = header.get("host_capacity_bytes") or 0
    if not capacity or not (res.num_oom_host or header.get("host_offload")):
        return ""
    return (f", {res.num_oom_host:,} of them out of host RAM: they fit the GPU, but their offloads pin more than the "
            f"cluster's {capacity / GiB:,.0f} GiB per node")


def _elastic_pruned(res: TuneResult) -> str:
    """', N of them at the elastic minimum' where an elastic range's minimum ruled layouts out (tune/elastic.py)."""
    if not res.over_at_minimum:
        return ""
    return (f", {len(res.over_at_minimum):,} of them at the elastic minimum, the fewest nodes the job may start with "
            "(the memory model there, before any step-time prediction)")


def _over_margin_count(res: TuneResult) -> str:
    """'1 (your command) fits by predict's verdict, over tune's margin; ' where it is so: not out of memory."""
    if not res.num_over_margin:
        return ""
    return f"{res.num_over_margin:,} (your command) fits by predict's verdict but is over tune's margin; "


def gain_line(res: TuneResult) -> str:
    if own_fits_over_margin(res):
        return f"nothing fits tune's {100 * (1 - res.memory_margin):.0f} % margin. {own_over_margin_sentence(res)}"
    if not res.top or res.baseline is None:
        return "" if res.top else "nothing fits"
    best, base = res.top[0], res.baseline
    usable = (1 - res.memory_margin) * base.capacity_bytes / GiB
    if not base.fits and predict_verdict(base)[0] and base.host_fits:  # over tune's margin only
        return (f"{own_over_margin_sentence(res)} The fastest within the margin takes {best.step_time_s:.3f} s per "
                f"step (yours {base.step_time_s:.3f} s)")
    if not base.fits and base.must_fit_bytes / GiB <= usable:  # the GPU fits: the host RAM does not
        return (f"your command is predicted NOT to fit the host RAM (its offloads pin {base.host_bytes / GiB:,.0f} GiB per "
                f"node > {base.host_capacity_bytes / GiB:,.0f} GiB); the fastest that fits takes {best.step_time_s:.3f} s per "
                f"step (yours would take {base.step_time_s:.3f} s if it fitted)")
    if not base.fits:
        return (f"your command is predicted NOT to fit ({base.must_fit_bytes / GiB:.1f} GiB > {usable:.1f} GiB usable); "
                f"the fastest that fits takes {best.step_time_s:.3f} s per step (yours would take "
                f"{base.step_time_s:.3f} s if it fitted)")
    speedup = base.step_time_s / best.step_time_s
    return (f"predicted gain over your command: {base.step_time_s:.3f} s -> {best.step_time_s:.3f} s per step, "
            f"{speedup:.2f}x ({100 * (1 - best.step_time_s / base.step_time_s):.1f} % less step time)")


def _evaluated_json(ev: Evaluated, changes: Sequence[Change] | None) -> dict[str, Any]:
    e = ev.estimate
    out: dict[str, Any] = {
        **asdict(ev.candidate), "layout": ev.candidate.describe(), "step_time_s": ev.step_time_s, "tokens_per_s": float(e.tokens_per_s),
        "mfu": float(e.mfu), "peak_bytes_per_gpu": ev.peak_bytes, "capacity_bytes": ev.capacity_bytes,
        "headroom_bytes": headroom_bytes(ev), "fits": ev.fits,
        "host_bytes_per_node": ev.host_bytes, "host_fits": ev.host_fits,
        "tight": predict_verdict(ev)[1], "verdict": verdict_words(*predict_verdict(ev)),
    }
    if changes is not None:
        out["changes"] = [asdict(c) for c in changes]
    return out


def search_json(res: TuneResult, header: Mapping[str, Any]) -> dict[str, Any]:
    """How many candidates were considered and why the rest were pruned (the `search` object, also in the
    nothing-fits JSON)."""
    return {
        "num_generated": res.num_generated, "num_considered": res.num_considered,
        "num_invalid": res.num_invalid, "invalid_by_rule": dict(res.invalid_by_rule),
        "num_oom_estimated": res.num_oom_estimated, "num_oom_predicted": res.num_oom_predicted,
        "num_oom_host": res.num_oom_host, "num_oom_elastic_minimum": len(res.over_at_minimum),
        "num_over_margin": res.num_over_margin,
        "host_capacity_bytes": header.get("host_capacity_bytes") or None,
        "num_slower_by_estimate": res.num_slower, "num_fitting": res.num_fitting,
        "num_full_predictions": res.num_full_predictions,
        "memory_margin": res.memory_margin, "elapsed_s": header["elapsed_s"],
        "candidates_per_s": res.num_considered / max(header["elapsed_s"], 1e-9),
    }


def render_json(res: TuneResult, changes: Sequence[Sequence[Change]], header: Mapping[str, Any],
                applied: TunedCommand | None = None) -> dict[str, Any]:
    best, base = (res.top[0] if res.top else None), res.baseline
    return {
        "schema": JSON_SCHEMA,
        "job": header["job"], "cluster": header["cluster"], "search_space": header["space"],
        **({"elastic": header["elastic"]} if header.get("elastic") else {}),
        "knobs": header.get("knobs"), "search": search_json(res, header),
        "baseline": _evaluated_json(base, None) if base else None,
        "top": [_evaluated_json(ev, ch) for ev, ch in zip(res.top, changes)],
        "speedup_over_baseline": (base.step_time_s / best.step_time_s) if best and base else None,
        "applied": {"argv": list(applied.argv), "new_files": sorted(applied.new_files)} if applied else None,
    }
