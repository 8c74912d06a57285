"""`llmperf profile`: sample operators (or, with --comm under torchrun, collectives) and fit a profile.

    llmperf profile --device cpu --budget 3 [--dtype fp32|bf16] [--ops gemm,attention] [--name NAME]
    llmperf profile --device cuda --budget 10 --for -- torchrun ... pretrain_gpt.py ...
    torchrun --nproc-per-node 2 -m llmperf_hook profile --comm --cluster-name mycluster

Writes $LLMPERF_HOME/profiles/NAME/ and $LLMPERF_HOME/hardware/NAME.yaml, so `llmperf predict --hardware NAME`
uses the fitted profile; comm models go to $LLMPERF_HOME/profiles/comm/CLUSTER/ (`--cluster CLUSTER`).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, TypeVar

import click

from llmperf_hook.errors import UsageError

T = TypeVar("T")

MAX_BUDGET_MIN = 24 * 60
"""The longest --budget accepted (a day): adaptive sampling runs until the budget is spent, so a mistyped 1e9
would never end."""


def _ops(text: str | None) -> tuple[str, ...]:
    """--ops as op classes (lower-case, each once, in the order given); () when the option is absent."""
    if text is None:
        return ()
    ops = tuple(dict.fromkeys(o.strip().lower() for o in text.split(",") if o.strip()))
    if not ops:
        raise UsageError(f"--ops {text!r} names no op class. Give a comma-separated list such as "
                         f"--ops gemm,attention, or leave --ops out to sample every op class of the device.")
    return ops


def _job_dtype(job: tuple[str, ...], model: str | None, given: str | None = None, *, nnodes: int | None = None,
               nproc_per_node: int | None = None) -> str | None:
    """The dtype to sample: --dtype (`given`), else with --for the job's own precision (a bf16 job predicted from an
    fp32 profile would find no fitted model for its dtype). A --dtype other than the --for job's precision is
    said: `predict` of that job will not use these samples."""
    if not job:
        return given
    from llmperf_hook.profile.plan import job_precision

    own = job_precision(job, os.environ, model, nnodes=nnodes, nproc_per_node=nproc_per_node)
    if given is None:
        click.echo(f"llmperf: sampling in {own}, the job's precision (--dtype to choose another)", err=True)
        return own
    if given != own:
        click.echo(f"llmperf: note: sampling in {given} (--dtype) while the --for job computes in {own}: `predict` "
                   f"of that job looks for {own} models, so it will not use these samples (leave --dtype out to "
                   f"sample in {own})", err=True)
    return given


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None,
              help="Device to sample: operators, or with --comm collectives (NCCL on cuda, gloo on cpu) "
                   "(default: cuda when available, else cpu).")
@click.option("--budget", "budget_min", type=float, default=3.0, show_default=True,
              help="Wall-clock minutes for the whole command: sampling, fitting, writing, and on CPU with a budget of 3 "
                   "or more the framework cost (up to half of it, at most 2 minutes). Each phase stops when its share "
                   "is spent and says what it left out.")
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default=None,
              help="Dtype to sample (default: with --for the job's precision, else fp32 on cpu, bf16 on cuda).")
@click.option("--ops", "ops_text", default=None, help="Comma-separated op classes (default: all the device's).")
@click.option("--name", default=None, help="Profile / hardware name (default: derived from the device).")
@click.option("--threads", type=int, default=1, show_default=True, help="CPU threads per rank while sampling.")
@click.option("--store", "store_path", type=click.Path(dir_okay=False), default=None,
              help="SQLite store (default $LLMPERF_HOME/store.sqlite).")
@click.option("--for", "for_job", is_flag=True, help="Sample first the shapes of the job given after `--` "
              "(and in its dtype unless --dtype is given).")
@click.option("--model", default=None, help="With --for: model preset or file for a script that does not state "
              "the model shape in Megatron-style flags.")
@click.option("--nnodes", type=int, default=None, help="With --for: nodes of the job (overrides its launcher's).")
@click.option("--nproc-per-node", type=int, default=None, help="With --for: processes per node of the job, for a "
              "launch that does not say (deepspeed without --num_gpus).")
@click.option("--comm", is_flag=True, help="Time collectives instead (run under torchrun).")
@click.option("--cluster-name", default=None, help="With --comm: the cluster the comm model is for.")
@click.option("--min-bytes", type=float, default=2**12, show_default=True, help="With --comm: smallest message.")
@click.option("--max-bytes", type=float, default=2**26, show_default=True, help="With --comm: largest message.")
@click.argument("job", nargs=-1, type=click.UNPROCESSED)
def command(device: str | None, budget_min: float, dtype: str | None, ops_text: str | None, name: str | None,
            threads: int, store_path: str | None, for_job: bool, model: str | None, nnodes: int | None,
            nproc_per_node: int | None, comm: bool, cluster_name: str | None, min_bytes: float, max_bytes: float,
            job: tuple[str, ...]) -> None:
    """Sample operators (or collectives) on this machine and fit a hardware profile."""
    import time

    started_s = time.perf_counter()  # the --budget's clock (profile/budget.py): torch's import is inside it
    if comm:
        ignored = [opt for opt, given in (("--ops", ops_text is not None), ("--for", for_job or bool(job)),
                                          ("--model", model), ("--dtype", dtype), ("--name", name)) if given]
        ignored += _given(("--budget", "budget_min"), ("--threads", "threads"), ("--store", "store_path"),
                          ("--nnodes", "nnodes"), ("--nproc-per-node", "nproc_per_node"))
        if ignored:
            raise UsageError(f"{', '.join(ignored)} with --comm: collectives are timed in fp32 over message sizes "
                             f"(every size, whatever a budget) and stored per --cluster-name in $LLMPERF_HOME; drop "
                             f"them, or profile operators in a separate run.")
        _run_comm(cluster_name, min_bytes, max_bytes, device)
        return
    _check_operator_options(budget_min, for_job, job, model, store_path, ops_text)
    _check_single_process()
    from pathlib import Path

    from llmperf_hook.profile.sampler import ProfileRequest, run_profile

    dev = device or _default_device()
    _check_name_for_device(name, dev)
    dtype = _job_dtype(tuple(job), model, dtype, nnodes=nnodes, nproc_per_node=nproc_per_node) or \
        ("fp32" if dev == "cpu" else "bf16")
    req = ProfileRequest(device=dev, budget_min=budget_min, dtype=dtype,
                         ops=_ops(ops_text), name=name, threads=threads, job_argv=tuple(job), env=dict(os.environ),
                         store_path=Path(store_path) if store_path else None, job_model=model, job_nnodes=nnodes,
                         job_nproc_per_node=nproc_per_node, started_s=started_s)
    def start_and_run() -> tuple[Any, Any]:  # the start reading imports torch: seconds a Ctrl-C or SIGTERM may hit
        return (_reference_reading("profile-start") if dev == "cpu" else None), run_profile(req)

    start, result = _interruptible(start_and_run, req.store_path)
    if start is not None:
        click.echo(_end_reading(result, start, threads, budget_min))
    took = _time_line(result, started_s, time.perf_counter(), "end reading" if start is not None else "output")
    click.echo(f"{result.plan_note}")
    click.echo(f"measured {result.num_measured} shapes ({result.num_skipped} reused from the store)"
               f"{_sampled_in(result)}")
    click.echo(f"profile  {result.profile_dir}  ({len(result.fitted_classes)} regressors: "
               f"{', '.join(result.fitted_classes)})")
    click.echo(f"hardware {result.hardware_yaml}")
    click.echo(f"store    {_store_path(req.store_path)}  (the samples: the same command resumes from them)")
    from llmperf_hook.profile.profile_fit import replaced_note

    for note in (*result.notes, replaced_note(result)):
        if note:
            click.echo(f"note: {note}")
    if name and name != result.name:
        click.echo(f"note: --name {name} is stored lower-case as {result.name}: pass --hardware {result.name}")
    click.echo(took)
    click.echo(f"use it:  llmperf predict --hardware {result.name} -- <launch command>")


def _sampled_in(result: Any) -> str:
    """' in 36.2 s of sampling': what ran, beside the plan line's 'this --budget measures about N of them (about S s)'."""
    ends = dict(result.phase_ends_s)
    if "sampling" not in ends or "start-up, torch and the peaks" not in ends:
        return ""
    line = f" in {ends['sampling'] - ends['start-up, torch and the peaks']:.1f} s of sampling"
    expected = result.expected_measured
    if expected and result.num_measured < SLOWER_THAN_PLANNED * expected:
        load = f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs" if hasattr(os, "getloadavg") else "the load"
        line += f", where the plan expected about {expected}: the shapes took longer than its estimates ({load})"
    return line


SLOWER_THAN_PLANNED = 0.8
"""Fewer shapes measured than this share of the plan's expected_run are said beside the plan's figure."""


def _time_line(result: Any, started_s: float, ended_s: float, last: str) -> str:
    """Where the --budget went, phase by phase (ProfileResult.phase_ends_s), and when over it, by how much and why
    (budget.py: the first fits of the classes asked for, and the fits of every class with enough samples, run past
    it)."""
    from llmperf_hook.profile.profile_fit import MIN_SAMPLES_TO_FIT

    marks = [("", started_s), *result.phase_ends_s, (last, ended_s)]
    phases = ", ".join(f"{name} {end - begin:.1f} s" for (_, begin), (name, end) in zip(marks, marks[1:]))
    budget_s, took_s = result.budget.total_s, ended_s - started_s
    head = f"time     budget {budget_s:.0f} s, took {took_s:.0f} s: "
    if took_s <= budget_s + 1.0:
        return head + f"within it ({phases})"
    load = f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; " if hasattr(os, "getloadavg") else ""
    return head + (f"{took_s - budget_s:.0f} s over, because {_starved_by_start_up(result, started_s)}every class "
                   f"asked for gets the {MIN_SAMPLES_TO_FIT} shapes of a first fit and every class with enough samples "
                   f"is fitted, whatever the --budget (a larger --budget keeps to it; {load}{phases})")


def _starved_by_start_up(result: Any, started_s: float) -> str:
    """The start-up's part of an overrun, when it ended past the last moment sampling could start (budget.describe's
    'no time left for sampling'): at load 13 torch's import and the peaks took 16.9 s of a 12-s budget."""
    if not result.phase_ends_s:
        return ""
    start_up_end_s, latest_s = result.phase_ends_s[0][1], result.budget.sampling_end_s(1)
    if start_up_end_s <= latest_s:
        return ""
    return (f"start-up (torch's import, the peaks) took {start_up_end_s - started_s:.0f} s, past the last moment "
            f"sampling could start ({latest_s - started_s:.0f} s), and ")


def _store_path(given: Any) -> Any:
    """The store the samples went to, absolute: --store, else $LLMPERF_HOME/store.sqlite (made absolute when the
    command started, cli.pin_llmperf_home)."""
    from llmperf_hook.store import default_store_path

    return given.expanduser().absolute() if given is not None else default_store_path()


def _check_operator_options(budget_min: float, for_job: bool, job: tuple[str, ...], model: str | None,
                            store_path: str | None, ops_text: str | None = None) -> None:
    """Options of an operator profile that contradict each other, or belong to --comm or --for alone."""
    if store_path is not None and not store_path.strip():  # `--store $STORE` with STORE unset: not the default store silently
        raise UsageError("--store '' names no file: give the SQLite store's path, or leave --store out for "
                         "$LLMPERF_HOME/store.sqlite.")
    comm_only = _given(("--cluster-name", "cluster_name"), ("--min-bytes", "min_bytes"), ("--max-bytes", "max_bytes"))
    if comm_only:
        raise UsageError(f"{', '.join(comm_only)} without --comm: they choose the collectives' cluster and message "
                         f"sizes. Add --comm (under torchrun) to time collectives, or drop them to profile operators.")
    if budget_min > MAX_BUDGET_MIN:  # nan and <= 0 are the sampler's (ProfileRequest) to refuse
        raise UsageError(f"--budget {budget_min:g} minutes is more than a day ({MAX_BUDGET_MIN} min): the budget is "
                         f"how long sampling runs, and its adaptive rounds go on until it is spent. Give the minutes "
                         f"you mean (3-10 fit a profile; the same command later adds samples and refits).")
    if job and not for_job:
        _check_spaced_ops(ops_text, job)
        raise UsageError(f"unexpected arguments {' '.join(job)!r}: to sample a job's shapes first, write "
                         f"`llmperf profile --for -- <launch command>`.")
    if for_job and not job:
        raise UsageError("--for needs the launch command after `--`, e.g. `llmperf profile --for -- torchrun ...`.")
    if model and not for_job:
        raise UsageError(f"--model {model}: only used with --for (the shape of the job whose shapes are sampled first).")
    layout = _given(("--nnodes", "nnodes"), ("--nproc-per-node", "nproc_per_node"))
    if layout and not for_job:
        raise UsageError(f"{', '.join(layout)}: only used with --for (the layout of the job whose shapes are sampled "
                         f"first).")


def _check_spaced_ops(ops_text: str | None, extra: tuple[str, ...]) -> None:
    """`--ops gemm layernorm` (a space where the list takes commas) left 'layernorm' as an unexpected argument, and
    the error spoke of --for."""
    from llmperf_hook.profile.plan import CPU_RANGES

    ops = [o for o in (a.strip(",").lower() for a in extra) if o]
    if ops and all(o in CPU_RANGES for o in ops):
        given = f"{ops_text.strip(',')}," if ops_text else ""
        raise UsageError(f"unexpected arguments {' '.join(extra)!r}: op classes are given as one comma-separated "
                         f"list, --ops {given}{','.join(ops)} (no spaces).")


def _check_single_process() -> None:
    """Operators are sampled by one process. Under torchrun every rank ran the whole sampler at once: each timed
    its shapes while the others competed for the same cores and memory bandwidth (or, on GPUs, the same cuda:0),
    and all of them wrote the same profile."""
    world = os.environ.get("WORLD_SIZE", "1")
    if world.strip() not in ("", "0", "1"):
        raise UsageError(f"`llmperf profile` without --comm samples operators in one process, but $WORLD_SIZE={world} "
                         f"(set by torchrun or the job's environment) says {world} ranks would each run it at once, "
                         f"timing the same shapes against each other and writing the same profile. Run it once, "
                         f"without torchrun (unset WORLD_SIZE), or add --comm --cluster-name NAME to time collectives.")


def _given(*options: tuple[str, str]) -> list[str]:
    """The options among (flag, parameter name) that the command line set (not left at their default)."""
    ctx = click.get_current_context()
    return [flag for flag, param in options
            if ctx.get_parameter_source(param) not in (None, click.core.ParameterSource.DEFAULT)]


def _check_name_for_device(name: str | None, device: str) -> None:
    """A CPU profile may not take a shipped GPU preset's name: $LLMPERF_HOME/hardware/NAME.yaml and profiles/NAME
    are looked up before the shipped ones, so every later `--hardware NAME` (and every cluster with that GPU, the
    default dgx-h100 included) would be priced with this CPU's speed and memory, silently. `comm` is no name at
    all: profiles/comm/ holds the clusters' communication models."""
    if name and name.lower() == "comm":
        raise UsageError("--name comm: $LLMPERF_HOME/profiles/comm/ holds the clusters' communication models "
                         "(`llmperf profile --comm`), so an operator profile cannot be stored under that name. "
                         "Choose another --name.")
    if not name or device != "cpu":
        return
    from llmperf_hook.profile.local_hardware import shipped_hardware_names

    if name.lower() in shipped_hardware_names():
        raise UsageError(f"--name {name}: that is the shipped GPU preset configs/hardware/{name.lower()}.yaml, and a "
                         f"profile taken with --device cpu under that name would replace it in every prediction for "
                         f"that GPU (user profiles and hardware files in $LLMPERF_HOME come first). Choose another "
                         f"name for this CPU (e.g. --name my-cpu), or profile that GPU with --device cuda on it.")


def _reference_reading(where: str) -> Any:
    from llmperf_hook.instrument.reference_speed import measure_reference

    return measure_reference(where)


def _framework_measured(budget_min: float) -> bool:
    from llmperf_hook.profile.cpu_framework import MIN_BUDGET_MIN

    return budget_min >= MIN_BUDGET_MIN


def _end_reading(result: Any, start: Any, threads: int, budget_min: float) -> str:
    """The end reading of the machine's speed (_write_reference); its concurrent copies, which follow a framework
    cost measurement, only while the --budget has their time left (the framework ran to its box's end), else said."""
    from llmperf_hook.profile.budget import TAIL_CONCURRENT_S

    left_s = result.budget.left_s(result.budget.end_s)
    concurrent = _framework_measured(budget_min) and left_s >= TAIL_CONCURRENT_S
    line = _write_reference(result.profile_dir, start, threads, concurrent=concurrent)
    if _framework_measured(budget_min) and not concurrent:
        line += (f"; the readings of several copies at once left out ({max(0.0, left_s):.0f} s of the --budget "
                 f"left, they take about {TAIL_CONCURRENT_S:.0f} s; a larger --budget measures them)")
    return line


def _write_reference(profile_dir: Any, start: Any, threads: int, concurrent: bool = True) -> str:
    """reference_speed.json in the profile directory: the machine's speed while the profile was taken (readings
    at the start, around the framework measurement, at the end; and, when the framework cost was measured (a
    profile for CPU training jobs), with 2 .. CPUs / threads copies at once, as the ranks of a CPU job read
    it), which `refine` compares a run's reading with."""
    import json

    from llmperf_hook.instrument.reference_speed import (PROFILE_FILE_NAME, measure_reference,
                                                         measure_reference_concurrent, profile_reference_doc,
                                                         readings_in)

    readings = [start]
    try:
        framework = json.loads((profile_dir / "framework_overhead.json").read_text()).get("reference")
        readings += readings_in(framework)
    except (OSError, ValueError, AttributeError):
        pass
    readings.append(measure_reference("profile-end"))
    for copies in range(2, max(2, (os.cpu_count() or 1) // max(1, threads)) + 1) if concurrent else ():
        readings += measure_reference_concurrent(copies, f"profile-end-{copies}-copies")
    doc = profile_reference_doc(readings)
    (profile_dir / PROFILE_FILE_NAME).write_text(json.dumps(doc, indent=1) + "\n")
    per = ", ".join(f"{n} at once {v * 1e3:.2f} ms" for n, v in doc["reference_cpu_s"].items() if v)
    return (f"machine speed while profiling: reference workload {per} of CPU time (drift during the profile "
            f"x{doc['drift_during_profile']:.3f}); {profile_dir / PROFILE_FILE_NAME}")


def _interruptible(run: Callable[[], T], store_path: Any) -> T:
    """run(), with Ctrl-C or SIGTERM (a scheduler's time limit) ending it cleanly: the samples already measured
    are in the store (each is committed as it is measured), so the same command resumes; exit 130 / 143."""
    import signal

    def on_term(signum: int, frame: Any) -> None:
        raise _Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave SIGTERM as it is
        previous = None
    try:
        return run()
    except (KeyboardInterrupt, _Terminated) as err:
        from llmperf_hook.resources import llmperf_home
        from llmperf_hook.store.sqlite_store import STORE_FILE

        store = store_path or llmperf_home() / STORE_FILE
        what = "SIGTERM" if isinstance(err, _Terminated) else "Ctrl-C (SIGINT)"
        click.echo(f"\nllmperf: profile stopped by {what}: the shapes measured so far are kept in {store}; run the "
                   f"same command again to resume (stored shapes are skipped, then the profile is fitted).", err=True)
        # sys.exit, not click's Exit: the CLI runs click with standalone_mode=False, where Exit's code is lost.
        sys.exit(143 if isinstance(err, _Terminated) else 130)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _Terminated(BaseException):
    """SIGTERM while profiling (a BaseException, like KeyboardInterrupt, so no `except Exception` swallows it)."""


def _run_comm(cluster_name: str | None, min_bytes: float, max_bytes: float, device: str | None) -> None:
    if not cluster_name:
        raise UsageError("--comm needs --cluster-name NAME: the comm model is stored per cluster.")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", cluster_name):
        raise UsageError(f"--cluster-name {cluster_name!r}: use letters, digits, '.', '_' and '-' only (it names "
                         f"$LLMPERF_HOME/profiles/comm/NAME; use the name you pass to --cluster).")
    _check_comm_name_for_device(cluster_name, device)
    from llmperf_hook.profile.comm_sampler import CommRequest, run_comm_profile

    result = run_comm_profile(CommRequest(cluster_name=cluster_name, min_bytes=min_bytes, max_bytes=max_bytes,
                                          device=device))
    if result.path:
        click.echo(f"comm model {result.path} ({result.num_samples} timings; layouts: {', '.join(result.layouts)})")
        click.echo(f"store      {_store_path(None)}  (the timings)")
        for note in result.notes:
            click.echo(f"note: {note}")


def _check_comm_name_for_device(cluster_name: str, device: str | None) -> None:
    """Collectives timed with gloo between CPU processes may not take a shipped GPU cluster's name: the comm model
    in $LLMPERF_HOME/profiles/comm/NAME comes before the shipped one, so every `--cluster NAME` prediction (the
    default dgx-h100 included) would price NCCL over NVLink and InfiniBand at this machine's gloo speed."""
    from llmperf_hook.resources import configs_dir

    if device == "cuda" or not (configs_dir() / "clusters" / f"{cluster_name.lower()}.yaml").is_file():
        return  # NCCL on GPUs; --device cuda without one is run_comm_profile's to refuse, with that reason
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        raise UsageError(f"--cluster-name {cluster_name}: that is the shipped GPU cluster preset "
                         f"configs/clusters/{cluster_name.lower()}.yaml, and collectives timed here with gloo on the "
                         f"CPU would replace its communication model in every prediction for it. Choose another name "
                         f"for this machine (e.g. --cluster-name my-cpu-box), or profile on that cluster's GPUs.")
