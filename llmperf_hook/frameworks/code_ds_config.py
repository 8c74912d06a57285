"""Whether a training script hands deepspeed.initialize a ds_config built in its own code.

DeepSpeedExamples' training/HelloDeepSpeed/train_bert_ds.py builds `ds_config = {...}` (precision, ZeRO-1, CPU
offload) and calls `deepspeed.initialize(model=..., model_parameters=..., config=ds_config)`; its launch line names no
--deepspeed_config, so llmperf has no file to read. Read from the script's syntax tree (frameworks/script_tree.py:
never imported or run); `deepspeed.initialize` is followed through `import deepspeed [as ds]` and `from deepspeed
import initialize [as init]`. The keyword is `config` (deepspeed/__init__.py initialize; `config_params`, its
deprecated spelling, too).
"""

from __future__ import annotations

import ast

from llmperf_hook.frameworks.script_dropout import _imported_names, _qualified
from llmperf_hook.frameworks.script_tree import script_tree

_CONFIG_KEYWORDS = ("config", "config_params")


def code_config_line(script: str) -> int | None:
    """Line of the script's first deepspeed.initialize(...) call given a `config=` keyword; None when there is none
    or the script cannot be read."""
    tree = script_tree(script)
    if tree is None:
        return None
    names = _imported_names(tree, "deepspeed")
    lines = [call.lineno for call in ast.walk(tree) if isinstance(call, ast.Call)
             and _qualified(call.func, names) == "deepspeed.initialize"
             and any(k.arg in _CONFIG_KEYWORDS for k in call.keywords)]
    return min(lines) if lines else None


def code_config_warnings(script: str) -> list[str]:
    """One warning for a job priced without a ds_config whose script builds one in code."""
    line = code_config_line(script)
    if line is None:
        return []
    return [f"{script} line {line} calls deepspeed.initialize(config=...) with a ds_config llmperf does not read (built "
            "in the script, or a file named by one of its own options): priced as plain PyTorch data parallelism (no "
            "ZeRO, no offload, the precision of the script's flags). llmperf reads a ds_config only from the launch "
            "line's --deepspeed_config (or the Trainer's --deepspeed FILE)"]
