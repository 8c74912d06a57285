"""Stage [7]: per-rank step records, written by the hook inside the live job (`rank<R>.jsonl`).

The recorder knows nothing about frameworks: the patches in `frameworks.py` tell it when a step starts and
ends, and which framework is speaking. Several layers may speak for the same step (DeepSpeed's engine.step
calls the torch optimizer's step; Megatron's train_step calls both); the outermost framework owns the step:
priority megatron train_step > DeepSpeed pipeline train_batch > DeepSpeed engine / megatron-core optimizer >
torch's GradScaler.step > torch optimizer (frameworks.PRIORITY), and only the owner's step ends are recorded.

Never harm the job: every entry point runs under `guarded`, which turns any exception into one line on
stderr, an `error` record, and a disabled hook (the patches are taken out again); the job goes on.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any, Callable

from llmperf_hook.instrument.config import HookConfig
from llmperf_hook.instrument.job_identity import job_facts, local_world_size, rank_and_world
from llmperf_hook.instrument.jsonl_writer import JsonlWriter
from llmperf_hook.instrument.rank_memory import MemoryProbe, cpu_seconds, make_memory_probe, process_usage
from llmperf_hook.instrument.step_line import StepLine
from llmperf_hook.instrument.step_timer import StepTimer, make_step_timer

RECORD_SCHEMA = 1
STEPPING_ENV = "LLMPERF_HOOK_STEPPING"
"""Set by a process of the job when it records its first step: `<job id>:<pid>`. A Python process it starts
afterwards (an evaluation or export script run with subprocess, a spawned helper) inherits it and records
nothing: it is not a rank, and its optimizer steps appended to the rank's file under the rank's number would
read as that rank's steps (two step 0s; refine's per-step slowest rank taking the helper's time). Launchers
(deepspeed, torchrun, mp.spawn's parent) never step, so the ranks they start still record."""


class StepRecorder:
    """Times the first N optimizer steps of this rank and writes them; then gets out of the way."""

    def __init__(self, config: HookConfig, on_finished: Callable[[], None] = lambda: None) -> None:
        self.config = config
        self.enabled = not _started_by_a_stepping_process(config.job_id)
        self.rank, self.world_size, self.local_rank = rank_and_world()
        self.writer = JsonlWriter(os.path.join(config.run_dir, f"rank{self.rank}.jsonl"))
        self._on_finished = on_finished
        self._owner: str | None = None
        self._owner_priority = -1
        self._depth: dict[str, int] = {}
        self._at_exit: list[Callable[[], None]] = []
        """Work deferred to interpreter exit (or to --stop-after's exit): the profile window's event mapping."""
        self._num_steps_done = 0
        self._last_hooked_step = config.last_hooked_step
        self._quiet_until = min(config.num_steps, config.stop_after_steps or config.num_steps)
        """Steps done below which _after_step has nothing to do (outside the profile window): the profile window
        opens, the end record is written or the hook finishes at num_steps at the earliest, --stop-after at its
        step. Kept as attributes: a property call and five tests per step were a measurable share of the hook."""
        self._timer: StepTimer | None = None
        self._memory: MemoryProbe | None = None
        self._start_mark: Any = None
        self._start_cpu_s: float | None = None
        self._profiler: Any = None
        self._profiler_pid = 0
        """The process that opened the profile window (a forked child holds a copy it must not map)."""
        self._failed = False
        self._exit_registered = False
        self._reference_taken = False
        self._identity: dict[str, Any] | None = None
        self._prefixes: dict[tuple, str] = {}
        self._pid = os.getpid()
        """This process's id, refreshed in a forked child (os.getpid() is a system call, ~0.4 us alone and more in
        a training loop: rank_memory.py; it was made once per step record)."""
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forked)
        self._lead_optimizer: Callable[[], Any] | None = None
        """Weak reference to the optimizer whose steps are the job's steps (plain-torch fallback)."""
        self.num_setting_up = 0
        """Framework set-ups under way (frameworks._setting_up: DeepSpeedEngine.__init__): a torch optimizer step
        taken inside one is no training step."""

    # -- entry points called by the framework patches (always through `guarded`) --------------------------

    def guarded(self, fn: Callable[..., Any], *args: Any) -> Any:
        if not self.enabled:
            return None
        try:
            return fn(*args)
        except Exception as err:  # noqa: BLE001 - never let the hook harm the job
            self.fail(err)
            return None

    def mark_forward(self) -> None:
        """First forward of the job: the start of step 0 for frameworks whose step hook fires at its end."""
        if self._start_mark is None and self._num_steps_done == 0:
            self._mark_start()

    def enter_step(self, source: str, priority: int) -> None:
        if priority > self._owner_priority:
            self._owner, self._owner_priority = source, priority
        self._depth[source] = self._depth.get(source, 0) + 1
        if source == self._owner and self._start_mark is None:
            self._mark_start()

    def _mark_start(self) -> None:
        self._inject_fault("step_begin")
        self._start_mark = self._ensure_timer().mark()
        self._start_cpu_s = cpu_seconds(process_usage())

    def _read_reference(self, device: str) -> dict[str, Any]:
        """The reference workload's reading on a CPU job ({} otherwise, or when the config turns it off). A failure
        only loses the reading."""
        if device != "cpu" or not self.config.reference_speed:
            return {}
        from llmperf_hook.instrument.reference_speed import measure_reference

        try:
            return measure_reference("hook", local_world_size(self.world_size)).to_json()
        except Exception as err:  # noqa: BLE001 - the reading is optional; the steps are what matter
            return {"error": f"{type(err).__name__}: {err}"}

    def _reference_field(self) -> dict[str, Any]:
        """{"reference": reading} for the record that ends the hook's work (`end`, or `stop` before it), {} on a GPU
        job or when turned off. Taken after the last recorded step (the steps are timed without it) and only once:
        before step 0 it made the job's first iteration 230 ms longer (the reading is 50 ms of CPU, 100-250 ms of
        wall on a loaded machine), and nothing uses it numerically (refine stores it: reference_speed.py)."""
        if self._reference_taken or self._timer is None:
            return {}
        self._reference_taken = True
        reading = self._read_reference(self._timer.device)
        return {"reference": reading} if reading else {}

    def _at_exit_once(self) -> None:
        """_run_at_exit registered with atexit, once: after the writer's own exit close, so it runs before (LIFO)."""
        if not self._exit_registered:
            import atexit

            atexit.register(self._run_at_exit)
            self._exit_registered = True

    def exit_step(self, source: str, took_step: bool) -> None:
        self._depth[source] = max(0, self._depth.get(source, 0) - 1)
        if source == self._owner and self._depth[source] == 0 and took_step:
            self._record_step()

    def torch_optimizer_stepped(self, optimizer: Any = None) -> None:
        """torch.optim post-step hook: a step only when no framework wraps it (the plain-torch fallback), and
        only of the first optimizer that stepped while it lives: a loop stepping several optimizers per
        iteration (Muon + AdamW, a GAN's two) has one training step per iteration, not one per optimizer."""
        if self._owner_priority > 0 or any(self._depth.values()) or self.num_setting_up:
            return
        if optimizer is not None and not self.is_lead_optimizer(optimizer):
            return
        self._owner, self._owner_priority = "torch", 0
        self._record_step()

    def is_lead_optimizer(self, optimizer: Any) -> bool:
        """Whether `optimizer`'s steps are the job's steps: the first optimizer that steps is, while it lives."""
        lead = self._lead_optimizer() if self._lead_optimizer is not None else None
        if lead is None:
            self._lead_optimizer = _weak(optimizer)
            return True
        return lead is optimizer

    def fail(self, err: BaseException) -> None:
        if self._failed:
            return
        self._failed, self.enabled = True, False
        sys.stderr.write(f"llmperf hook: disabled in rank {self.rank} after an internal error "
                         f"({type(err).__name__}: {err}); the job goes on untouched.\n")
        for cleanup in (lambda: self.writer.write(self._base("error", error=f"{type(err).__name__}: {err}"), flush=True),
                        self._stop_profiler_quietly, self._on_finished):
            try:
                cleanup()
            except Exception:  # noqa: BLE001
                pass

    # -- internals ----------------------------------------------------------------------------------------

    def _resolve_rank(self) -> None:
        rank, world, local = rank_and_world()
        if (rank, world, local) != (self.rank, self.world_size, self.local_rank):
            self.rank, self.world_size, self.local_rank = rank, world, local
            self.writer = JsonlWriter(os.path.join(self.config.run_dir, f"rank{rank}.jsonl"))
            self._identity, self._prefixes = None, {}

    def _forked(self) -> None:
        """In a forked child (a data-loader worker, a rank started by fork): its own pid in its records, none of the
        parent's waiting records and a descriptor of its own if it writes (jsonl_writer.after_fork_in_child). The
        exit work is the parent's: a child leaving through atexit wrote the parent's op samples again."""
        self._pid = os.getpid()
        self.writer.after_fork_in_child()
        self._at_exit = []
        if self._num_steps_done:  # a child forked by a rank that steps is a helper (STEPPING_ENV), not a rank
            self.enabled = False

    def _ensure_timer(self) -> StepTimer:
        if self._timer is None:
            self._timer = make_step_timer()
            self._memory = make_memory_probe(self._timer.device)
        return self._timer

    def _base(self, kind: str, **fields: Any) -> dict[str, Any]:
        if self._identity is None or self._identity["pid"] != self._pid:  # computed once per process
            self._identity = {"job_id": self.config.job_id, "rank": self.rank, "world_size": self.world_size,
                              "local_rank": self.local_rank, "pid": self._pid, "hostname": socket.gethostname()}
        return {"schema": RECORD_SCHEMA, "kind": kind, **self._identity, "framework": self._owner,
                "time_unix_s": time.time(), **fields}

    def _record_step(self) -> None:
        timer = self._timer or self._ensure_timer()
        end, usage = timer.mark(), process_usage()  # one getrusage: CPU time and peak RSS (rank_memory.py)
        end_cpu_s, step, cfg = cpu_seconds(usage), self._num_steps_done, self.config
        if cfg.inject_fault_at_step is not None:  # tests only; one attribute test on the step path otherwise
            self._inject_fault("step_end")
        memory = self._memory.sample_and_reset(usage) if step < self._last_hooked_step else None
        if step == 0:
            os.environ[STEPPING_ENV] = f"{cfg.job_id}:{self._pid}"
            self._resolve_rank()
            self.writer.write(self._base("meta", **job_facts(timer.device)))
        if memory is not None:
            self.writer.write(self._step_record(step, end, end_cpu_s, memory))
        self._start_mark, self._start_cpu_s = end, end_cpu_s
        self._num_steps_done += 1
        self._after_step()

    def _step_record(self, step: int, end: Any, end_cpu_s: float, memory: dict[str, Any]) -> StepLine:
        """The step's line, built when the writer flushes: only the raw marks are taken here (step_line.py)."""
        return StepLine(self._step_prefix, self._timer, step, self._start_mark, end, self._start_cpu_s, end_cpu_s,
                        step < self.config.num_warmup_steps, self._profiler is not None, memory, time.time())

    def _step_prefix(self) -> str:
        return self._line_prefix("step")

    def _line_prefix(self, kind: str) -> str:
        """`{"schema":..,"kind":..,<identity>,"framework":..` as JSON text (no closing brace), cached."""
        key = (kind, self._owner, self._pid)
        if key not in self._prefixes:
            base = self._base(kind)
            base.pop("time_unix_s")
            self._prefixes[key] = json.dumps(base, separators=(",", ":"))[:-1]
        return self._prefixes[key]

    def _after_step(self) -> None:
        done, cfg = self._num_steps_done, self.config
        if done < self._quiet_until and self._profiler is None:  # the common case: one test on the step path
            return
        if self._profiler is not None:
            self._profiler.mark_step()
        if cfg.profile_ops_steps and done == cfg.num_steps:
            self._inject_fault("profiler")
            from llmperf_hook.instrument.op_profile import OpProfiler

            self._profiler, self._profiler_pid = OpProfiler(cfg.profile_ops_steps), self._pid
            self._profiler.start()
            # At exit: a job that ended inside the window must not leave the profiler running (torch's profiler
            # segfaults at interpreter teardown then, changing the job's exit code), and the window's events
            # are mapped then (_stop_profiler).
            self._at_exit_once()
        if self._profiler is not None and done == cfg.last_hooked_step:
            self._stop_profiler()
        if done == cfg.last_hooked_step:
            self.writer.write(self._base("end", num_steps=done, **self._reference_field()), flush=True)
        if cfg.stop_after_steps is not None and done >= cfg.stop_after_steps:
            self._stop_job()
        if done >= max(cfg.last_hooked_step, cfg.stop_after_steps or 0):
            self.enabled = False  # between N and --stop-after the hook only counted steps
            self._on_finished()

    def _inject_fault(self, point: str) -> None:
        """Tests only (HookConfig.inject_fault_at_step / inject_fault_point): the hook failing here."""
        cfg = self.config
        if cfg.inject_fault_at_step == self._num_steps_done and cfg.inject_fault_point == point:
            raise RuntimeError(f"fault injected at step {self._num_steps_done} ({point}, "
                               f"HookConfig.inject_fault_at_step)")

    def _stop_profiler(self) -> None:
        """Close the window now; map its events in _run_at_exit (at interpreter exit, or when --stop-after stops
        the job): a multi-second parse must not stall a step of the running job."""
        profiler, self._profiler = self._profiler, None
        samples = profiler.stop(self._num_steps_done - self.config.num_steps)

        def write_samples() -> None:
            try:
                for sample in samples():
                    self.writer.write(self._base("op", **sample))
                self.writer.flush()
            except Exception as err:  # noqa: BLE001 - the hook never breaks the job, not even at exit
                self.fail(err)

        self._at_exit.append(write_samples)

    def _run_at_exit(self) -> None:
        """The job is leaving: a window it ended inside (fewer steps than --profile-ops) is closed, its completed
        steps mapped (the window of the process that opened it: a forked child only drops its copy); then the
        deferred work."""
        if self._profiler is not None and self._num_steps_done > self.config.num_steps and \
                self._profiler_pid == self._pid:
            self.guarded(self._stop_profiler)
        self._stop_profiler_quietly()
        while self._at_exit:
            self._at_exit.pop(0)()

    def _stop_profiler_quietly(self) -> None:
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            try:
                profiler.abandon()
            except Exception:  # noqa: BLE001 - also runs at exit and from fail(): the window is lost, nothing more
                pass

    def _stop_job(self) -> None:
        """--stop-after: every rank reaches this at the same optimizer step (synchronous data parallel), after
        that step's collectives completed; write the stop record and leave with code 0 without running the rest of
        the script, the job's own files flushed and its atexit callbacks run (job_exit.py)."""
        if self._profiler is not None:
            self._stop_profiler()
        self._run_at_exit()
        self.writer.write(self._base("stop", num_steps=self._num_steps_done, **self._reference_field()))
        self.writer.close()
        from llmperf_hook.instrument.job_exit import exit_like_a_finished_job

        self.enabled = False  # an atexit callback of the job that steps again must not stop it a second time
        exit_like_a_finished_job(0)  # the job's atexit callbacks and open files too, then os._exit (job_exit.py)


def _started_by_a_stepping_process(job_id: str) -> bool:
    """Whether a process of this job that records steps started this one (STEPPING_ENV names another pid)."""
    stepping_job, _, pid = os.environ.get(STEPPING_ENV, "").rpartition(":")
    return stepping_job == job_id and pid != str(os.getpid())


def _weak(obj: Any) -> Callable[[], Any]:
    """A weak reference (a replaced optimizer hands the lead to the next one), or a strong one if unsupported."""
    import weakref

    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj
