"""Installs the step hook in one Python process of an instrumented job (called by the generated
sitecustomize). Light on purpose: it runs at start-up of every Python process under the job (launchers,
helpers), imports no framework, and only patches a framework when the job itself imports it."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Callable

from llmperf_hook.instrument.config import HookConfig, parse_hook_config
from llmperf_hook.instrument.frameworks import PATCHERS, Patches, PostImportFinder
from llmperf_hook.instrument.recorder import StepRecorder

_installed: dict[str, Any] = {}


def install(raw_config: dict | HookConfig) -> StepRecorder:
    """Patch the frameworks already imported, and the others as soon as they are; returns the recorder."""
    if "recorder" in _installed:
        return _installed["recorder"]
    config = raw_config if isinstance(raw_config, HookConfig) else parse_hook_config(raw_config)
    patches = Patches()
    finder_box: list[PostImportFinder] = []
    recorder = StepRecorder(config, on_finished=lambda: _uninstall(patches, finder_box))
    callbacks = {name: _guarded_patcher(patcher, recorder, patches) for name, patcher in PATCHERS.items()}
    finder = PostImportFinder(callbacks)
    finder_box.append(finder)
    sys.meta_path.insert(0, finder)
    for name, callback in callbacks.items():
        if name in sys.modules:
            callback(sys.modules[name])
    _installed.update(recorder=recorder, patches=patches, finder=finder)
    return recorder


def _guarded_patcher(patcher: Callable[..., None], rec: StepRecorder, patches: Patches) -> Callable[[ModuleType], None]:
    def apply(module: ModuleType) -> None:
        if rec.enabled:
            rec.guarded(patcher, module, rec, patches)

    return apply


def _uninstall(patches: Patches, finder_box: list[PostImportFinder]) -> None:
    """After the last hooked step (or an internal error): the job runs untouched from here on."""
    patches.undo_all()
    for finder in finder_box:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
