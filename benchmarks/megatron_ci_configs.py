"""Megatron-LM's functional-test configurations as launch commands, and a survey of llmperf on them.

Megatron-LM's CI runs tests/functional_tests/test_cases/<model>/<case>/model_config.yaml through
tests/functional_tests/shell_test_utils/_run_training.sh (core_v0.16.1): each MODEL_ARGS entry becomes argv words
by yq's text of the value -- `true` -> the bare flag; `(...)` -> one word; `[a b]` -> the words inside the
brackets; a value with spaces -> one word; else `key value` -- then `eval` expands `${VAR}` from the environment
(DATA_PATH, CHECKPOINT_SAVE_PATH, ... set by run_ci_test.sh), and `torchrun --nproc_per_node $GPUS_PER_NODE
--nnodes $NUM_NODES` launches the recipe's script (tests/test_utils/recipes/h100/gpt.yaml and moe.yaml: nodes 1,
gpus 8, pretrain_gpt.py). ENV_VARS are exported into the job's environment.

    python benchmarks/megatron_ci_configs.py MIRROR_GIT_DIR REF gpt/<case> moe/<case>@NNODES@EXTRA,WORDS ...

(`@NNODES` for the release cases no recipe sizes; `@...,...` words appended to the script's arguments, e.g.
--vocab-size,256000 where the tokenizer file is not here)
prints, per case, the exit codes of `llmperf explain`, `predict` and `tune --apply --dry-run` and the first line of
any refusal (one process at a time).

    python benchmarks/megatron_ci_configs.py --golden MIRROR_GIT_DIR REF gpt/<case> ...

prints the step time and memory CI measured on DGX H100 (the case's golden_values_dev_dgx_h100.json) beside
`llmperf predict --cluster dgx-h100`'s.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

import yaml

# What run_ci_test.sh / the recipe give the placeholders (h100/gpt.yaml ARGUMENTS): paths only, never read.
PLACEHOLDERS: dict[str, str] = {
    "DATA_PATH": "/mnt/artifacts", "DATA_CACHE_PATH": "/workspace/data/cache", "OUTPUT_PATH": "/tmp/ci-output",
    "TENSORBOARD_PATH": "/tmp/ci-output/tensorboard", "CHECKPOINT_SAVE_PATH": "/tmp/ci-output/checkpoints",
    "CHECKPOINT_LOAD_PATH": "/mnt/artifacts/", "TRAINING_SCRIPT_PATH": "pretrain_gpt.py",
    "REPEAT": "1", "RUN_NUMBER": "1",  # run_ci_test.sh's loop: `export REPEAT=$i`, `export RUN_NUMBER=1`
}


@dataclass(frozen=True)
class CiCase:
    """One functional test as CI launches it."""

    script_args: tuple[str, ...]
    """pretrain_*.py's arguments, in the yaml's order."""
    env: tuple[tuple[str, str], ...]
    """ENV_VARS, as exported before torchrun."""
    gpus_per_node: int | None = None
    """MODEL_ENV_VARS.<key>.GPUS_PER_NODE when the case sets it (run_ci_test.sh passes it on), else the recipe's."""


def _words(key: str, node: yaml.Node) -> str:
    """_run_training.sh's text for one MODEL_ARGS entry: yq prints the scalar's own text, `xargs` trims it (and
    takes one level of quotes and backslashes), then the cases below; `eval` splits the line later."""
    if isinstance(node, yaml.SequenceNode):
        return " ".join([key, *(item.value for item in node.value)])
    text = " ".join(shlex.split(node.value))
    if node.tag.endswith(":bool") and text == "true":
        return key
    if text == "":
        return ""
    if re.fullmatch(r"\([^)]+\)", text):
        return f'{key} "{text}"'
    if re.fullmatch(r"\[[^]]+\]", text):
        return f"{key} {text[1:-1]}"
    return f'{key} "{text}"' if " " in text else f"{key} {text}"


def _pairs(mapping: yaml.MappingNode) -> list[tuple[str, yaml.Node]]:
    """A mapping's entries with `<<: *ANCHOR` merges spelled out in place (yq's explode), merged ones first so that
    the mapping's own entries, later on the line, win as argparse's last-repeated-flag rule makes them."""
    merged, own = [], []
    for k, v in mapping.value:
        if k.value == "<<":
            merged += [p for m in (v.value if isinstance(v, yaml.SequenceNode) else [v]) for p in _pairs(m)]
        else:
            own.append((k.value, v))
    return merged + own


def _expand(word: str, placeholders: dict[str, str]) -> str:
    """`eval` expands ${VAR} and $VAR (then splits the line: shlex.split); an unknown one expands to its name."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: placeholders.get(m[1] or m[2], m[1] or m[2]), word)


def parse_ci_config(text: str, placeholders: dict[str, str] | None = None, key: str = "MODEL_ARGS") -> CiCase:
    """A model_config.yaml's text -> the script arguments and environment CI runs it with."""
    values = {**PLACEHOLDERS, **(placeholders or {})}
    root = yaml.compose(text)
    sections = {k.value: v for k, v in root.value} if isinstance(root, yaml.MappingNode) else {}
    if key not in sections:
        raise ValueError(f"no {key} section in this model_config.yaml")
    line = " ".join(w for k, v in _pairs(sections[key]) if (w := _words(k, v)))
    loaded = yaml.safe_load(text)
    env = loaded.get("ENV_VARS") or {}
    gpus = ((loaded.get("MODEL_ENV_VARS") or {}).get(key) or {}).get("GPUS_PER_NODE")
    return CiCase(tuple(shlex.split(_expand(line, values))), tuple((str(k), str(v)) for k, v in env.items()),
                  int(gpus) if gpus else None)


def torchrun_argv(case: CiCase, gpus_per_node: int = 8, nnodes: int = 1, script: str = "pretrain_gpt.py") -> list[str]:
    """_run_training.sh's launch line (DISTRIBUTED_ARGS), rendezvous flags left out."""
    gpus_per_node = case.gpus_per_node or gpus_per_node
    return ["torchrun", "--nproc_per_node", str(gpus_per_node), "--nnodes", str(nnodes), script, *case.script_args]


def golden_step(golden_json: str) -> tuple[float, float]:
    """A golden_values_*.json CI recorded (per-step "iteration-time" and rank 0's "mem-max-allocated-bytes", keys
    "values": {"step": number | "nan"}): the median step time after the first step, in seconds, and the largest
    max-allocated bytes (torch.cuda.max_memory_allocated: no CUDA context, no allocator slack)."""
    import json
    import statistics

    data = json.loads(golden_json)

    def series(key: str) -> list[float]:
        values = data.get(key, {}).get("values", {})
        return [float(values[k]) for k in sorted(values, key=int) if values[k] != "nan"]

    steps = series("iteration-time")[1:]
    return (statistics.median(steps) if steps else float("nan"),
            max(series("mem-max-allocated-bytes"), default=float("nan")))


def compare_golden(git_dir: str, ref: str, cases: list[str], platform: str = "dgx_h100",
                   cluster: str = "dgx-h100") -> None:
    """Predicted step time and peak memory beside what Megatron-LM's CI measured for the case (its
    golden_values_dev_<platform>.json), one process at a time."""
    import json

    for name in cases:
        folder = f"{ref}:tests/functional_tests/test_cases/{name}"
        shown = [subprocess.run(["git", "-C", git_dir, "show", f"{folder}/{file}"], capture_output=True, text=True)
                 for file in ("model_config.yaml", f"golden_values_dev_{platform}.json")]
        if any(s.returncode for s in shown):
            continue
        case = parse_ci_config(shown[0].stdout)
        step_s, mem_bytes = golden_step(shown[1].stdout)
        done = subprocess.run(["llmperf", "predict", "--cluster", cluster, "--format", "json", "--",
                               *torchrun_argv(case)], capture_output=True, text=True, env={**os.environ, **dict(case.env)})
        if done.returncode:
            print(f"{name}\texit {done.returncode}", flush=True)
            continue
        got = json.loads(done.stdout)
        print(f"{name}\t{step_s:.4f}\t{got['step_time_s']:.4f}\t{mem_bytes / 2**30:.2f}\t"
              f"{got['memory']['peak_bytes_per_gpu'] / 2**30:.2f}", flush=True)


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("warning")]
    return lines[0][:300] if lines else ""


def survey(git_dir: str, ref: str, cases: list[str], cluster: str = "dgx-h100") -> None:
    """Runs explain / predict / tune --apply --dry-run on each case, one process at a time."""
    for spec in cases:
        name, nodes, extra = (spec.split("@") + ["", ""])[:3]
        path = f"{ref}:tests/functional_tests/test_cases/{name}/model_config.yaml"
        text = subprocess.run(["git", "-C", git_dir, "show", path], capture_output=True, text=True, check=True).stdout
        case = parse_ci_config(text)
        env = {**os.environ, **dict(case.env)}
        launch = torchrun_argv(case, nnodes=int(nodes or 1)) + [w for w in extra.split(",") if w]
        codes, notes = [], []
        for verb in (["explain"], ["predict", "--cluster", cluster], ["tune", "--cluster", cluster, "--apply",
                                                                      "--dry-run"]):
            done = subprocess.run(["llmperf", *verb, "--", *launch], capture_output=True, text=True, env=env)
            codes.append(str(done.returncode))
            if done.returncode:
                notes.append(_first_line(done.stderr or done.stdout))
        print(f"{spec}\t{'/'.join(codes)}\t{' | '.join(dict.fromkeys(notes))}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--golden":  # measured s, predicted s, measured max-allocated GiB, predicted peak GiB
        compare_golden(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        survey(sys.argv[1], sys.argv[2], sys.argv[3:])
