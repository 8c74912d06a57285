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

prints the step time and allocated peak CI measured on DGX H100 (the case's golden_values_dev_dgx_h100.json: the
last rank's, see golden_measured) beside llmperf's for the same rank (predict_golden: dgx-h100, no calibration), and
a summary. Give it the training cases: the gpt_grpo_* ones time RL rollouts inside each step, which predict
does not price (inference cases, whose golden files hold generated text, are skipped).
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


@dataclass(frozen=True)
class GoldenRow:
    """One case: what CI measured on the tensorboard rank and what llmperf predicts for the same quantities."""

    case: str
    measured_s: float
    """Median of the logged iteration-time values after the first (see golden_measured)."""
    predicted_s: float
    """predict's step time (no calibration)."""
    measured_allocated_bytes: float
    """The last rank's torch.cuda allocated peak (mem-max-allocated-bytes, its largest value)."""
    predicted_allocated_bytes: float
    """The last pipeline stage's allocated peak: its components less what torch's counters never see (the CUDA
    context, NCCL's own buffers) and the caching allocator's reserve."""
    predicted_peak_bytes: float
    """predict's peak (busiest stage, CUDA context, NCCL buffers and allocator reserve included)."""

    @property
    def time_ratio(self) -> float:
        return self.predicted_s / self.measured_s

    @property
    def allocated_error(self) -> float:
        return self.predicted_allocated_bytes / self.measured_allocated_bytes - 1


def golden_measured(golden_json: str) -> tuple[float, float]:
    """(step seconds, allocated peak bytes) of a golden_values_*.json (keys "values": {"step": number | "nan"}), read
    as Megatron-LM writes them (core_v0.16.1). The tensorboard writer exists on the last rank only
    (global_vars._set_tensorboard_writer: args.rank == world_size - 1, a rank of the last pipeline stage).
    training_log writes "mem-max-allocated-bytes" = torch.cuda.memory_stats()["allocated_bytes.all.peak"] every
    iteration, a running peak never reset, so the largest value is the run's. It writes "iteration-time" only where
    iteration % log_interval == 0: timers('interval-time').elapsed(barrier=True) / the iterations since the last log,
    i.e. everything in the loop (train_step, --log-params-norm's calc_params_l2_norm, the logging itself; checkpoint
    saves and evaluation stop the timer), and never at the first iteration, whose elapsed(reset=False) leaves its
    time in the next logged interval: the first logged value holds the warm-up and is dropped."""
    import json
    import statistics

    data = json.loads(golden_json)

    def series(key: str) -> list[float]:
        entry = data.get(key)
        values = entry.get("values", {}) if isinstance(entry, dict) else {}
        return [float(values[k]) for k in sorted(values, key=int) if values[k] != "nan"]

    steps = series("iteration-time")[1:]
    return (statistics.median(steps) if steps else float("nan"),
            max(series("mem-max-allocated-bytes"), default=float("nan")))


NOT_IN_TORCH_COUNTERS = ("cuda_context", "nccl_buffers", "allocator_fragmentation")
"""Components torch.cuda's allocated counters leave out: the driver's context and NCCL's cudaMalloc'ed buffers
(outside the caching allocator), and cached free blocks (reserved, not allocated)."""


def predict_golden(case: CiCase, cluster: str = "dgx-h100") -> tuple[float, float, float]:
    """(step seconds, last stage's allocated bytes, peak bytes) llmperf predicts for a CI case, in process, with no
    calibration (the caller points LLMPERF_HOME at an empty folder)."""
    from llmperf_hook.api import predict_config, resolve_command
    from llmperf_hook.graph.build import build_graph, ranks_per_node
    from llmperf_hook.schedule.memory import stage_memory

    env = {"PATH": os.environ.get("PATH", ""), **dict(case.env)}
    _, cfg, spec, _ = resolve_command(torchrun_argv(case), env, cluster=cluster)
    estimate = predict_config(cfg, spec)
    graph = build_graph(cfg, spec)
    last = stage_memory(cfg, graph.stages[-1], ranks_per_node(cfg, spec), spec.gpu)
    allocated = sum(v for k, v in last.items() if k not in NOT_IN_TORCH_COUNTERS)
    return estimate.step_time_s, float(allocated), float(estimate.memory.peak_bytes_per_gpu)


def compare_golden(git_dir: str, ref: str, cases: list[str], platform: str = "dgx_h100",
                   cluster: str = "dgx-h100") -> list[GoldenRow]:
    """Predicted step time and allocated peak beside what Megatron-LM's CI measured for each case (its
    golden_values_dev_<platform>.json); prints one line per case and a summary. Priced with no calibration:
    LLMPERF_HOME points at an empty folder meanwhile, and is given back after."""
    import tempfile

    print("case\tmeasured s\tpredicted s\tratio\tmeasured alloc GiB\tpredicted alloc GiB (last stage)\terror\t"
          "predicted peak GiB")
    own_home = os.environ.get("LLMPERF_HOME")
    try:
        with tempfile.TemporaryDirectory() as home:
            os.environ["LLMPERF_HOME"] = home
            rows = [row for name in cases if (row := _golden_row(git_dir, ref, name, platform, cluster))]
    finally:
        if own_home is None:
            os.environ.pop("LLMPERF_HOME", None)
        else:
            os.environ["LLMPERF_HOME"] = own_home
    print(golden_summary(rows))
    return rows


def _golden_row(git_dir: str, ref: str, name: str, platform: str, cluster: str) -> GoldenRow | None:
    """One case's row, printed; None (with a line saying why) for a case not at ref, an inference case or a refusal."""
    import math

    from llmperf_hook.errors import LlmperfError

    folder = f"{ref}:tests/functional_tests/test_cases/{name}"
    shown = [subprocess.run(["git", "-C", git_dir, "show", f"{folder}/{file}"], capture_output=True, text=True)
             for file in ("model_config.yaml", f"golden_values_dev_{platform}.json")]
    if any(s.returncode for s in shown):
        print(f"{name}\tnot found: no model_config.yaml and golden_values_dev_{platform}.json at {ref}", flush=True)
        return None
    step_s, alloc = golden_measured(shown[1].stdout)
    if math.isnan(step_s) and math.isnan(alloc):
        print(f"{name}\tskipped: no training series (an inference case's generated text)", flush=True)
        return None
    try:
        got = predict_golden(parse_ci_config(shown[0].stdout), cluster)
    except LlmperfError as e:
        print(f"{name}\texit {e.exit_code}: {str(e).splitlines()[0][:120]}", flush=True)
        return None
    row = GoldenRow(name, step_s, got[0], alloc, got[1], got[2])
    print(f"{name}\t{step_s:.4f}\t{row.predicted_s:.4f}\t{row.time_ratio:.2f}\t{alloc / 2**30:.2f}\t"
          f"{row.predicted_allocated_bytes / 2**30:.2f}\t{100 * row.allocated_error:+.1f}%\t"
          f"{row.predicted_peak_bytes / 2**30:.2f}", flush=True)
    return row


def golden_summary(rows: list[GoldenRow]) -> str:
    """Median / p10 / p90 of predicted over measured step time, and of the allocated-peak error, over the rows with
    a measurement."""
    import math
    import statistics

    def spread(values: list[float], fmt: str) -> str:
        if len(values) < 2:
            return "n/a"
        q = statistics.quantiles(values, n=10)
        return f"median {fmt.format(statistics.median(values))} (p10 {fmt.format(q[0])}, p90 {fmt.format(q[-1])})"

    times = [r.time_ratio for r in rows if math.isfinite(r.measured_s) and r.measured_s > 0]
    errors = [100 * r.allocated_error for r in rows if math.isfinite(r.measured_allocated_bytes)
              and r.measured_allocated_bytes > 0]
    mape = statistics.fmean(abs(e) for e in errors) if errors else float("nan")
    return (f"{len(rows)} cases priced. step time predicted/measured: {spread(times, '{:.2f}')} over {len(times)}; "
            f"allocated peak error: {spread(errors, '{:+.1f}%')}, MAPE {mape:.1f}% over {len(errors)}")


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("warning")]
    return lines[0][:300] if lines else ""


def survey(git_dir: str, ref: str, cases: list[str], cluster: str = "dgx-h100") -> None:
    """Runs explain / predict / tune --apply --dry-run on each case, one process at a time."""
    for spec in cases:
        name, nodes, extra = (spec.split("@") + ["", ""])[:3]
        path = f"{ref}:tests/functional_tests/test_cases/{name}/model_config.yaml"
        shown = subprocess.run(["git", "-C", git_dir, "show", path], capture_output=True, text=True)
        if shown.returncode:
            print(f"{spec}\tnot found: {_first_line(shown.stderr)}", flush=True)
            continue
        case = parse_ci_config(shown.stdout)
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
    if len(sys.argv) < 4 or (sys.argv[1] == "--golden" and len(sys.argv) < 5):
        print("usage: megatron_ci_configs.py [--golden] MIRROR_GIT_DIR REF CASE... (CASE: gpt/<case>, "
              "moe/<case>@NNODES@EXTRA,WORDS; see the module docstring)", file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] == "--golden":
        compare_golden(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        survey(sys.argv[1], sys.argv[2], sys.argv[3:])
