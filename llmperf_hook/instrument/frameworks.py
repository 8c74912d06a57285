"""Where each framework's training step begins and ends, and the (reversible) patches that report it.

Patched lazily, right after the module that defines the step is imported (a post-import hook on
sys.meta_path): a job that never imports deepspeed or megatron never has them imported by us.

| framework | module patched                          | what marks a step                                      |
|-----------|-----------------------------------------|--------------------------------------------------------|
| megatron  | megatron.training.training (or the old  | `train_step(...)`: one call = one iteration (all       |
|           | megatron.training module)               | micro-batches + optimizer), looked up as a module global by `train()` |
| deepspeed | deepspeed.runtime.pipe.engine           | `PipelineEngine.train_batch()`: one call = one step     |
| deepspeed | deepspeed.runtime.engine                | `DeepSpeedEngine.step()` when `global_steps` advances   |
|           |                                         | (called per micro-batch; steps at the accumulation boundary) |
| megatron-core | megatron.core.optimizer.optimizer,  | `MegatronOptimizer` subclasses' `step()` (custom loops on megatron-core) |
|           | .distrib_optimizer, .layer_wise_optimizer |                                                        |
| torch     | torch.amp.grad_scaler                   | `GradScaler.step(optimizer)` of the lead optimizer,    |
|           |                                         | also when it skips optimizer.step() (inf/NaN grads)    |
| torch     | torch (optimizer module)                | global optimizer step post-hook (fallback)             |

The first forward of any nn.Module (a global forward pre-hook, removed after it fired) marks the start of
step 0 for the layers whose hook fires at the end of a step.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
from types import ModuleType
from typing import Any, Callable

from llmperf_hook.instrument.recorder import StepRecorder

PRIORITY = {"torch": 0, "torch-amp": 1, "deepspeed": 2, "megatron-core": 2, "deepspeed-pipeline": 3, "megatron": 4}
"""The outer layer owns a step (recorder.py). DeepSpeed's engine.step calls torch's GradScaler.step itself under
torch_autocast, once per ZeRO-3 sub-group (deepspeed/runtime/zero/stage3.py, _optimizer_step): the engine ranks
above the scaler, so it takes the step over even after a scaler step of the script's own came first."""


class Patches:
    """Every change made to a framework, with the way to undo it."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set_attr(self, owner: Any, name: str, value: Any) -> None:
        had, old = name in vars(owner), vars(owner).get(name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, old) if had else delattr(owner, name))

    def on_undo(self, fn: Callable[[], None]) -> None:
        self._undo.append(fn)

    def undo_all(self) -> None:
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:  # noqa: BLE001 - best effort: the job must go on
                pass


def wrap_step(orig: Callable[..., Any], rec: StepRecorder, source: str,
              took_step: Callable[[Any, Any], bool] | None = None, layer: str | None = None) -> Callable[..., Any]:
    """`orig` reported as a step of `source`; took_step(state_before, self) says whether it really stepped; `layer`
    names its PRIORITY when it is not the source's own (torch's GradScaler: framework torch, above the fallback)."""
    priority = PRIORITY[layer or source]

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not rec.enabled:
            return orig(*args, **kwargs)
        before = getattr(args[0], "global_steps", None) if args and took_step else None
        rec.guarded(rec.enter_step, source, priority)
        try:
            out = orig(*args, **kwargs)
        except BaseException:
            rec.guarded(rec.exit_step, source, False)
            raise
        stepped = rec.guarded(took_step, before, args[0]) if took_step else True
        rec.guarded(rec.exit_step, source, stepped is not False)
        return out

    wrapper.__llmperf_wrapped__ = orig  # type: ignore[attr-defined]
    return wrapper


def _global_steps_advanced(before: Any, engine: Any) -> bool:
    after = getattr(engine, "global_steps", None)
    if isinstance(before, int) and isinstance(after, int):
        return after != before
    return bool(engine.is_gradient_accumulation_boundary())


def patch_torch(torch: ModuleType, rec: StepRecorder, patches: Patches) -> None:
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer as optim_module

    handle = optim_module.register_optimizer_step_post_hook(
        lambda opt, args, kwargs: rec.guarded(rec.torch_optimizer_stepped, opt))
    patches.on_undo(handle.remove)
    fwd: list[Any] = []
    quiet = _quiet_compile_warning()

    def remove_first_forward() -> None:
        while fwd:
            fwd.pop().remove()
        quiet()

    def first_forward(module: Any, inputs: Any) -> None:
        # removed before marking: a mark that fails disables the hook, whose undo removes it too (popping twice
        # raised IndexError out of the job's forward)
        remove_first_forward()
        rec.guarded(rec.mark_forward)

    fwd.append(nn_module.register_module_forward_pre_hook(first_forward))
    patches.on_undo(remove_first_forward)


COMPILE_HOOK_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks on modules"
"""torch._dynamo's OptimizedModule.__call__ warns so whenever any global module hook exists (torch 2.x eval_frame.py):
with the first-forward hook above, every job calling a torch.compile'd module got that warning in its stderr, about
hooks it never registered."""


def _quiet_compile_warning() -> Callable[[], None]:
    """Ignore that warning while the first-forward hook is registered (it fires on the job's first forward, the
    compiled module's included, and is then removed); returns what takes the filter out again."""
    import warnings

    warnings.filterwarnings("ignore", message=COMPILE_HOOK_WARNING, category=UserWarning)
    entry = warnings.filters[0]

    def restore() -> None:  # runs inside the job's first forward: never raises
        try:
            warnings.filters.remove(entry)
            warnings._filters_mutated()  # type: ignore[attr-defined]  # as warnings.filterwarnings does
        except Exception:  # noqa: BLE001 - already gone (the job reset its filters), or another Python's warnings
            pass

    return restore


def patch_torch_grad_scaler(mod: ModuleType, rec: StepRecorder, patches: Patches) -> None:
    """torch.amp's GradScaler.step(optimizer) (torch.cuda.amp's inherits it) is one step of an AMP loop, also when
    it skips optimizer.step() for inf/NaN gradients, as fp16 loops do while the scale comes down from 65536: the
    fallback's post-hook never fires then, and the skipped iteration was timed with the next as one step. Only the
    lead optimizer's calls are steps (recorder.is_lead_optimizer: a GAN steps two per iteration)."""
    cls = mod.GradScaler
    orig = cls.step
    timed = wrap_step(orig, rec, "torch", layer="torch-amp")

    @functools.wraps(orig)
    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        if rec.enabled and rec.guarded(rec.is_lead_optimizer, optimizer):
            return timed(self, optimizer, *args, **kwargs)
        return orig(self, optimizer, *args, **kwargs)

    patches.set_attr(cls, "step", step)


def patch_deepspeed_engine(mod: ModuleType, rec: StepRecorder, patches: Patches) -> None:
    cls = mod.DeepSpeedEngine
    patches.set_attr(cls, "step", wrap_step(cls.step, rec, "deepspeed", _global_steps_advanced))
    patches.set_attr(cls, "__init__", _setting_up(cls.__init__, rec))


def _setting_up(orig: Callable[..., Any], rec: StepRecorder) -> Callable[..., Any]:
    """DeepSpeedEngine.__init__ (deepspeed.initialize; PipelineEngine's too, through super()): the torch optimizer
    steps it may take while it builds the engine's optimizer are no training steps. A bf16 or fp16 job without ZeRO
    gets its optimizer wrapped in FP16_UnfusedOptimizer (FP16_Optimizer for FusedAdam; engine._do_optimizer_sanity_
    check -> DDP_BFLOAT16 / FP16, _configure_fp16_optimizer), whose __init__ calls initialize_optimizer_states(): one
    self.optimizer.step() on zero gradients, to allocate Adam's state (DeepSpeed 0.19.8 runtime/fp16/
    unfused_optimizer.py:108,412-425, fused_optimizer.py:123-130). Counted by the fallback, that one was step 0: the
    job's slow first iteration became step 1, past the warm-up mark, and --instrument N recorded N - 1 iterations."""

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec.num_setting_up += 1
        try:
            return orig(*args, **kwargs)
        finally:
            rec.num_setting_up -= 1

    return wrapper


def patch_deepspeed_pipeline(mod: ModuleType, rec: StepRecorder, patches: Patches) -> None:
    cls = mod.PipelineEngine
    patches.set_attr(cls, "train_batch", wrap_step(cls.train_batch, rec, "deepspeed-pipeline"))


def patch_megatron_training(mod: ModuleType, rec: StepRecorder, patches: Patches) -> None:
    if callable(getattr(mod, "train_step", None)):
        patches.set_attr(mod, "train_step", wrap_step(mod.train_step, rec, "megatron"))


def patch_megatron_core_optimizers(mod: ModuleType, rec: StepRecorder, patches: Patches) -> None:
    """Each optimizer class that defines its own step(); nesting (ChainedOptimizer) records the outer one."""
    for cls in list(vars(mod).values()):
        if isinstance(cls, type) and "step" in vars(cls) and getattr(cls, "__module__", "") == mod.__name__:
            if not getattr(vars(cls)["step"], "__isabstractmethod__", False):
                patches.set_attr(cls, "step", wrap_step(vars(cls)["step"], rec, "megatron-core"))


PATCHERS: dict[str, Callable[[ModuleType, StepRecorder, Patches], None]] = {
    "torch": patch_torch,
    "torch.amp.grad_scaler": patch_torch_grad_scaler,
    "deepspeed.runtime.engine": patch_deepspeed_engine,
    "deepspeed.runtime.pipe.engine": patch_deepspeed_pipeline,
    "megatron.training.training": patch_megatron_training,
    "megatron.training": patch_megatron_training,
    "megatron.core.optimizer.optimizer": patch_megatron_core_optimizers,
    "megatron.core.optimizer.distrib_optimizer": patch_megatron_core_optimizers,
    # LayerWiseDistributedOptimizer (Muon's): step() = ChainedOptimizer.step() + the all-gather of the updated
    # parameters, which ends its step (megatron-core 0.16 optimizer/layer_wise_optimizer.py)
    "megatron.core.optimizer.layer_wise_optimizer": patch_megatron_core_optimizers,
}


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs callbacks[name](module) right after `name` finished executing, whoever imports it.

    It finds the module with the other finders and wraps that loader's exec_module on the returned spec
    (an instance attribute, so the loader's type, __file__ and source lookups are unchanged).
    """

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.callbacks = callbacks
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.callbacks or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = self._find_with_others(fullname, path, target)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module, callback = spec.loader.exec_module, self.callbacks[fullname]

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            callback(module)

        spec.loader.exec_module = exec_then_patch
        return spec

    def _find_with_others(self, fullname: str, path: Any, target: Any) -> Any:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None
