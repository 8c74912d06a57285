"""The options a user's own training script defines with argparse, read from its source (never imported or run).

`tune --apply` writes Megatron-LM's flags (tune/megatron_argv.py). Megatron's entry points parse them with Megatron's
parser, but a script of the user's own that takes Megatron-style shape flags (examples/cpu-testbed/train_gpt.py: a
plain-torch GPT trained under DeepSpeed) parses its argv with its own `argparse.ArgumentParser`, and
`ArgumentParser.parse_args` stops the job on an option it does not define ("error: unrecognized arguments",
argparse.py parse_args -> self.error, exit status 2); `parse_known_args` ignores it, so the tuned layout would not run
either. What the script defines is read here from its `add_argument` calls (on the parser, its argument groups and
mutually exclusive groups), plus DeepSpeed's four when it calls `deepspeed.add_config_arguments(parser)`
(deepspeed/__init__.py _add_core_arguments: --deepspeed, --deepspeed_config, --deepscale, --deepscale_config) and the
`--no-NAME` form of a `BooleanOptionalAction` (argparse.py BooleanOptionalAction.__init__).

A script is taken to have its own parser only when it builds an `ArgumentParser` itself and imports nothing of
Megatron (whose `megatron.training.arguments.parse_args` then runs, options of every release counted by
frameworks/megatron_known_flags); Hugging Face's `HfArgumentParser` builds its options from dataclasses and is not
read. The reading is a lower bound: an option whose name is computed, or added by a helper defined in another module,
is not seen, so tune keeps that knob at the command's value rather than write a flag the job may refuse.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from llmperf_hook.frameworks.script_defaults import parses_its_own_flags
from llmperf_hook.frameworks.script_tree import script_parse_error, script_tree

DEEPSPEED_CONFIG_OPTIONS = frozenset({"--deepspeed", "--deepspeed_config", "--deepscale", "--deepscale_config"})
"""deepspeed.add_config_arguments(parser) -> _add_core_arguments (deepspeed/__init__.py)."""


@dataclass(frozen=True)
class ScriptOptions:
    """The options a script's own argparse parser defines."""

    script: str
    """The script's path, as the launch command names it."""
    options: frozenset[str]
    """Every option string its add_argument calls define, with the leading dashes ('--micro-batch-size')."""
    unread: int = 0
    """add_argument calls whose option names are computed (not string literals): their options are not in `options`."""
    ignores_unknown: bool = False
    """It parses with `parse_known_args` alone: an option it lacks is passed over (argparse.py parse_known_args returns
    it among the extras) instead of stopping the job, so a flag tune wrote there would change nothing."""


def script_options(script: str) -> ScriptOptions | None:
    """The script's own argparse options, or None when it has no parser of its own that can be read (not a readable
    Python file, Megatron's parser, HfArgumentParser, or no ArgumentParser built in the file)."""
    tree = _tree(script)
    return _read(tree, script) if isinstance(tree, ast.Module) else None


def unreadable_reason(script: str) -> str | None:
    """Why a Python script (`.py`) that exists could not be read (its parse error), else None: tune then writes
    Megatron-LM's flags as before, and says so, since its own parser, if it has one, was not checked."""
    tree = _tree(script) if script.endswith(".py") else None
    return tree if isinstance(tree, str) else None


def _tree(script: str) -> ast.Module | str | None:
    """The script's syntax tree, the reason it cannot be parsed, or None where there is no file (one cached parse of
    the file's bytes, shared with frameworks/: frameworks/script_tree.py)."""
    return script_tree(script) or script_parse_error(script)


def _read(tree: ast.Module, shown: str) -> ScriptOptions | None:
    """The options of a parsed script (None: Megatron's or Hugging Face's parser, or none built in the file)."""
    if not parses_its_own_flags(tree):
        return None
    options: set[str] = set()
    unread = 0
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
        if call.func.attr == "add_argument":
            names = _option_names(call)
            unread += names is None
            options |= names or set()
        elif call.func.attr == "add_config_arguments":  # deepspeed.add_config_arguments(parser)
            options |= DEEPSPEED_CONFIG_OPTIONS
    if not options and not unread:
        return None
    parses = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    return ScriptOptions(shown, frozenset(options), unread, "parse_known_args" in parses and "parse_args" not in parses)


def _option_names(call: ast.Call) -> set[str] | None:
    """The option strings of one add_argument call (None when a name is not a literal: `*names`, a variable). A
    positional argument ('input') is no option; BooleanOptionalAction adds --no-NAME for each --NAME."""
    names: set[str] = set()
    for arg in call.args:
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            return None
        if arg.value.startswith("-"):
            names.add(arg.value)
    action = next((kw.value for kw in call.keywords if kw.arg == "action"), None)
    if _dotted(action).endswith("BooleanOptionalAction"):
        names |= {"--no-" + n[2:] for n in names if n.startswith("--")}
    return names


def _dotted(node: ast.AST | None) -> str:
    """'argparse.BooleanOptionalAction' of an attribute chain; a loop, not recursion: a chain may be as deep as the
    parser allowed, past Python's recursion limit."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ".".join(reversed(parts)) if parts else ""
    return ".".join([node.id, *reversed(parts)])
