"""A measured run -> the launch command that ran it (Megatron-LM, Megatron-Core or Megatron-DeepSpeed).

Validation predicts every row through the same path as `llmperf predict --batch`: the row becomes a real
`torchrun ... pretrain_gpt.py <Megatron flags>` line (plus `--deepspeed --deepspeed_config ds.json` for
Megatron-DeepSpeed / DeepSpeed rows, the ds_config written into `config_dir`). What the framework of the
row did by default is spelled out as flags, so the parser sees what the run really executed:

- Megatron-LM 2021/2022 and Megatron-DeepSpeed ran the classic attention (QK^T bmm, fused masked softmax,
  PV bmm), not flash attention: `--attention-backend unfused`, for Megatron-LM with `--transformer-impl local`
  (its own layers: those years had no Transformer Engine).
- Megatron-Core recipes (the H100 rows) run Transformer Engine's fused/flash attention: `--use-flash-attn`; so does
  a Megatron-LM row of 2024 or later, or one nothing dates (no year in its framework cell, no arXiv id or ISO date
  in its source): a user's own job on today's Megatron-LM (run_year).
- Full recompute is Megatron's `--recompute-granularity full --recompute-method uniform --recompute-num-layers 1`
  (= the old `--checkpoint-activations`); selective is `--recompute-granularity selective`.
- DeepSpeed ZeRO-3 runs of releases before v0.6.0 get `LLMPERF_DEEPSPEED_VERSION=<release>` before the command
  (framework_era.py): their collectives are priced as that release ran them.
- Megatron-LM runs measured before 2022-10 get `CUDA_DEVICE_MAX_CONNECTIONS=8` before the command
  (framework_era.py): the code of that era did not keep kernels in launch order, so its TP overlap is priced serialized.
- Megatron rejects `--tp-comm-overlap` without sequence parallelism, and sequence parallelism is dropped at
  TP=1, so a recipe's `--tp-comm-overlap` is left out of TP=1 rows (noted in the plan).
- A row of BLOOM's fork (its flags hold an option only that fork defines) is written in the fork's own options,
  as its parser refuses Megatron-LM's (_bigscience_spelling).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from llmperf_hook.launch.sizing import DEEPSPEED_VERSION_ENV
from llmperf_hook.frameworks.assemble import MAX_CONNECTIONS_ENV
from llmperf_hook.frameworks.megatron_entry_points import bigscience_job
from llmperf_hook.validate.framework_era import (legacy_max_connections, legacy_zero3_release,
                                                 predates_async_tp_allreduce, published_month)
from llmperf_hook.validate.measured_run import MeasuredRun

GPT2_BPE_VOCAB = 50257
"""GPT2BPETokenizer's vocabulary: Megatron knows it without the vocab file."""


@dataclass(frozen=True)
class LaunchPlan:
    """The command a measured run corresponds to."""

    argv: tuple[str, ...]
    """torchrun ... pretrain_gpt.py ..., ready for `resolve_job` / `predict_command`."""
    notes: tuple[str, ...] = ()
    """Flags of the row that were dropped or adjusted, and why."""


def build_launch_plan(run: MeasuredRun, config_dir: Path) -> LaunchPlan:
    """The launch command of `run`; ds_config files (if any) are written into `config_dir`."""
    notes: list[str] = []
    argv = [*_launcher_args(run, notes), "pretrain_gpt.py", *_model_args(run), *_layout_args(run),
            *_recompute_args(run), *_precision_args(run), *_attention_args(run, notes)]
    if run.distributed_optimizer:
        argv.append("--use-distributed-optimizer")
    argv += _extra_args(run, notes)
    if bigscience_job("pretrain_gpt.py", run.extra_args):
        argv = _bigscience_spelling(argv)
    if run.framework in ("megatron-deepspeed", "deepspeed") or run.zero_stage > 0:
        argv += _deepspeed_args(run, config_dir)
    release = legacy_zero3_release(run.zero_stage, run.framework_text, run.source, run.source_location)
    if release is not None:
        version = ".".join(map(str, release))
        argv.insert(0, f"{DEEPSPEED_VERSION_ENV}={version}")
        notes.append(f"ZeRO-3 as DeepSpeed {version} (the run's release, or the newest before its publication) ran it: "
                     f"{DEEPSPEED_VERSION_ENV}={version} (framework_era.py)")
    connections = legacy_max_connections(run.framework, run.framework_text, run.source, run.source_location)
    if connections is not None:
        argv.insert(0, f"{MAX_CONNECTIONS_ENV}={connections}")
        notes.append(f"Megatron-LM before 2022-10 (bdd9731) did not keep kernels in launch order: "
                     f"{MAX_CONNECTIONS_ENV}={connections}, CUDA's default, so sequence parallelism's backward "
                     "collectives are priced serialized with their GEMMs (framework_era.py)")
    if run.tp > 1 and predates_async_tp_allreduce(run.framework, run.framework_text, run.source,
                                                  run.source_location):
        notes.append("Megatron-LM before 2021-09 (16c90445) all-reduced the input gradient synchronously: priced "
                     f"serialized through {MAX_CONNECTIONS_ENV}={connections} (framework_era.py)")
    return LaunchPlan(argv=tuple(argv), notes=tuple(notes))


_FULL_RECOMPUTE = ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]


def _bigscience_spelling(argv: list[str]) -> list[str]:
    """A row of BLOOM's fork (its flags hold one only that fork defines, megatron_entry_points.bigscience_job) in the
    fork's own options, since its parser refuses Megatron-LM's (frameworks/megatron_unknown_args): full recompute is
    --checkpoint-activations; the vocabulary is BLOOM's tokenizer padded with --pad-vocab-size-to (its tr11 scripts:
    PretrainedFromHF bigscience/tokenizer), as it has no --vocab-size; its attention is the classic unfused one, as
    Megatron-DeepSpeed's, with no --attention-backend to say so."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i:i + len(_FULL_RECOMPUTE)] == _FULL_RECOMPUTE:
            out.append("--checkpoint-activations")
            i += len(_FULL_RECOMPUTE)
        elif argv[i] == "--vocab-size":
            out += ["--tokenizer-type", "PretrainedFromHF", "--tokenizer-name-or-path", "bigscience/tokenizer",
                    "--pad-vocab-size-to", argv[i + 1]]
            i += 2
        elif argv[i:i + 2] == ["--attention-backend", "unfused"]:
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _launcher_args(run: MeasuredRun, notes: list[str]) -> list[str]:
    nnodes, nproc = launch_size(run.num_gpus, run.gpus_per_node or run.num_gpus)
    if nproc < min(run.gpus_per_node, run.num_gpus):
        notes.append(f"{run.num_gpus} GPUs on {run.gpus_per_node}-GPU nodes: launched as {nnodes} nodes of {nproc} "
                     f"(torchrun starts as many processes on every node)")
    return ["torchrun", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc)]


def launch_size(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, processes per node) that start exactly `num_gpus` ranks with at most `gpus_per_node` per node. torchrun
    starts --nproc-per-node on every node, so 12 GPUs on 8-GPU nodes are 2 nodes of 6: the largest divisor of the GPU
    count that fits a node (ceil(12 / 8) nodes of 8 would be a 16-rank job, another DP)."""
    nproc = max(d for d in range(1, min(gpus_per_node, num_gpus) + 1) if num_gpus % d == 0)
    return num_gpus // nproc, nproc


def _model_args(run: MeasuredRun) -> list[str]:
    args = [
        "--num-layers", str(run.num_layers), "--hidden-size", str(run.hidden_size),
        "--num-attention-heads", str(run.num_attention_heads), "--ffn-hidden-size", str(run.ffn_hidden_size),
        "--seq-length", str(run.seq_length), "--max-position-embeddings", str(run.seq_length),
    ]
    if run.vocab_size == GPT2_BPE_VOCAB:
        args += ["--tokenizer-type", "GPT2BPETokenizer"]
    else:
        args += ["--vocab-size", str(run.vocab_size)]
    if run.num_query_groups != run.num_attention_heads:
        args += ["--group-query-attention", "--num-query-groups", str(run.num_query_groups)]
    if run.swiglu:
        args.append("--swiglu")
    if run.normalization == "RMSNorm":
        args += ["--normalization", "RMSNorm"]
    if run.position_embedding != "learned_absolute":  # Megatron's default
        args += ["--position-embedding-type", run.position_embedding]
    return args


def _layout_args(run: MeasuredRun) -> list[str]:
    args = [
        "--micro-batch-size", str(run.micro_batch_size), "--global-batch-size", str(run.global_batch_size),
        "--tensor-model-parallel-size", str(run.tp), "--pipeline-model-parallel-size", str(run.pp),
    ]
    if run.vpp > 1 and run.num_layers % (run.pp * run.vpp) == 0:
        args += ["--num-layers-per-virtual-pipeline-stage", str(run.num_layers // (run.pp * run.vpp))]
    elif run.vpp > 1:
        # Layers that do not split evenly (Llama 3.1 405B: 126 over 8 x 8 chunks) are split by the recipe's own
        # flags (--account-for-embedding/loss-in-pipeline-split); Megatron-Core then takes the chunk count.
        args += ["--num-virtual-stages-per-pipeline-rank", str(run.vpp)]
    if run.cp > 1:
        args += ["--context-parallel-size", str(run.cp)]
    if run.ep > 1:
        args += ["--expert-model-parallel-size", str(run.ep)]
    if run.sequence_parallel:
        args.append("--sequence-parallel")
    return args


def _recompute_args(run: MeasuredRun) -> list[str]:
    if run.recompute == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if run.recompute == "selective":
        return ["--recompute-granularity", "selective"]
    return []


def _precision_args(run: MeasuredRun) -> list[str]:
    return {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp8": ["--bf16", "--fp8-format", "hybrid"]}.get(run.precision, [])


ATTENTION_FLAGS = ("--attention-backend", "--use-flash-attn", "--use-flash-attn-v2", "--use-flash-attn-triton")
"""Flags that choose the attention kernel: a row whose own flags name one keeps it (--attention-backend would win)."""


def _attention_args(run: MeasuredRun, notes: list[str]) -> list[str]:
    if any(flag in ATTENTION_FLAGS for flag in run.extra_args):
        return []
    if run.framework == "megatron-core":
        return ["--use-flash-attn"]
    year = run_year(run)
    if run.framework == "megatron" and (year is None or year >= MEGATRON_TE_ATTENTION_YEAR):
        dated = f"of {year}" if year else "with no date in its framework, source or source_location cells"
        notes.append(f"attention: flash (a Megatron-LM row {dated} is priced as Megatron-LM has run since "
                     f"{MEGATRON_TE_ATTENTION_YEAR}; write the run's year, e.g. 'Megatron-LM (2021)', for the "
                     "classic unfused attention of the papers)")
        return ["--use-flash-attn"]
    if run.framework == "megatron":
        notes.append(f"attention: classic unfused kernels (QK^T bmm, masked softmax, PV bmm), as Megatron-LM ran them "
                     f"in {year}; give --use-flash-attn in extra_args if this run used it")
        # its own attention, not Transformer Engine's (today's default --transformer-impl), whose unfused backend
        # decides the softmax by TE's rule (graph/attention_core_ops.te_unfused_attention)
        return ["--attention-backend", "unfused", "--transformer-impl", "local"]
    return ["--attention-backend", "unfused"]


MEGATRON_TE_ATTENTION_YEAR = 2024
"""From 2024 Megatron-LM trains the Megatron-Core model with Transformer Engine's attention by default
(Megatron-Core models the default on main since 2024-05-24, commit 9ad1a56, first released in core_r0.8.0;
--attention-backend auto later); the 2021-2022 papers' runs used the classic QK^T / softmax / PV kernels."""


def run_year(run: MeasuredRun) -> int | None:
    """The run's year: one written in the framework cell ("Megatron-LM (2021)"), else its source's arXiv id or ISO
    date; None when nothing dates it (a user's own job: today's framework)."""
    written = re.search(r"\b(20\d{2})\b", run.framework_text)
    if written:
        return int(written.group(1))
    month = published_month(run.source, run.source_location)
    return month[0] if month else None


def _extra_args(run: MeasuredRun, notes: list[str]) -> list[str]:
    kept: list[str] = []
    for flag in run.extra_args:
        if flag == "--tp-comm-overlap" and (run.tp == 1 or not run.sequence_parallel):
            notes.append("--tp-comm-overlap left out: Megatron requires sequence parallelism (TP > 1) for it")
            continue
        if flag == "--overlap-param-gather" and not run.distributed_optimizer:
            notes.append("--overlap-param-gather implies --use-distributed-optimizer (Megatron asserts it)")
            kept.append("--use-distributed-optimizer")
        if not flag.startswith("--") or flag not in kept:  # values repeat ("--kv-channels 128 --num-experts 128")
            kept.append(flag)
    return kept


def _deepspeed_args(run: MeasuredRun, config_dir: Path) -> list[str]:
    path = write_ds_config(ds_config_for(run), config_dir)
    args = ["--deepspeed", "--deepspeed_config", str(path), "--zero-stage", str(run.zero_stage)]
    if run.pp == 1 and run.zero_stage >= 2:
        # DeepSpeed's pipeline engine supports ZeRO 0/1 only; Megatron-DeepSpeed runs ZeRO-2/3 without it.
        args.append("--no-pipeline-parallel")
    return args


def ds_config_for(run: MeasuredRun) -> dict[str, object]:
    """The ds_config Megatron-DeepSpeed's example scripts write (batch triad, ZeRO stage, precision)."""
    dp = run.num_gpus // (run.tp * run.pp * run.cp)
    config: dict[str, object] = {
        "train_batch_size": run.global_batch_size,
        "train_micro_batch_size_per_gpu": run.micro_batch_size,
        "gradient_accumulation_steps": run.global_batch_size // (run.micro_batch_size * dp),
        "zero_optimization": {"stage": run.zero_stage},
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }
    if run.precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 12}
    elif run.precision in ("bf16", "fp8"):
        config["bf16"] = {"enabled": True}
    return config


def write_ds_config(config: dict[str, object], config_dir: Path) -> Path:
    """Write once per distinct content (rows sharing a config share the file)."""
    text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    path = config_dir / f"ds_config-{digest}.json"
    if not path.exists():
        config_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path
