"""Extract every option of Megatron-LM's argument parser, as `parse_args` builds it, into a JSON file.

    python benchmarks/extract_megatron_arguments.py --git-dir /work/.mirror/NVIDIA+Megatron-LM/repo \
        --ref core_v0.16.1 --out tests/frameworks/megatron_arguments_core_v0.16.1.json

megatron/training/arguments.py is not part of the megatron-core wheel, so the tag's megatron/training (and legacy)
folders are taken from a Megatron-LM clone (`git archive`), put on sys.path beside the installed megatron.core of the same
release, and imported; the parser is then built exactly as parse_args builds it
(`ArgumentParser(description='Megatron-LM Arguments', allow_abbrev=False)` then add_megatron_arguments) and each
action written out: its option strings, dest, nargs, type, choices, default and action class. Nothing is parsed and
no GPU is needed. `six` and `regex`, which only the tokenizers import, are stood in for when not installed.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path
from typing import Any


_FOLDERS = ("megatron/training", "megatron/legacy")
"""What arguments.py imports beyond megatron.core (training/utils.py takes one helper from megatron/legacy)."""


def _checkout(git_dir: str, ref: str, into: Path) -> tuple[str, str]:
    """_FOLDERS of `ref` unpacked under `into`; (its commit, its commit date)."""
    archive = subprocess.run(["git", "--git-dir", git_dir, "archive", ref, *_FOLDERS], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    commit, date = subprocess.run(["git", "--git-dir", git_dir, "log", "-1", "--format=%H %cI", ref], check=True,
                                  capture_output=True, text=True).stdout.split()
    return commit, date


def _jsonable(value: Any) -> Any:
    """A default or choice as JSON: enums by value, callables and types by name, containers element-wise."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset, range)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if hasattr(value, "name") and hasattr(type(value), "__members__"):  # an Enum member, by the name argparse takes
        return value.name
    return getattr(value, "__name__", repr(value))


def _action(action: argparse.Action) -> dict[str, Any]:
    return {"option_strings": list(action.option_strings), "dest": action.dest,
            "action": type(action).__name__, "nargs": action.nargs,
            "type": None if action.type is None else getattr(action.type, "__name__", repr(action.type)),
            "choices": None if action.choices is None else _jsonable(list(action.choices)),
            "default": _jsonable(action.default), "const": _jsonable(action.const)}


def _stand_in_tokenizer_modules() -> None:
    """The tokenizers' imports the parser never calls, where they are not installed: `six` (bert_tokenization's
    PY2/PY3 test) and `regex` (gpt2_tokenization compiles its pattern only when a tokenizer is built)."""
    import importlib.util
    import re

    for name, stand_in in (("six", types.SimpleNamespace(PY2=False, PY3=True)), ("regex", re)):
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = stand_in  # type: ignore[assignment]


def extract(git_dir: str, ref: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        commit, date = _checkout(git_dir, ref, Path(folder))
        # the package's __init__ also imports the training loop (initialize.py, training.py: triton, CUDA kernels),
        # which the parser does not use: those two lines are left out
        init = Path(folder) / "megatron" / "training" / "__init__.py"
        init.write_text("".join(line for line in init.read_text().splitlines(keepends=True)
                                if not line.startswith(("from .initialize ", "from .training "))))
        sys.path.insert(0, folder)
        _stand_in_tokenizer_modules()
        from megatron.core import package_info
        from megatron.training import arguments

        parser = argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False)
        parser = arguments.add_megatron_arguments(parser)
        actions = [_action(a) for a in parser._actions if a.option_strings and a.dest != "help"]
    return {"source": f"NVIDIA/Megatron-LM {ref} megatron/training/arguments.py", "commit": commit,
            "commit_date": date, "megatron_core": package_info.__version__,
            "script": "benchmarks/extract_megatron_arguments.py", "actions": actions}


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--git-dir", required=True, help="a Megatron-LM clone's git directory")
    cli.add_argument("--ref", default="core_v0.16.1")
    cli.add_argument("--out", required=True)
    args = cli.parse_args()
    data = extract(args.git_dir, args.ref)
    Path(args.out).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{len(data['actions'])} options of {data['source']} ({data['commit'][:10]}) -> {args.out}")


if __name__ == "__main__":
    main()
