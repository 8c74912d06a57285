"""Model shape for scripts that do not take Megatron-style model flags (DeepSpeed examples, Hugging Face
Trainer scripts): llmperf's `--model PRESET|FILE`, else run_clm.py's `--model_type` config with its
`--config_overrides` (a model trained from scratch), else a local `--model_name_or_path`/`--config_name` directory
with config.json, else a Hub name we ship a preset for. Sequence length from the script's own flag
(--max_seq_length, --block_size, --model_max_length, --seq-length, DeepSpeed-Chat's --max_seq_len, the
`--max_length` of DeepSpeedExamples' finetune scripts, which pad every sample to it, OpenRLHF's --max_len) or, failing
that, the shape's.

Also what a plain-torch script's own code does with its weights' dtype and optimizer (script_training: read with
`ast`, never imported or run), so a script that casts its model to bf16 and steps torch.optim over it is priced
with 16-bit states instead of Megatron's mixed-precision 18 bytes per parameter.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.hf_config import EXTRA_SHAPE_KEYS, config_from_overrides, read_hf_config, shape_from_hf_config
from llmperf_hook.frameworks.presets import list_model_presets, load_model_preset
from llmperf_hook.frameworks.script_tree import script_tree
from llmperf_hook.frameworks.torch_step_impl import torch_step_impl
from llmperf_hook.frameworks.torch_weight_decay import call_weight_decay
from llmperf_hook.frameworks.training_config import ModelShape, TrainingConfig
from llmperf_hook.provenance import Source, SourceKind

# Hub names whose published shape we ship, suggested in the error (never fetched, never assumed): name -> preset.
HUB_PRESETS = {
    "meta-llama/Llama-2-7b-hf": "llama2-7b", "meta-llama/Llama-2-13b-hf": "llama2-13b", "meta-llama/Llama-2-70b-hf": "llama2-70b",
    "meta-llama/Meta-Llama-3-8B": "llama3-8b", "meta-llama/Meta-Llama-3-70B": "llama3-70b", "meta-llama/Llama-3.1-8B": "llama3-8b",
    "meta-llama/Llama-3.1-70B": "llama3-70b", "meta-llama/Llama-3.1-405B": "llama3-405b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3-8b", "meta-llama/Llama-3.1-70B-Instruct": "llama3-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama3-70b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b", "EleutherAI/gpt-neox-20b": "gpt-neox-20b",
}
_SEQ_FLAGS = ("max_seq_length", "block_size", "model_max_length", "seq_length", "max_seq_len", "max_length", "max_len")
_MODEL_DESTS = ("model_name_or_path", "model_name", "pretrain")
"""The script's flag naming the model: the Hugging Face Trainer's --model_name_or_path, DeepSpeedExamples' --model_name,
OpenRLHF's --pretrain."""


def _scratch_config(flags: FlagValues) -> tuple[dict[str, Any], Source] | None:
    """run_clm.py's model built from scratch (no --config_name / --model_name_or_path): `--model_type`'s default
    config with `--config_overrides` applied (hf_config.config_from_overrides); None for a script that loads one.
    Both at once stop run_clm.py (ModelArguments.__post_init__: "--config_overrides can't be used in combination with
    --config_name or --model_name_or_path")."""
    loads = [flags.seen_flags[dest] for dest in ("config_name", "model_name_or_path") if flags.has(dest)]
    if flags.has("config_overrides") and loads:
        raise ConfigError(f"{flags.seen_flags['config_overrides']} with {' and '.join(loads)}: the Hugging Face example "
                          "scripts stop on it (run_clm.py ModelArguments.__post_init__: \"--config_overrides can't be "
                          "used in combination with --config_name or --model_name_or_path\"; the overrides apply only "
                          "to a config built from scratch by --model_type). Drop one of them.")
    if loads or any(flags.has(dest) for dest in _MODEL_DESTS) or not (flags.has("config_overrides") or
                                                                       flags.has("model_type")):
        return None
    given = " ".join(f"{flags.seen_flags[d]} {flags.get(d)}" for d in ("model_type", "config_overrides") if flags.has(d))
    raw = config_from_overrides(flags.get("model_type"), flags.get("config_overrides"))
    if raw.get("gradient_checkpointing") and not flags.has("gradient_checkpointing"):  # the model checkpoints its
        flags.values["gradient_checkpointing"] = True  # blocks (transformers < 4.11): priced as the Trainer's flag
        flags.sources["gradient_checkpointing"] = Source(SourceKind.ARGV, "--config_overrides gradient_checkpointing")
    return shape_from_hf_config(raw, given), Source(SourceKind.ARGV, given)


def _shape_source(flags: FlagValues, model: str | None) -> tuple[dict[str, Any], Source]:
    if model:
        return load_model_preset(model), Source(SourceKind.OVERRIDE, f"--model {model}")
    scratch = _scratch_config(flags)
    if scratch is not None:
        return scratch
    for dest in ("config_name", *_MODEL_DESTS):
        path = flags.get(dest)
        if isinstance(path, str) and os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")):
            return shape_from_hf_config(read_hf_config(path), path), Source(SourceKind.CONFIG_FILE, f"{path}/config.json")
    dest = next((d for d in _MODEL_DESTS if flags.has(d)), "model_name_or_path")
    flag, named = "--" + dest, flags.get(dest)
    hint = f" (for {named}: llmperf --model {HUB_PRESETS[named]})" if named in HUB_PRESETS else ""
    raise ConfigError(
        "cannot find the model shape: the training script takes no Megatron-style model flags"
        + (f", and {flag} {named} is not a local directory with config.json" if named else "")
        + f". Give llmperf --model PRESET|FILE{hint} (presets: {', '.join(list_model_presets())}; or a YAML shape file or a "
        "Hugging Face config.json), or point --model_name_or_path at a local model directory."
    )


def script_model_type(flags: FlagValues, model: str | None) -> str:
    """The Hugging Face `model_type` of the config the shape comes from ("" for a preset or shape file), for what
    depends on transformers' module classes (deepspeed_release.zero3_splits_bias: GPT-2's Conv1D)."""
    return str(_shape_source(flags, model)[0].get("model_type", ""))


def script_hidden_act(flags: FlagValues, model: str | None) -> tuple[str, Source]:
    """The activation a Hugging Face model runs (its config's hidden_act, GPT-2's activation_function, ...; without
    one the class default, hf_config.hf_activation; "" for a preset, a shape file, or a family it does not know) and
    where it comes from."""
    raw, origin = _shape_source(flags, model)
    if raw.get("hidden_act_from"):
        origin = Source(origin.kind, f"{origin.detail} ({raw['hidden_act_from']})")
    return str(raw.get("hidden_act", "")), origin


def resolve_script_shape(flags: FlagValues, model: str | None, src: dict[str, Source], warnings: list[str]) -> ModelShape:
    raw, origin = _shape_source(flags, model)
    for key in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "vocab_size",
                "padded_vocab_size", "kv_channels", "swiglu", "normalization", "position_embedding", "untie_embeddings",
                "num_experts", "moe_router_topk", "moe_ffn_hidden_size", *(k for k in EXTRA_SHAPE_KEYS if k in raw)):
        src[key] = origin
    seq_flag = next((d for d in _SEQ_FLAGS if flags.has(d)), None)
    if seq_flag:
        seq, src["seq_length"] = flags.get(seq_flag), flags.source(seq_flag)
    elif "seq_length" in raw:
        seq, src["seq_length"] = raw["seq_length"], origin
        warnings.append(f"sequence length not given by the script: assumed {seq} from {origin}; pass --max_seq_length/--block_size to be exact")
    else:
        raise ConfigError(f"cannot tell the sequence length: {origin} has none and the script gives no --max_seq_length/--block_size/--seq-length.")
    if raw.get("sliding_window") and seq > raw["sliding_window"]:
        warnings.append(f"sliding-window attention (window {raw['sliding_window']} in {origin}) is not modelled: attention "
                        f"is priced as full causal attention over seq {seq}, an overestimate of its time")
    if "vocab_size" not in raw:
        raise ConfigError(f"{origin} states no vocab_size; add vocab_size to the shape file.")
    hidden, heads = raw["hidden_size"], raw["num_attention_heads"]
    return ModelShape(
        num_layers=raw["num_layers"], hidden_size=hidden, ffn_hidden_size=raw.get("ffn_hidden_size", 4 * hidden),
        num_attention_heads=heads, num_query_groups=raw.get("num_query_groups", heads),
        kv_channels=raw.get("kv_channels", hidden // heads), seq_length=seq, vocab_size=raw["vocab_size"],
        padded_vocab_size=raw["vocab_size"], swiglu=bool(raw.get("swiglu", False)),
        normalization=raw.get("normalization", "LayerNorm"), position_embedding=raw.get("position_embedding", "learned_absolute"),
        untie_embeddings=bool(raw.get("untie_embeddings", False)), add_bias_linear=bool(raw.get("add_bias_linear", True)),
        num_experts=raw.get("num_experts", 0), moe_router_topk=raw.get("moe_router_topk", 2),
        moe_ffn_hidden_size=raw.get("moe_ffn_hidden_size", 0), moe_layer_freq=raw.get("moe_layer_freq", 1),
        word_embed_proj_dim=raw.get("word_embed_proj_dim"), max_position_embeddings=raw.get("max_position_embeddings"),
        **{key: raw[key] for key in EXTRA_SHAPE_KEYS if key in raw},  # a Hugging Face config's MoE / MLA fields
    )


@dataclass(frozen=True)
class ScriptTraining:
    """What a plain-torch training script's own code does with its model's dtype and optimizer (read, never run)."""

    optimizer: str
    """"adam" (torch.optim.Adam / AdamW) or "sgd" (torch.optim.SGD)."""
    impl: str
    """The step as called (OptimizerConfig.torch_optimizer_impl, frameworks/torch_step_impl.py): "foreach" (torch's
    default on CUDA) or "fused" (fused=True given as a literal), with amsgrad; SGD's "sgd" / "sgd_momentum" / ..."""
    where: str
    """`path line N` of the cast, for provenance."""
    weight_decay: str = "decoupled"
    """The Adam step's weight-decay pass (OptimizerConfig.torch_weight_decay, frameworks/torch_weight_decay.py)."""


_TORCH_OPTIMIZERS = {"Adam": "adam", "AdamW": "adam", "SGD": "sgd"}
_HALF_DTYPES = frozenset({"bfloat16", "float16", "half"})


def _dotted(node: ast.AST) -> str:
    """`torch.optim.AdamW` for an attribute chain of names, else ""."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _is_half_cast(call: ast.Call) -> bool:
    """`X.to(torch.bfloat16)`, `X.to(dtype=torch.half)`, `X.bfloat16()`, `X.half()`."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ("bfloat16", "half") and not call.args:
        return True
    dtypes = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")] if func.attr == "to" else []
    return any(_dotted(d).split(".")[-1] in _HALF_DTYPES for d in dtypes)


def _loads_in_half(call: ast.Call) -> bool:
    """A call given torch_dtype= / dtype= a 16-bit torch dtype (Hugging Face from_pretrained / from_config)."""
    return any(k.arg in ("torch_dtype", "dtype") and _dotted(k.value).split(".")[-1] in _HALF_DTYPES
               for k in call.keywords)


def _half_cast_names(tree: ast.AST) -> dict[str, int]:
    """{name: line} of the names a script casts to 16 bits: the receiver of a cast (`model.half()` casts an
    nn.Module in place), the target of an assignment from one (`model = GPT(args).to(torch.bfloat16)`) or from a
    load in a 16-bit dtype (`AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)`)."""
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_half_cast(node) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name):
            out.setdefault(node.func.value.id, node.lineno)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and (
                _is_half_cast(node.value) or _loads_in_half(node.value)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, node.lineno)
    return out


def _optimizer_over(call: ast.Call, imported: dict[str, str]) -> tuple[str, str, str, str] | None:
    """(optimizer, impl, model name, weight-decay kind) of `torch.optim.AdamW(model.parameters(), ...)` (or a name
    imported from torch.optim, aliases too), or None."""
    name = _dotted(call.func)
    short = imported.get(name) or (name.split(".")[-1] if name.startswith(("torch.optim.", "optim.")) else "")
    if short not in _TORCH_OPTIMIZERS:
        return None
    first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "params"), None)
    if not (isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute) and first.func.attr == "parameters"
            and isinstance(first.func.value, ast.Name)):
        return None
    return _TORCH_OPTIMIZERS[short], torch_step_impl(call, short), first.func.value.id, call_weight_decay(call, short)


def script_training(script: str) -> ScriptTraining | None:
    """A plain-torch script that casts its model to 16 bits and builds a torch.optim optimizer over that model's
    parameters: its step updates the 16-bit weights with 16-bit gradients and states (torch.optim keeps each state
    in its parameter's dtype: adamw.py _init_group zeros_like(p, memory_format=...)). None when the file cannot be
    read or parsed, or the script does not do both (autocast keeps fp32 weights: mixed precision)."""
    tree = script_tree(script)
    if tree is None:
        return None
    imported = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "torch.optim" for a in node.names}  # local name -> torch.optim's name
    casts = _half_cast_names(tree)
    for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
        found = _optimizer_over(call, imported)
        if found and found[2] in casts:
            return ScriptTraining(found[0], found[1], f"{script} line {casts[found[2]]}", found[3])
    return None


def script_torch_optimizer(script: str) -> tuple[str, str, str, str] | None:
    """(optimizer, impl, `path line N`, weight-decay kind) of the first torch.optim.Adam / AdamW / SGD a script builds
    over a model's parameters, cast or not; None when it builds none or cannot be read."""
    tree = script_tree(script)
    if tree is None:
        return None
    imported = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "torch.optim" for a in node.names}
    for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
        found = _optimizer_over(call, imported)
        if found:
            return found[0], found[1], f"{script} line {call.lineno}", found[3]
    return None


def _fp32_torch_step(cfg: TrainingConfig, script: str) -> TrainingConfig:
    """An fp32 plain-torch script stepping torch.optim.Adam / AdamW / SGD: the step is torch's as called (foreach or
    fused, amsgrad, SGD's momentum) over fp32 weights, not a framework's fused Adam (graph/step_ops.
    adam_bytes_per_param)."""
    from dataclasses import replace

    found = script_torch_optimizer(script)
    if found is None:
        return cfg
    origin = Source(SourceKind.DERIVED, f"{found[2]}: torch.optim steps the fp32 model")
    optimizer = replace(cfg.optimizer, name=found[0], torch_optimizer_impl=found[1],  # type: ignore[arg-type]
                        torch_weight_decay=found[3])
    return replace(cfg, optimizer=optimizer, sources={**cfg.sources, "optimizer_name": origin,
                                                      "torch_optimizer_impl": origin, "torch_weight_decay": origin})


def apply_script_training(cfg: TrainingConfig, script: str) -> TrainingConfig:
    """`cfg` with the optimizer a plain-torch script really runs (script_training): a user's script (not a Megatron
    entry point) without DeepSpeed, trained in bf16/fp16, whose code casts the model and steps torch.optim over it
    keeps weights, gradients and optimizer states in the 16-bit dtype (Adam: 2 + 2 + 2 x 2 bytes per parameter, not
    Megatron's 2 + 4 + 12); such a script trained in fp32 gets torch's implementation of its Adam step
    (_fp32_torch_step). Any other job is returned unchanged."""
    from dataclasses import replace

    from llmperf_hook.frameworks.megatron_entry_points import megatron_entry_point

    if cfg.framework not in ("megatron", "torch") or cfg.precision not in ("bf16", "fp16", "fp32") \
            or megatron_entry_point(script):
        return cfg
    o = cfg.optimizer
    if o.distributed_optimizer or o.zero_stage or o.fsdp != "none":
        return cfg
    if cfg.precision == "fp32":
        return _fp32_torch_step(cfg, script)
    found = script_training(script)
    if found is None:
        return cfg
    origin = Source(SourceKind.DERIVED, f"{found.where}: the model is cast to {cfg.precision} and torch.optim steps it")
    sources = {**cfg.sources, "master_weights": origin, "fp32_main_grads": origin, "torch_optimizer_impl": origin,
               "torch_weight_decay": origin}
    optimizer = replace(o, name=found.optimizer, master_weights=False, fp32_main_grads=False,  # type: ignore[arg-type]
                        torch_optimizer_impl=found.impl, torch_weight_decay=found.weight_decay)
    return replace(cfg, optimizer=optimizer, sources=sources)
