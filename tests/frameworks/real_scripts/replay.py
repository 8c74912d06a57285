"""Replay a captured launch script (cases/NAME.json) through llmperf in-process, as its user would run it.

A case holds the exact command the script runs (argv), the variables it exports (env), the files it wrote or the
user supplies (files: ds_config, hostfile) and the folder it is launched from (cwd). `/workspace` in a case is
the repository checkout the script ran in; absolute file names are laid out under a scratch folder and rewritten
in argv, the environment and the files' own text (as are the folders a case lists under "roots", e.g. the $HOME
holding accelerate's default config), so nothing outside the scratch folder is read.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

CASES = Path(__file__).parent / "cases"


@dataclass(frozen=True)
class Replay:
    """What one llmperf command printed for a case."""

    exit_code: int
    """llmperf's exit code."""
    output: str
    """stdout + stderr."""
    data: dict[str, Any] | None
    """The JSON object printed on success, else None."""


def load_cases() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(CASES.glob("*.json"))]


def lay_out(case: dict[str, Any], scratch: Path) -> tuple[list[str], dict[str, str], Path]:
    """Write the case's files under `scratch`; return (llmperf options + `--` + argv, env, cwd) with paths pointed
    into it."""
    root = scratch / "workspace"
    cwd = root / case["cwd"]
    cwd.mkdir(parents=True, exist_ok=True)
    moved: dict[str, str] = {"/workspace": str(root)}
    moved.update({folder: str(scratch / folder.lstrip("/")) for folder in case.get("roots", [])})
    for name in case["files"]:
        if name.startswith("/") and not name.startswith("/workspace/"):
            moved[name] = str(scratch / name.lstrip("/"))

    pattern = re.compile("|".join(re.escape(old) for old in sorted(moved, key=len, reverse=True)))

    def move(word: str) -> str:  # one pass, longest name first: a moved path is not moved again
        return pattern.sub(lambda m: moved[m.group(0)], word)

    for name, text in case["files"].items():  # a file naming another (accelerate's YAML -> its ds_config) moves too
        target = Path(moved.get(name, name.replace("/workspace", str(root), 1)))
        target = target if target.is_absolute() else cwd / target
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(move(text))

    env = {k: move(v) for k, v in case["env"].items()}
    options = [move(w) for w in case.get("llmperf_options", [])]
    return [*options, "--", *(move(w) for w in case["argv"])], env, cwd


def replay(case: dict[str, Any], command: str, scratch: Path, *extra: str) -> Replay:
    """`llmperf COMMAND --format json [case's llmperf options] [extra] -- ARGV` in this process, from the case's
    folder with the script's exports in the environment (LLMPERF_DEBUG set: an internal error raises)."""
    from llmperf_hook.cli import main

    argv, env, cwd = lay_out(case, scratch)
    args = [command, "--format", "json", *extra, *argv]
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update({**_clean(saved_env), **env, "LLMPERF_DEBUG": "1"})
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(args)
    except SystemExit as ex:
        code = int(ex.code or 0)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    text = out.getvalue()
    data = json.loads(text.strip().splitlines()[-1] if command == "predict" else text) if code == 0 else None
    return Replay(code, text + err.getvalue(), data)


def _clean(env: dict[str, str]) -> dict[str, str]:
    """This machine's environment less the variables llmperf reads from a job."""
    job = ("LLMPERF_", "WORLD_SIZE", "SLURM_", "CUDA_VISIBLE", "LOCAL_WORLD", "OMPI_", "PMI_", "RANK", "MASTER_")
    return {k: v for k, v in env.items() if not k.startswith(job)}


def total_params(argv_cfg: Any) -> int:
    """All parameters of the model once (TP = PP = EP = 1): embedding, every layer, head and MTP depths."""
    from llmperf_hook.graph import params as pc

    one = replace(argv_cfg.parallel, tp=1, pp=1, ep=1, etp=1, vpp=1, sequence_parallel=False,
                  dp=argv_cfg.world_size // argv_cfg.parallel.cp)
    cfg = replace(argv_cfg, parallel=one)
    layers = sum(pc.layer_params(cfg, pc.is_moe_layer(cfg, i)) for i in range(cfg.model.num_layers))
    return pc.embedding_params(cfg) + layers + pc.head_params(cfg) + pc.mtp_params(cfg)
