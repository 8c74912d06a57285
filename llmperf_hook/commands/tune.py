"""`llmperf tune [--top K] [--search FILE] [--apply] [--dry-run] [--format table|json] -- <command>`.

Holds model, world size and global batch fixed; searches micro-batch size, pipeline degree, virtual stages,
TP, CP, sequence parallel, recompute and optimizer sharding (configs/search/); prints the top-K by predicted
step time with exactly what changes in the command. `--apply` rewrites the command for the best candidate
(new ds_config next to the original, never overwriting it) and launches it as `llmperf run` does (exec);
with `--dry-run` it prints the command instead. Exit 3 when nothing fits.
The table goes to stdout; with `--format json` stdout holds exactly one JSON object.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from typing import Any, Mapping, Sequence

import click

from llmperf_hook.errors import InfeasibleError, LlmperfError, UsageError
from llmperf_hook.tune.infeasible import (host_offloads, host_unchecked, infeasible_message, nearest_json,
                                         own_fits_over_margin)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--top", "top_arg", default="5", show_default=True, metavar="K", help="How many configurations to show, at least 1 (at most the fitting ones found).")
@click.option("--search", "search_file", default=None, help="Search-space YAML (knob: [values] | auto, e.g. 'micro_batch_size: [1, 2, 4]') whose keys override "
              "configs/search/megatron.yaml (Megatron-LM, Megatron-DeepSpeed) or deepspeed.yaml (DeepSpeed, HF "
              "Trainer), where every key is documented; a bad key or value exits 2.")
@click.option("--apply", "apply_best", is_flag=True, help="Rewrite the command for the best configuration and launch it.")
@click.option("--dry-run", is_flag=True, help="With --apply: print the rewritten command instead of launching it.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--cluster", default=None, help="Cluster preset name or YAML file (default: see `llmperf predict`).")
@click.option("--hardware", default=None, help="GPU preset name or YAML file (overrides the cluster's GPU).")
@click.option("--nnodes", type=int, default=None, help="Override the number of nodes of the command.")
@click.option("--nproc-per-node", type=int, default=None, help="Override GPUs per node of the command.")
@click.option("--model", default=None, help="Model preset or file for scripts that do not state the model shape.")
@click.argument("launch", nargs=-1, type=click.UNPROCESSED)
def command(top_arg: str, search_file: str | None, apply_best: bool, dry_run: bool, fmt: str, cluster: str | None,
            hardware: str | None, nnodes: int | None, nproc_per_node: int | None, model: str | None,
            launch: Sequence[str]) -> None:
    """Search parallel layouts of a launch command and show (or launch) the fastest that fits.

    Keeps the model, world size and global batch; a candidate fits when its predicted peak is at most 95 % of
    the GPU's memory (memory_margin 0.05 in the search space; predict's verdict uses 100 %). Exit 3 when
    nothing fits; when only your own command fits (predict's "fits" or "fits, tight") but over the margin, it is
    shown and tune exits 0 (3 with --apply: nothing to launch).
    """
    argv = list(launch[1:] if launch[:1] == ("--",) else launch)  # click normally consumes the `--` itself
    started = time.perf_counter()
    try:
        top_k = _check_usage(argv, top_arg, dry_run, apply_best)
        job, cfg, spec = _resolve(argv, cluster, hardware, nnodes, nproc_per_node, model)
        result, space, fork_rules = _search(cfg, spec, search_file, top_k, argv, job.script_args, job.script, job.env,
                                            job=job)
    except LlmperfError as err:  # bad input (exit 2) before any search: still one JSON object on stdout
        if fmt == "json":
            _echo_json_error(str(err), err.exit_code)
        raise
    elapsed = time.perf_counter() - started
    if search_file and _only_own_valid(result):
        click.echo(f"llmperf tune: warning: {_only_own_note(search_file, result)}", err=True)
    from llmperf_hook.tune.render import cost_model_notes

    for note in cost_model_notes(result):  # as predict says them: the step times below rest on that cost model
        click.echo(f"llmperf tune: warning: {note}", err=True)
    header = {**_header(cfg, spec, space.source, elapsed, job), "knobs": _knobs(cfg, space, spec.gpus_per_node, fork_rules)}
    if job.elastic_min_nnodes is not None and result.baseline is not None:
        _warn_own_over_at_minimum(result, spec, job, space.memory_margin)
    if header["host_offload"] and not spec.host_memory_bytes:
        click.echo(f"llmperf tune: warning: {host_unchecked(cfg, spec)}", err=True)
    if not result.top and not (own_fits_over_margin(result) and not apply_best):
        # Exit 3 only when nothing runs: a command that predict says fits (even tightly) is shown, exit 0, with
        # nothing better within tune's margin; --apply then has nothing to launch, so it still exits 3.
        message = infeasible_message(result, cfg, header, _elastic_sentence(result, spec, job, space.memory_margin))
        if fmt == "json":  # stdout holds one JSON object in every case; the message also goes to stderr
            from llmperf_hook.tune.render import search_json

            _echo_json_error(message, 3, fits=False, header=header, knobs=header["knobs"],
                             search=search_json(result, header), nearest=nearest_json(result))
        raise InfeasibleError(message)
    plans, changes = _plans(argv, cfg, result)
    applied = plans[0] if apply_best else None
    if applied is not None and applied.launch_refusal:
        _refuse_before_output(applied.launch_refusal, fmt)
    from llmperf_hook.tune.apply import is_batch_script

    batch_script = applied is not None and is_batch_script(argv, job.script)
    refusal = None
    if batch_script:  # applied only by appending to the script's arguments where it passes them on ("$@")
        applied, refusal = _script_plan(argv, plans[0], changes[0], cfg, result.top[0].candidate,
                                        (cluster, hardware, nnodes, nproc_per_node, model))
    if applied is not None and refusal is None:
        refusal = _write_before_output(applied, dry_run)
    if fmt == "json":
        from llmperf_hook.tune.render import render_json

        refused = {"error": refusal, "exit_code": UsageError.exit_code} if refusal else {}
        click.echo(json.dumps({**render_json(result, changes, header, applied), **refused}, indent=2))
    else:
        from llmperf_hook.tune.render import render_table

        click.echo(render_table(result, changes, header))
    if refusal:
        raise UsageError(refusal)
    if applied is not None:
        _apply(applied, dry_run, quiet=fmt == "json", unchanged=list(applied.argv) == argv and not applied.new_files)


def _elastic_rule(spec: Any, job: Any) -> Any:
    """The memory rule of an elastic launch's range (tune/elastic.py), None for a fixed node count."""
    from llmperf_hook.tune.elastic import elastic_memory

    return elastic_memory(job, lambda c: memory_only(c, spec))


def _elastic_sentence(result: Any, spec: Any, job: Any, margin: float) -> str:
    """What the exit-3 message adds for a node range: global batches every count splits (where a count starts no
    layout), or the range that fits memory (where the minimum's memory ruled layouts out)."""
    from llmperf_hook.tune.elastic import (BETWEEN_RULE, FIXED_TRIAD_RULE, WORLD_RULE, decrease_batch_hint,
                                           global_batch_hint, model_grid_sentence, over_at_minimum_sentence)

    if result.elastic_counts_starting_nothing and not any(FIXED_TRIAD_RULE in r for r in result.invalid_by_rule):
        own = result.baseline.config if result.baseline else None
        return (global_batch_hint(job, own.batch.global_batch_size if own else 0) +
                decrease_batch_hint(own.framework if own else "", job.script_args, result.invalid_by_rule))
    rule = _elastic_rule(spec, job)
    if rule is None:
        return ""
    if not result.over_at_minimum:  # nothing fits the maximum's memory with a grid every count starts
        grid_refused = any(rule_name.startswith((WORLD_RULE, BETWEEN_RULE)) for rule_name in result.invalid_by_rule)
        return model_grid_sentence(job) if result.nearest is not None and grid_refused else ""
    return over_at_minimum_sentence(result.over_at_minimum, rule, (1 - margin) * spec.gpu.memory_capacity_bytes)


def _warn_own_over_at_minimum(result: Any, spec: Any, job: Any, margin: float) -> None:
    """A warning when the user's own layout, tune's baseline, fits the maximum but not the elastic minimum."""
    from llmperf_hook.schedule.memory_rule import fits_gpu

    rule = _elastic_rule(spec, job)
    usable = (1 - margin) * spec.gpu.memory_capacity_bytes
    peak = rule.must_fit_at_minimum(result.baseline.config) if rule is not None and result.baseline.fits else None
    if peak is not None and not fits_gpu(peak, usable):
        click.echo(f"llmperf tune: warning: your command runs out of memory at the elastic minimum "
                   f"({rule.least_nnodes} node{'s' * (rule.least_nnodes > 1)}: {peak / 2**30:.1f} GiB per GPU > "
                   f"{usable / 2**30:.1f} GiB usable); it is priced at {job.nnodes} nodes as the baseline", err=True)


def _only_own_valid(result: Any) -> bool:
    """Whether every candidate of the space but the command's own broke a layout rule (its own is always ranked)."""
    return result.num_considered > 1 and result.num_invalid >= result.num_considered - 1


def _only_own_note(search_file: str, result: Any) -> str:
    rules = "; ".join(f"{rule}: {n:,}" for rule, n in result.invalid_by_rule.items())
    return (f"--search {search_file}: every layout it adds to your command's own is invalid for this job ({rules}), "
            "so only your command was ranked; widen --search to values this job's size and model allow.")


def _check_usage(argv: list[str], top_arg: str, dry_run: bool, apply_best: bool) -> int:
    """The options' own rules (-> the --top count), checked here rather than by click so that --format json still
    prints its one object (click's type=int refused `--top abc` with its usage text alone)."""
    if not argv:
        raise UsageError("llmperf tune needs the launch command after `--`, e.g. "
                         "`llmperf tune -- torchrun --nproc-per-node 8 pretrain_gpt.py ...`.")
    try:
        top_k = int(top_arg)
    except ValueError:
        raise UsageError(f"--top {top_arg!r} is not a whole number; give how many configurations to list, 1 or more "
                         "(default 5).") from None
    if top_k < 1:
        raise UsageError(f"--top {top_k}: tune lists at least one configuration; give --top 1 or more (default 5).")
    if dry_run and not apply_best:
        raise UsageError("--dry-run only works with --apply (print the rewritten command instead of launching it); "
                         "add --apply, or drop --dry-run: without --apply tune never launches anything.")
    return top_k


def _refuse_before_output(message: str, fmt: str) -> None:
    """An --apply that must not launch (a layout tuned for another world size) stops before the result is printed
    as if it would be applied (exit 2); with --format json stdout still holds one JSON object, the error."""
    if fmt == "json":
        _echo_json_error(message, UsageError.exit_code)
    raise UsageError(message)


def _echo_json_error(message: str, exit_code: int, **extra: Any) -> None:
    """The one JSON object of a run that exits non-zero (tune/render.py documents its keys)."""
    from llmperf_hook.tune.render import JSON_SCHEMA

    click.echo(json.dumps({"schema": JSON_SCHEMA, "error": message, "exit_code": exit_code, **extra}, indent=2))


def _script_plan(argv: list[str], line_plan: Any, changes: Any, cfg: Any, tuned: Any,
                 options: tuple[str | None, str | None, int | None, int | None, str | None]) -> tuple[Any, str | None]:
    """(plan, refusal) for --apply on a launch script file: the changes of its launch line (`line_plan`, `changes`)
    appended to its arguments where the line passes them on (tune/script_forward.py); `options` are tune's cluster /
    hardware / size / model."""
    from llmperf_hook import api
    from llmperf_hook.frameworks.resolve import JobOverrides
    from llmperf_hook.tune.script_forward import apply_to_script

    cluster, hardware, nnodes, nproc_per_node, model = options
    overrides = JobOverrides(nnodes=nnodes, nproc_per_node=nproc_per_node, model=model)

    def reread(words: list[str]) -> Any:
        return api.resolve_command(words, dict(os.environ), cluster=cluster, hardware=hardware, overrides=overrides)[1]

    got = apply_to_script(argv, line_plan, changes, cfg, tuned, reread)
    return got.plan, got.refusal


def _resolve(argv: list[str], cluster: str | None, hardware: str | None, nnodes: int | None,
             nproc_per_node: int | None, model: str | None) -> tuple[Any, Any, Any]:
    from llmperf_hook import api
    from llmperf_hook.frameworks.resolve import JobOverrides
    from llmperf_hook.refine.calibration import calibration_store_problem

    overrides = JobOverrides(nnodes=nnodes, nproc_per_node=nproc_per_node, model=model)
    job, cfg, spec, notes = api.resolve_command(argv, dict(os.environ), cluster=cluster, hardware=hardware,
                                                overrides=overrides)
    for note in (*notes, *cfg.warnings):  # as predict shows them: an ignored option or unmodelled setting is never silent
        click.echo(f"llmperf tune: warning: {note}", err=True)
    store_problem = calibration_store_problem(spec.gpu.name, spec.name, cfg.framework)
    if store_problem:  # a damaged store: every candidate is ranked without the calibrations refine stored there
        click.echo(f"llmperf tune: warning: {store_problem}", err=True)
    return job, cfg, spec


def _search(cfg: Any, spec: Any, search_file: str | None, top_k: int, argv: Sequence[str] = (),
            script_args: Sequence[str] = (), script: str = "",
            env: Mapping[str, str] | None = None, job: Any = None) -> tuple[Any, Any, dict[str, str]]:
    """The search over the command's space, the space and the knobs the command's fork keeps (knob -> why);
    `script_args` are the training script's own flags as the launch was parsed (inside `sh -c`, an sbatch or a bash
    script, variables expanded: ParsedJob.script_args), `script` the training script, `env` the job's environment
    (ParsedJob.env: its DeepSpeed release decides which ZeRO stages its ds_config allows), `job` the ParsedJob (the
    checks explain makes once stage, engine and SP are final: tune/assemble_rules.py)."""
    from dataclasses import replace

    from llmperf_hook import api
    from llmperf_hook.frameworks.validation import validate_config
    from llmperf_hook.tune.candidates import generate_candidates
    from llmperf_hook.tune.assemble_rules import assemble_rule_masks
    from llmperf_hook.tune.command_rules import all_rules, command_rule_masks
    from llmperf_hook.tune.elastic import elastic_rule_masks, own_elastic_problem
    from llmperf_hook.tune.fork_knobs import pin_fork_knobs
    from llmperf_hook.tune.search import search_candidates
    from llmperf_hook.tune.search_space import (ignored_knobs, load_search_space, no_knob_note, read_search_file,
                                                sets_a_knob)

    try:  # the user's file read once: it may be a pipe (`--search <(...)`)
        asked_raw = read_search_file(search_file) if search_file else {}
        space = load_search_space(search_file, cfg.framework, asked_raw)
    except UnicodeDecodeError as err:
        raise UsageError(f"--search {search_file}: not UTF-8 text (byte {err.start}: {err.reason}), so not a YAML search "
                         f"space. Give a YAML file like those in configs/search/.") from None
    # the command's ds_config parsed once at every ZeRO stage: the stages it refuses are not searched, and the checks
    # explain makes at assemble time read the tuned copy's settings (tune/assemble_rules.py)
    ds_settings = _ds_settings(argv, env, (cfg.nnodes, cfg.nproc_per_node)) if cfg.framework != "megatron" else None
    if cfg.framework != "megatron":
        space = replace(space, zero_stage=_zero_stages(cfg, space.zero_stage, ds_settings))
    cp_sizes = "--hierarchical-context-parallel-sizes"
    if cfg.framework == "megatron" and any(w == cp_sizes or w.startswith(cp_sizes + "=") for w in script_args):
        # arguments.py asserts context_parallel_size == prod(hierarchical sizes): the command's flag fixes CP
        space = replace(space, context_parallel=(cfg.parallel.cp,))
        click.echo(f"llmperf tune: warning: --hierarchical-context-parallel-sizes fixes context parallel at "
                   f"{cfg.parallel.cp} (Megatron asserts CP = their product); CP is not searched", err=True)
    if search_file and not sets_a_knob(asked_raw):
        click.echo(f"llmperf tune: warning: {no_knob_note(search_file, cfg.framework)}", err=True)
    modes_only_megatron = sorted(set(space.recompute) - {"none", "full"}) if "recompute" in asked_raw else []
    space, switches = _trainer_checkpointing(cfg, space, script, script_args, argv)
    if switches and modes_only_megatron:
        click.echo(f"llmperf tune: warning: --search {search_file}: recompute {', '.join(modes_only_megatron)} is "
                   f"Megatron's; {_checkpointing_switch(cfg)} is on (full recompute of every layer) or off, so only "
                   "none and full are tried", err=True)
    for note in ignored_knobs(search_file, cfg.framework, cfg.model.num_experts, asked_raw,
                              frozenset({"recompute"} if switches else ())) if search_file else ():
        click.echo(f"llmperf tune: warning: {note}", err=True)
    asked = frozenset(asked_raw)
    pins = pin_fork_knobs(space, cfg, script, script_args, asked)  # flags the fork's parser lacks are never written
    for note in pins.warnings:
        click.echo(f"llmperf tune: warning: {note}", err=True)
    space = pins.space
    table = generate_candidates(cfg, space, spec.gpus_per_node)
    rules = command_rule_masks(cfg, script_args)
    if job is not None:
        rules = all_rules(rules, assemble_rule_masks(cfg, job, ds_settings), elastic_rule_masks(cfg, job))
        own_problem = own_elastic_problem(cfg, job)
        if own_problem:
            click.echo(f"llmperf tune: warning: {own_problem}", err=True)
    result = search_candidates(cfg, spec, table, top_k=top_k, margin=space.memory_margin,
                               predict=api.predict_config, validate=validate_config, memory=memory_only,
                               command_rules=rules, elastic=_elastic_rule(spec, job) if job is not None else None)
    return result, space, pins.rules


def _trainer_checkpointing(cfg: Any, space: Any, script: str, script_args: Sequence[str],
                           argv: Sequence[str]) -> tuple[Any, bool]:
    """(space, whether tune switches the job's checkpointing: the Trainer's --gradient_checkpointing, or accelerate's
    FSDP plugin's in its launcher): a Trainer job under DeepSpeed, DDP or FSDP searches it on and off, unless its
    --fsdp_config turns on FSDP's own checkpointing or the script's own parser lacks the flag (then, with a warning,
    the command's: tune/trainer_checkpointing.py)."""
    from dataclasses import replace

    from llmperf_hook.tune.accelerate_fsdp_apply import plugin_checkpointing, plugin_switch_kept
    from llmperf_hook.tune.candidate import candidate_of
    from llmperf_hook.tune.trainer_checkpointing import checkpointing_kept, trainer_switches_checkpointing

    if plugin_checkpointing(cfg):  # accelerate's FSDP plugin: switched in its launcher (tune/accelerate_fsdp_apply.py)
        why = plugin_switch_kept(argv)
    elif cfg.framework == "hf-deepspeed" or trainer_switches_checkpointing(cfg):
        why = checkpointing_kept(script, script_args)
        why = why and f"{why}: --gradient_checkpointing is not searched (kept as your command has it)"
    else:
        return space, False
    if why is None:
        return space, True
    click.echo(f"llmperf tune: warning: {why}", err=True)
    return replace(space, recompute=(candidate_of(cfg).recompute,)), True


def _checkpointing_switch(cfg: Any) -> str:
    from llmperf_hook.tune.accelerate_fsdp_apply import plugin_checkpointing

    return "accelerate's FSDP activation checkpointing" if plugin_checkpointing(cfg) else "--gradient_checkpointing"


def _zero_stages(cfg: Any, stages: tuple[int, ...], ds_settings: Mapping[int, Any] | None) -> tuple[int, ...]:
    """The ZeRO stages of the space that the command's ds_config (`ds_settings`: _ds_settings) lets the job's
    DeepSpeed release run; where it refuses every one listed, the command's own stage, with a warning."""
    from llmperf_hook.tune.ds_config_rewrite import stages_accepted

    accepted = stages_accepted(ds_settings, stages)
    if accepted is None:  # no ds_config to check the stages against
        return stages
    if not accepted:
        own = cfg.optimizer.zero_stage
        click.echo(f"llmperf tune: warning: zero_stage {list(stages)} of the search space: the command's ds_config makes "
                   f"DeepSpeed refuse each of them (e.g. a partial optimizer offload is ZeRO-3 only); ZeRO is kept at "
                   f"the command's stage {own}", err=True)
        return (own,)
    return accepted


def _ds_settings(argv: Sequence[str], env: Mapping[str, str] | None, size: tuple[int | None, int | None]) -> Any:
    """ZeRO stage (0-3, every stage a search space may hold) -> the command's ds_config parsed at that stage for the
    job's DeepSpeed release (of `env`); None: no readable ds_config. The ds_config is named on a launch script's own
    line (its here-documents written before it), else on the command itself."""
    from llmperf_hook.tune.apply import batch_script_job
    from llmperf_hook.tune.ds_config_rewrite import ds_settings_at_stages

    script = batch_script_job(argv, size)  # `size`: the job's, for a launch line that does not say it
    line, written = ([script.script, *script.script_args], script.script_files) if script else (list(argv), None)
    return ds_settings_at_stages(line, (0, 1, 2, 3), written, env)


def memory_only(cfg: Any, spec: Any) -> Any:
    """The memory verdict of `llmperf predict` without the step-time stages (graph + memory model only)."""
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.schedule.memory import estimate_memory

    return estimate_memory(cfg, build_graph(cfg, spec), spec)


def _header(cfg: Any, spec: Any, space_source: str, elapsed_s: float, parsed: Any = None) -> dict[str, Any]:
    from llmperf_hook.tune.elastic import elastic_note

    m = cfg.model
    elastic = elastic_note(parsed) if parsed is not None else None
    job = (f"{cfg.framework} {m.num_layers} layers x hidden {m.hidden_size}, seq {m.seq_length}, "
           f"{cfg.world_size} GPUs, global batch {cfg.batch.global_batch_size}")  # the form tests parse: kept
    return {"job": job, "framework": cfg.framework, **({"elastic": elastic} if elastic else {}),
            "cluster": f"{spec.name} ({spec.gpu.name})", "space": space_source, "elapsed_s": elapsed_s,
            "capacity_bytes": spec.gpu.memory_capacity_bytes, "device": spec.gpu.device,
            "host_capacity_bytes": spec.host_memory_bytes, "host_offload": host_offloads(cfg)}


def _knobs(cfg: Any, space: Any, gpus_per_node: int, fork_rules: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Which knobs were searched (values tried) and which kept as the command has them (tune/render.split_knobs);
    `fork_rules`: the knobs the command's fork keeps, and why (tune/fork_knobs.py)."""
    from dataclasses import asdict

    from llmperf_hook.tune.candidate import candidate_of
    from llmperf_hook.tune.candidates import knob_rules, searched_values
    from llmperf_hook.tune.render import split_knobs

    return {**split_knobs(searched_values(cfg, space, gpus_per_node), asdict(candidate_of(cfg))),
            "rules": {**knob_rules(cfg, space), **fork_rules}}


def _plans(argv: list[str], cfg: Any, result: Any) -> tuple[list[Any], list[Any]]:
    """The rewritten command of every top candidate, and its exact flag / config-key changes."""
    from dataclasses import replace
    from pathlib import Path

    from llmperf_hook.tune import ds_config_rewrite as dsr
    from llmperf_hook.tune.apply import (batch_script_job, expand_flag_variables, launch_words, plan_tuned_command,
                                         script_index)
    from llmperf_hook.tune.render import command_changes

    plans = [plan_tuned_command(argv, cfg, ev.candidate, ev.config) for ev in result.top]
    shown = expand_flag_variables(argv)  # flags inside `$GPT_ARGS` compared as the parser read them
    script = batch_script_job(shown, (cfg.nnodes, cfg.nproc_per_node))  # `sbatch job.sh`: the line the user edits
    before = [script.script, *script.script_args] if script else launch_words(shown)  # `sh -c CMD`: CMD's launch
    ref = dsr.find_ds_config(before)  # the ds_config of that line (a script's own), whose keys the changes list
    written = script.script_files.get(os.path.normpath(ref.path)) if script and ref else None  # a here-document's
    original = None
    if ref is not None and cfg.framework != "megatron" and (written or os.path.isfile(ref.path)):
        original = dsr.read_ds_config(Path(ref.path), written)
    elif ref is None and (plugin_file := _plugin_config_file(before)) is not None:
        original = dsr.read_ds_config(Path(plugin_file))  # accelerate's: its copy's keys are diffed against it
    shown_plans = [replace(p, argv=tuple(launch_words(p.argv))) for p in plans]
    at = script_index(before)
    return plans, [command_changes(before, replace(p, new_files={**_reused_copy(p), **p.new_files}), original,
                                   (at, script_index(p.argv) if at is not None else None)) for p in shown_plans]


def _reused_copy(plan: Any) -> dict[str, str]:
    """The tuned ds_config copy an earlier --apply wrote, which `plan` points at instead of writing it again: path ->
    its text, so the change list names its keys (a reused copy listed only '--deepspeed_config ds.json->ds.llmperf-
    tuned.json', as if the micro-batch and ZeRO stage it changes were unchanged)."""
    from pathlib import Path

    from llmperf_hook.tune import ds_config_rewrite as dsr

    ref = dsr.find_ds_config(list(plan.argv))
    named = _plugin_config_file(list(plan.argv)) if ref is None else ref.path
    if named is None or (ref and dsr.inline_form(ref.path, ref.flag == dsr.HF_DEEPSPEED_FLAG)) or \
            dsr.TUNED_SUFFIX not in named:
        return {}
    path = os.path.abspath(named)
    if path in plan.new_files or not os.path.isfile(path):
        return {}
    try:
        return {path: Path(path).read_text(encoding="utf-8")}
    except (OSError, UnicodeDecodeError):
        return {}


def _plugin_config_file(argv: list[str]) -> str | None:
    """The ds_config file accelerate's DeepSpeed plugin reads for `argv` (no ds_config flag of the script names it),
    where it is a readable file."""
    from llmperf_hook.tune.accelerate_apply import accelerate_config_file

    path = accelerate_config_file(argv)
    return path if path and os.path.isfile(path) else None


def _write_before_output(plan: Any, dry_run: bool) -> str | None:
    """Why --apply cannot go on (exit 2), or None once the tuned files exist: checked and written before the result is
    printed, so that a launcher that is not there or a folder that cannot take the copy (a read-only config folder, a
    full disk) is said in the one JSON object, not after a result that reads as applied."""
    from llmperf_hook.commands.run import check_launchable
    from llmperf_hook.launch.parse import leading_assignments
    from llmperf_hook.tune import apply

    try:
        if not dry_run:  # a launcher that is not there: said before a tuned ds_config is written for nothing
            check_launchable(leading_assignments(plan.argv)[1])
        apply.write_planned_files(plan)
    except UsageError as err:
        return str(err)
    except OSError as err:  # a read-only folder, a full disk, a name taken between planning and writing
        return (f"cannot write the tuned DeepSpeed config {err.filename or ''}: {err.strerror or err}. Make its folder "
                "writable, or copy the ds_config somewhere writable and point the command at it (the original is "
                "untouched).")
    return None


def _apply(plan: Any, dry_run: bool, quiet: bool, unchanged: bool = False) -> None:
    """Say what was written and run (or, in a dry run, print) the applied command; its files exist already."""
    from llmperf_hook.commands.run import exec_command
    from llmperf_hook.launch.parse import leading_assignments

    assigned, program_argv = leading_assignments(plan.argv)  # `FOO=1 deepspeed ...`: FOO for the job, as a shell does
    say = (lambda s: click.echo(s, err=True)) if quiet else click.echo
    if unchanged:  # --apply of a command that is already the fastest layout found: said, then run as given
        say("llmperf tune: your command is already the fastest configuration found: nothing to change")
    for path in plan.new_files:
        say(f"llmperf tune: wrote {path}")
    say(f"llmperf tune: {'would run' if dry_run else 'running'}: {shlex.join(plan.argv)}")
    if dry_run:
        return
    exec_command(program_argv, {**os.environ, **assigned})

