"""Turn a Megatron-LM functional-test model_config.yaml into the command its CI job runs (a dev tool; the tests
never run it).

    python tests/frameworks/real_scripts/ci_yaml.py NAME COMMIT TEST_CASE [--nodes N] [--script pretrain_gpt.py]

TEST_CASE is a folder under tests/functional_tests/test_cases (e.g. gpt/gpt3_15b_8t_release). The command is built
as tests/functional_tests/shell_test_utils/_run_training.sh builds it at COMMIT: the recipe's paths
(tests/test_utils/recipes/h100/*.yaml ARGUMENTS) substituted into the YAML (envsubst), MODEL_ARGS turned into words
(a `true` value is the flag alone, a `[a, b]` list its items, a value with blanks or parentheses one word, anything
else `--flag value`), ENV_VARS exported, and the launch `uv run --no-sync python -m torch.distributed.run` or
`ft_launcher` (LAUNCHER) with --nproc_per_node 8 --nnodes N ... SCRIPT PARAMS.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import yaml

from capture import write_case  # run as a script from this folder, as capture.py is

MIRROR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
RECIPE_PATHS = {"DATA_PATH": "/mnt/artifacts", "DATA_CACHE_PATH": "/workspace/data/cache",
                "OUTPUT_PATH": "/workspace/assets", "TENSORBOARD_PATH": "/workspace/assets/tensorboard",
                "CHECKPOINT_SAVE_PATH": "/workspace/artifacts/checkpoints", "CHECKPOINT_LOAD_PATH": "/mnt/artifacts/"}


def _show(commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", str(MIRROR), "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def _substitute(text: str) -> str:
    """envsubst over the recipe's variables; a variable the job sets later (BEFORE_SCRIPT's DATA_BLEND) is a path."""
    text = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: RECIPE_PATHS.get(m.group(1) or m.group(2),
                                                                      f"/mnt/artifacts/{(m.group(1) or m.group(2)).lower()}"), text)
    return text


def _words(model_args: dict) -> list[str]:
    """MODEL_ARGS as _run_training.sh turns them into words: `true` -> the flag alone; "(...)" -> one word; "[a b]"
    (or a YAML list) -> its items, split by the shell's eval; a value with blanks, `|` or parentheses -> one word."""
    out: list[str] = []
    for key, value in model_args.items():
        text = "[" + " ".join(str(v) for v in value) + "]" if isinstance(value, list) else \
            "false" if value is False else "" if value is None else str(value).strip()
        if value is True:
            out.append(key)
        elif text == "":
            continue  # yq's select(.value != "") drops the key
        elif re.fullmatch(r"\([^)]+\)", text):
            out += [key, text]
        elif re.fullmatch(r"\[[^]]+\]", text):
            out += [key, *text[1:-1].split()]
        else:
            out += [key, text]
    return out


def build(name: str, commit: str, case: str, nodes: int, script: str) -> dict:
    path = f"tests/functional_tests/test_cases/{case}/model_config.yaml"
    raw = yaml.safe_load(_substitute(_show(commit, path)))
    launcher = raw.get("LAUNCHER") or "torchrun"
    dist = ["--nproc_per_node", "8", "--nnodes", str(nodes), "--master_addr", "localhost", "--master_port", "29500",
            "--node_rank", "0", "--log-dir", "/workspace/assets/logs/1", "--tee", "0:3,7:3", "--redirects", "3"]
    head = ["ft_launcher", *dist, "--max-restarts=3"] if launcher == "ft_launcher" else \
        ["uv", "run", "--no-sync", "python", "-m", "torch.distributed.run", *dist]
    env = {k: str(v) for k, v in (raw.get("ENV_VARS") or {}).items()}
    return {"name": name, "repository": "NVIDIA/Megatron-LM", "commit": commit, "path": path, "script_args": [],
            "script_env": {}, "run_from": "repository root (CI: _run_training.sh)",
            "argv": [*head, script, *_words(raw["MODEL_ARGS"])], "cwd": ".", "env": env, "files": {}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("commit")
    ap.add_argument("case")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--script", default="pretrain_gpt.py")
    ns = ap.parse_args()
    write_case(ns.name, build(ns.name, ns.commit, ns.case, ns.nodes, ns.script))


if __name__ == "__main__":
    main()
