"""One measured training run (a row of a validation CSV), parsed into typed values.

The CSV schema `llmperf validate` accepts is the configuration columns of `../shared/validation/dev.csv`
plus the measured `iteration_time_s` and a cluster description. Cells may carry the transcriber's caveats
after the value ("50257 (vTrain default; not in csv)", "full (use_checkpoint=true ...)", "likely (...)"):
the leading value is read, the caveat kept for the report. Blank cells get the framework's default, and
the handful of fill-in rules below (each recorded in `MeasuredRun.assumptions`, never silent):

| column                  | blank means                                                              |
|-------------------------|--------------------------------------------------------------------------|
| num_attention_heads     | hidden_size // 128 (head dim 128 of GPT-3 and the Megatron papers' models) |
| num_query_groups        | no grouped-query attention (= heads)                                     |
| ffn_hidden_size         | 4 * hidden_size (Megatron default)                                       |
| vocab_size              | 51200 (the Megatron papers' padded GPT-2 vocabulary)                     |
| micro_batch_size        | 1 (the SC21 paper's choice for pipelined runs; Megatron needs a value)   |
| vpp, cp, ep             | 1                                                                        |
| dp                      | num_gpus / (tp * pp * cp)                                                |
| sequence_parallel       | off;  recompute: none;  zero_stage_or_dist_opt: none                     |
| precision               | bf16 (Megatron-Core recipes); "mixed precision (fp16 ...)" reads as fp16 |
| framework               | Megatron-LM                                                              |
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, Mapping

from llmperf_hook.errors import UsageError
from llmperf_hook.validate.cell_units import NUMBER, check_unit

FrameworkFamily = Literal["megatron", "megatron-core", "megatron-deepspeed", "deepspeed"]

REQUIRED_COLUMNS: tuple[str, ...] = (
    "num_layers", "hidden_size", "seq_length", "global_batch_size", "tp", "pp", "num_gpus",
    "iteration_time_s",
)
"""Columns every validation CSV must have (cells may not be blank)."""

CLUSTER_COLUMN_SETS: tuple[tuple[str, ...], ...] = (("cluster",), ("gpu_type", "gpus_per_node"))
"""A CSV names its cluster with a `cluster` column (preset name or YAML path) or describes it with
`gpu_type` + `gpus_per_node` (+ optional `inter_node_network` / `inter_node_bandwidth_GBps` /
`intra_node_bandwidth_GBps`)."""

OPTIONAL_COLUMNS: tuple[str, ...] = (
    "row_id", "source_id", "source", "model", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
    "vocab_size", "micro_batch_size", "vpp", "cp", "dp", "ep", "sequence_parallel", "recompute",
    "zero_stage_or_dist_opt", "precision", "framework", "extra_args", "notes", "cluster", "gpu_type",
    "gpus_per_node", "intra_node_interconnect", "inter_node_network", "intra_node_bandwidth_GBps",
    "inter_node_bandwidth_GBps", "swiglu", "normalization", "position_embedding", "source_location",
)
"""Columns read when present (see the module docstring for what blank means)."""

RECORD_COLUMNS: tuple[str, ...] = (
    "gpu_memory_gb", "metric_name", "metric_value", "metric_unit", "reported_mfu", "iteration_time_method",
    "confidence",
)
"""Columns of dev.csv that record how the measured time was obtained: known to the schema, read for nothing (the
GPU's memory comes from its preset; `iteration_time_s` is the measurement)."""

POSITION_EMBEDDING_CHOICES: tuple[str, ...] = ("learned_absolute", "rope", "yarn", "mrope", "relative", "none")
"""Megatron-LM's --position-embedding-type choices (megatron/training/arguments.py, default learned_absolute): the
`position_embedding` cell names one, and the row's command passes it on, so the framework rules and prices it as
for `llmperf predict` (what it does not model, T5's relative bias, comes back as the row's warning)."""

HEAD_DIM_DEFAULT = 128
"""Head dimension of GPT-3 (12288/96) and of most models in the Megatron papers; fills a blank heads cell."""


@dataclass(frozen=True)
class MeasuredRun:
    """A measured configuration and its step time, with the cluster it ran on."""

    row_id: str
    """Identifier from the `row_id` column (else the 1-based data line number)."""
    source_id: str
    """Groups rows for per-source MAPE (`source_id` column, else "all")."""
    source: str
    """Human-readable source (paper, README) for the report."""
    model: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    ffn_hidden_size: int
    vocab_size: int
    seq_length: int
    micro_batch_size: int
    global_batch_size: int
    tp: int
    pp: int
    vpp: int
    cp: int
    dp: int
    ep: int
    num_gpus: int
    sequence_parallel: bool
    recompute: Literal["none", "selective", "full"]
    zero_stage: int
    """DeepSpeed ZeRO stage (0 = none)."""
    distributed_optimizer: bool
    """Megatron --use-distributed-optimizer."""
    precision: Literal["fp32", "fp16", "bf16", "fp8"]
    framework: FrameworkFamily
    extra_args: tuple[str, ...]
    """Further launch flags: the `extra_args` column, or the `flags:` list in `notes`."""
    gpu_type: str
    gpus_per_node: int
    """GPUs per node of the cluster (a 2-GPU run on an 8-GPU node says 8)."""
    cluster: str
    """`cluster` column (preset name or YAML path); "" = derive from the gpu/network columns."""
    inter_node_network: str
    """Free-text network description, e.g. "InfiniBand HDR 200Gb/s x8 per node"."""
    inter_node_bandwidth_GBps: float | None
    """Per GPU, one direction (1 GB = 1e9 bytes), when the CSV states it as a number."""
    intra_node_bandwidth_GBps: float | None
    swiglu: bool
    normalization: str
    """"LayerNorm" | "RMSNorm"."""
    position_embedding: str
    """One of POSITION_EMBEDDING_CHOICES."""
    iteration_time_s: float
    """The measured step time (one optimizer step of the global batch)."""
    assumptions: tuple[str, ...] = ()
    """Fill-in rules applied to blank cells of this row."""
    framework_text: str = ""
    """The `framework` cell as written (may carry a version, e.g. "DeepSpeed 0.4.2"): see framework_era.py."""
    source_location: str = ""
    """The `source_location` cell (URL, commit, date): dates the run when the framework cell has no version."""


def leading_token(cell: str) -> str:
    """The value before the caveat: "50257 (vTrain default)" -> "50257"; "likely (...)" -> "likely"."""
    text = cell.strip()
    match = re.match(r"[^\s(;,]+", text)
    return match.group(0) if match else ""


THOUSANDS_NUMBER = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?=$|[\s(;])")
"""A number written with thousands separators, "1,024" or "1,234.5" (a spreadsheet's export of a quoted cell)."""


def number_token(cell: str, column: str, where: str) -> str:
    """The number at the start of a numeric cell. "1,024" is 1024, not 1 followed by a caveat: the comma that ends a
    leading token elsewhere ("full, selective ...") would read a thousands-grouped GPU count or step time as its first
    group, silently. A comma that is not a thousands separator right after the digits ("4,25", "1,5": a decimal comma?)
    is refused as ambiguous."""
    text = cell.strip()
    grouped = THOUSANDS_NUMBER.match(text)
    if grouped:
        number = grouped.group(0).replace(",", "")
        check_unit(number, text[grouped.end():], cell, column, where)
        return number
    token = leading_token(text)
    if re.match(r",\s*\d", text[len(token):]) and re.fullmatch(r"[+-]?[\d.]+", token):
        raise UsageError(f"{where}: column `{column}` = {cell!r} is ambiguous: its comma does not group thousands "
                         "(as in 1,024), so it may be a decimal comma. Write the number with a decimal point and no "
                         "separators (4.25, 1024).")
    number = NUMBER.match(text)
    if number is None:
        return token  # not a number: the caller says so
    check_unit(number.group(0), text[number.end():], cell, column, where)
    return number.group(0)


def parse_int(raw: Mapping[str, str], column: str, where: str, default: int | None = None) -> int:
    cell = (raw.get(column) or "").strip()
    if not cell:
        if default is None:
            raise UsageError(f"{where}: column `{column}` is blank; it is required (an integer). Fill it in.")
        return default
    token = number_token(cell, column, where)
    try:
        value = float(token)
    except ValueError:
        raise UsageError(f"{where}: column `{column}` = {cell!r} is not a number; write an integer.") from None
    if value != int(value) or value < 0:
        raise UsageError(f"{where}: column `{column}` = {cell!r} must be a non-negative integer.")
    return int(value)


def parse_count(raw: Mapping[str, str], column: str, where: str) -> int | None:
    """An optional count (heads, vocabulary, micro-batch, vpp, ep, GPUs per node): None when blank, else at least
    1. A written 0 is refused, not read as blank: the table above fills only cells that say nothing."""
    if not (raw.get(column) or "").strip():
        return None
    value = parse_int(raw, column, where)
    if value < 1:
        raise UsageError(f"{where}: column `{column}` = {raw.get(column)!r} must be at least 1; leave it blank for "
                         f"the default.")
    return value


def parse_float(raw: Mapping[str, str], column: str, where: str) -> float | None:
    """A positive, finite number (times and bandwidths), or None for a blank cell."""
    cell = (raw.get(column) or "").strip()
    if not cell:
        return None
    try:
        value = float(number_token(cell, column, where))
    except ValueError:
        raise UsageError(f"{where}: column `{column}` = {cell!r} is not a number.") from None
    if not (0 < value < math.inf):  # nan too: it would turn every MAPE into nan
        raise UsageError(f"{where}: column `{column}` = {cell!r} must be a positive, finite number; fix the cell "
                         f"or leave it blank where the column is optional.")
    return value


YES_WORDS = ("yes", "y", "true", "1", "on", "likely", "enabled")
NO_WORDS = ("no", "n", "false", "0", "off", "none", "disabled")


def parse_switch(raw: Mapping[str, str], column: str, where: str) -> bool:
    """A yes/no cell: "yes"/"true"/"1"/"on"/"likely (...)" -> True; blank/"no"/"false"/"0"/"off" -> False; a word
    that is neither is refused (it was read as no, in silence)."""
    cell = raw.get(column) or ""
    token = leading_token(cell).lower()
    if token and token not in YES_WORDS + NO_WORDS:
        raise UsageError(f"{where}: column `{column}` = {cell.strip()!r}; write yes or no ({', '.join(YES_WORDS)} / "
                         f"{', '.join(NO_WORDS)}; blank = no).")
    return token in YES_WORDS


def parse_choice(raw: Mapping[str, str], column: str, where: str, choices: tuple[str, ...]) -> str:
    """A cell naming one of `choices` in any letter case (blank = the first); another word is refused."""
    cell = raw.get(column) or ""
    token = leading_token(cell).lower()
    by_lower = {choice.lower(): choice for choice in choices}
    if token and token not in by_lower:
        raise UsageError(f"{where}: column `{column}` = {cell.strip()!r}; write one of {', '.join(choices)} "
                         f"(blank = {choices[0]}).")
    return by_lower.get(token, choices[0])


def parse_recompute(cell: str, where: str) -> Literal["none", "selective", "full"]:
    token = leading_token(cell).lower()
    if token in ("", "none", "no", "off", "false"):
        return "none"
    if token in ("full", "selective"):
        return token  # type: ignore[return-value]
    raise UsageError(f"{where}: column `recompute` = {cell!r}; write full, selective or none (blank = none).")


def parse_zero(cell: str, where: str = "row") -> tuple[int, bool]:
    """-> (zero_stage, distributed_optimizer) from "ZeRO-3 (DeepSpeed)", "distributed optimizer", "zero1"; a cell
    naming neither is refused (it was read as no ZeRO, in silence)."""
    text = cell.strip().lower()
    if not text or leading_token(text) in ("none", "no", "0", "off"):
        return 0, False
    match = re.search(r"zero[-_ ]?(?:stage[-_ ]?)?([0-3])", text)
    if match:
        return int(match.group(1)), False
    if "distributed" in text or "dist_opt" in text or "dist-opt" in text:
        return 0, True
    raise UsageError(f"{where}: column `zero_stage_or_dist_opt` = {cell.strip()!r} names neither a ZeRO stage nor "
                     "Megatron's distributed optimizer; write zero1, zero2, zero3 (ZeRO-1..3), distributed optimizer, "
                     "or none (blank = none).")


def parse_precision(cell: str) -> tuple[Literal["fp32", "fp16", "bf16", "fp8"], str | None]:
    """-> (precision, assumption or None). The first dtype word in the cell wins."""
    text = cell.lower()
    for word in re.findall(r"fp8|bf16|bfloat16|fp16|float16|half|fp32|float32", text):
        mapped = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}.get(word, word)
        return mapped, None  # type: ignore[return-value]
    return "bf16", f"precision {cell.strip()!r} names no dtype: bf16 assumed"


def parse_framework(cell: str, where: str = "row") -> FrameworkFamily:
    """Megatron-DeepSpeed / DeepSpeed / Megatron-Core / Megatron-LM from the free-text framework cell (blank:
    Megatron-LM; NeMo runs Megatron-Core). A cell naming none of them is refused: its row would be priced as a
    Megatron-LM run it is not."""
    text = cell.lower()
    if "deepspeed" in text:
        return "megatron-deepspeed" if "megatron" in text else "deepspeed"
    if "core" in text or "mcore" in text:
        return "megatron-core"
    if "megatron" in text or not text.strip():
        return "megatron"
    if "nemo" in text:  # NeMo 2 runs Megatron-Core ("NeMo Megatron (2022)" reads as Megatron-LM above)
        return "megatron-core"
    raise UsageError(f"{where}: column `framework` = {cell.strip()!r} names no framework llmperf validates; write "
                     f"Megatron-LM, Megatron-Core (or NeMo), Megatron-DeepSpeed or DeepSpeed (blank = Megatron-LM), or "
                     f"leave the row out.")


def parse_extra_args(raw: Mapping[str, str]) -> tuple[str, ...]:
    """`extra_args` column, else the flags listed after "flags:" in `notes` (up to the next ';')."""
    cell = (raw.get("extra_args") or "").strip()
    if not cell:
        match = re.search(r"flags:\s*([^;]*)", raw.get("notes") or "")
        cell = match.group(1) if match else ""
    return tuple(word for word in cell.split() if word)
