"""Megatron-LM model-shape flags -> ModelShape, with Megatron's defaults and derivations.

megatron/training/arguments.py `validate_args`: num-layers, hidden-size, num-attention-heads and
max-position-embeddings are required; ffn = 4h, or int((4h * 2/3) / 64) * 64 with --swiglu; kv-channels =
h / heads (h % heads == 0 required then); query groups only with --group-query-attention (default 1);
moe-ffn-hidden-size defaults to ffn; padded vocab = ceil(V / (make-vocab-size-divisible-by * TP)) * that.
"""

from __future__ import annotations

import ast
import os
from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.megatron_mla_mtp import resolve_mla, resolve_mtp, resolve_shared_experts
from llmperf_hook.frameworks.script_defaults import ScriptDefault, own_parser_default
from llmperf_hook.frameworks.training_config import ModelShape, MoeDispatch
from llmperf_hook.frameworks.vocab import megatron_vocab
from llmperf_hook.provenance import Source, SourceKind

_ROPE_LIKE = ("rope", "yarn", "mrope", "llama3", "rotary")  # rotary: the bigscience fork's spelling


def pick(flags: FlagValues, dest: str, default: Any, note: str) -> tuple[Any, Source]:
    """argv value with its source, else the framework default with a note."""
    if flags.has(dest):
        return flags.get(dest), flags.source(dest)
    return default, Source(SourceKind.DEFAULT, note)


def _required(flags: FlagValues, dest: str, alt: str | None = None) -> tuple[int, Source]:
    for key in (dest, alt):
        if key and flags.has(key):
            return flags.get(key), flags.source(key)
    flag = "--" + dest.replace("_", "-")
    if flags.get("use_checkpoint_args"):  # arguments.py load_args_from_checkpoint: the shape is the checkpoint's
        load = f" in --load {flags.get('load')}" if flags.get("load") else ""
        raise ConfigError(f"the command gives no {flag}: with {flags.seen_flags['use_checkpoint_args']} Megatron takes the "
                          f"model shape from the checkpoint's saved arguments{load}, which llmperf does not read. Give "
                          "llmperf --model PRESET|FILE (a preset name, a YAML shape or the model's Hugging Face "
                          f"config.json), or add {flag} and the other shape flags to the training arguments.")
    raise ConfigError(f"Megatron requires {flag} and the command does not give it; add {flag} N to the training arguments "
                      "(or use llmperf --model PRESET for a script that does not take Megatron model flags).")


def _ffn(flags: FlagValues, hidden: int, swiglu: bool) -> tuple[int, Source]:
    if flags.has("ffn_hidden_size"):
        return flags.get("ffn_hidden_size"), flags.source("ffn_hidden_size")
    if swiglu:  # arguments.py: keep SwiGLU's parameter count near 4h*h, a multiple of 64
        value = int((4 * hidden * 2 / 3) / 64) * 64
        return value, Source(SourceKind.DERIVED, f"SwiGLU default int((4*{hidden}*2/3)/64)*64")
    return 4 * hidden, Source(SourceKind.DERIVED, f"default 4 * hidden-size {hidden}")


def _kv_channels(flags: FlagValues, hidden: int, heads: int, src: dict[str, Source]) -> tuple[int, Source]:
    if flags.has("kv_channels"):
        return flags.get("kv_channels"), flags.source("kv_channels")
    if heads <= 0 or hidden % heads != 0:
        raise ConfigError(f"hidden-size {hidden} ({src['hidden_size']}) is not divisible by num-attention-heads {heads} "
                          f"({src['num_attention_heads']}); Megatron derives kv-channels = hidden / heads and asserts it. "
                          "Give --kv-channels, or a head count that divides the hidden size.")
    return hidden // heads, Source(SourceKind.DERIVED, f"hidden-size / num-attention-heads = {hidden}/{heads}")


def _query_groups(flags: FlagValues, heads: int, warnings: list[str]) -> tuple[int, Source]:
    if flags.has("num_key_value_heads"):  # Megatron-DeepSpeed's GQA flag (default: one KV head per attention head)
        kv_heads = flags.get("num_key_value_heads")
        if heads % kv_heads != 0:
            raise ConfigError(f"num-attention-heads {heads} is not a multiple of --num-key-value-heads {kv_heads} "
                              f"({flags.source('num_key_value_heads')}); Megatron-DeepSpeed's attention groups query heads "
                              "per KV head and asserts it. Use a divisor of the head count.")
        return kv_heads, flags.source("num_key_value_heads")
    if flags.get("group_query_attention"):
        value, source = pick(flags, "num_query_groups", 1, "Megatron --num-query-groups default 1")
        return value, source
    if flags.get("attention_head_type") == "multiquery":  # bigcode-project/Megatron-LM (StarCoder, SantaCoder)
        # transformer.py ParallelAttention: one key/value projection of 2 * kv_channels shared by every head
        return 1, flags.source("attention_head_type")
    if flags.has("num_query_groups"):
        warnings.append("--num-query-groups is ignored without --group-query-attention (Megatron uses one group per head)")
    return heads, Source(SourceKind.DERIVED, "no --group-query-attention: one group per head")


def _position_embedding(flags: FlagValues) -> str:
    """arguments.py: --use-rotary-position-embeddings (legacy) means rope; --no-position-embedding only matters
    without rope (older releases: no position embedding; current ones reject it in favour of the type flag)."""
    kind = str(flags.get("position_embedding_type", "learned_absolute"))
    if flags.get("use_rotary_position_embeddings") or kind in _ROPE_LIKE:
        return "rope"
    if kind in ("none", "alibi") or flags.get("add_position_embedding") is False:
        return "none"  # ALiBi (bigscience fork, BLOOM): no position table; its bias rides on the attention scores
    return "learned_absolute"


def _moe(flags: FlagValues, ffn: int, warnings: list[str], src: dict[str, Source], ds_flavour: bool) -> dict[str, Any]:
    """Megatron-LM: --num-experts N (> 0), top-k default 2, every layer. Megatron-DeepSpeed: --num-experts 1 is dense,
    --topk default 1, --expert-interval default 2 (MoE on every second layer)."""
    experts = flags.get("num_experts") or 0
    if experts <= (1 if ds_flavour else 0):
        ignored = [flags.seen_flags[d] for d in (*MODELLED_MOE_FLAGS, "moe_grouped_gemm") if flags.get(d) not in (None, False)]
        if ignored and not ds_flavour:
            warnings.append(f"{', '.join(ignored)}: ignored without --num-experts (a dense model has no MoE layer)")
        if not ds_flavour:
            wgrad_rules(flags, overlap=False)
        return {"num_experts": 0}
    src["num_experts"] = flags.source("num_experts")
    if ds_flavour:
        topk, src["moe_router_topk"] = pick(flags, "ds_moe_topk", 1, "Megatron-DeepSpeed --topk default 1")
        freq, _ = pick(flags, "ds_moe_expert_interval", 2, "Megatron-DeepSpeed --expert-interval default 2")
        moe_ffn, src["moe_ffn_hidden_size"] = ffn, Source(SourceKind.DERIVED, "Megatron-DeepSpeed experts use ffn-hidden-size")
        return {"num_experts": experts, "moe_router_topk": topk, "moe_ffn_hidden_size": moe_ffn, "moe_layer_freq": max(freq, 1)}
    topk, src["moe_router_topk"] = pick(flags, "moe_router_topk", 2, "Megatron --moe-router-topk default 2")
    moe_ffn, src["moe_ffn_hidden_size"] = pick(flags, "moe_ffn_hidden_size", ffn, "Megatron: ffn-hidden-size")
    freq_text = str(flags.get("moe_layer_freq", "1")).strip()
    shape = {"num_experts": experts, "moe_router_topk": topk, "moe_ffn_hidden_size": moe_ffn,
             "moe_dispatch": resolve_moe_dispatch(flags, src, warnings)}
    if "[" in freq_text:
        pattern = moe_layer_pattern(freq_text, flags.get("num_layers"), flags.source("moe_layer_freq"))
        return {**shape, "moe_layer_pattern": pattern}
    try:
        freq = int(freq_text)
    except ValueError:
        raise ConfigError(f"--moe-layer-freq {freq_text!r} ({flags.source('moe_layer_freq')}) is neither an integer nor "
                          "a list pattern; Megatron's moe_freq_type would fail. Give N (every N-th layer is MoE) or a "
                          "pattern such as '([0]*3+[1]*58)'.") from None
    return {**shape, "moe_layer_freq": max(freq, 1)}


def moe_layer_pattern(text: str, num_layers: int | None, where: Source) -> tuple[int, ...]:
    """arguments.py moe_freq_type: a Python list expression ("([0]*3+[1]*58)") -> one entry per layer, checked as
    gpt_layer_specs.py asserts (length = num_layers). Evaluated on a whitelist of list / int literals, + and *."""
    try:
        value = _eval_pattern(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        value = None
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise ConfigError(f"--moe-layer-freq {text!r} ({where}) is not a list expression of integers such as "
                          "'([0]*3+[1]*58)'; Megatron evaluates it as one 1 (MoE) or 0 (dense) per layer.")
    if num_layers is not None and len(value) != num_layers:
        raise ConfigError(f"--moe-layer-freq {text!r} ({where}) gives {len(value)} layers but --num-layers is "
                          f"{num_layers}; Megatron asserts the pattern has one entry per layer (gpt_layer_specs.py). "
                          "Make the pattern as long as the model.")
    return tuple(value)


def _eval_pattern(node: ast.AST) -> Any:
    if isinstance(node, ast.List):
        return [_eval_pattern(e) for e in node.elts]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left, right = _eval_pattern(node.left), _eval_pattern(node.right)
        if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int) and right * len(left) <= 1 << 16:
            return left * right
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            return left + right
    raise ValueError("not a list pattern")


def _seq_and_positions(flags: FlagValues, src: dict[str, Source], warnings: list[str],
                       script: str = "") -> tuple[int, int | None]:
    if flags.has("seq_length") and flags.has("encoder_seq_length"):
        raise ConfigError(f"{flags.seen_flags['seq_length']} and {flags.seen_flags['encoder_seq_length']} are both given; "
                          "Megatron asserts encoder_seq_length is None when --seq-length is set. Keep --seq-length.")
    seq, src["seq_length"] = _required(flags, "seq_length", "encoder_seq_length")
    positions = flags.get("max_position_embeddings")
    if flags.get("position_embedding_type") == "rotary" and \
            flags.seen_flags.get("position_embedding_type") == "--position-embedding-type":
        return seq, _no_positions_with_rotary(flags, positions)
    own = own_parser_default(script, "--max-position-embeddings") if positions is None else None
    if own is not None:  # a script parsing its own flags: Megatron's requirement is not its own
        return seq, _own_positions(own, script, seq, src, warnings)
    if positions is None:
        raise ConfigError("Megatron requires --max-position-embeddings (arguments.py: required_args, 'max_position_embeddings "
                          f"argument is None') and the command does not give it; add --max-position-embeddings {seq} "
                          f"(at least seq-length {seq}, {src['seq_length']}).")
    if positions < seq:
        raise ConfigError(f"max-position-embeddings {positions} ({flags.source('max_position_embeddings')}) is smaller than "
                          f"seq-length {seq} ({src['seq_length']}); Megatron asserts max_position_embeddings >= seq_length. "
                          f"Raise --max-position-embeddings to at least {seq}.")
    return seq, positions


def _own_positions(own: ScriptDefault, script: str, seq: int, src: dict[str, Source], warnings: list[str]) -> int | None:
    """The position table of a script that parses its own flags and was not given --max-position-embeddings: its
    argparse default where that is a number; else None, which graph/params.py sizes as seq-length rows (the
    cpu-testbed's `nn.Embedding(args.max_position_embeddings or args.seq_length, hidden)`)."""
    shown = os.path.basename(script)
    if isinstance(own.value, int) and not isinstance(own.value, bool):
        src["max_position_embeddings"] = Source(SourceKind.DEFAULT, f"{shown}'s own argparse default")
        return own.value
    if own.defined and not own.literal:
        warnings.append(f"{shown} computes the default of --max-position-embeddings (or two parsers state it apart); "
                        f"its position table is taken as seq-length {seq} rows. Give --max-position-embeddings to "
                        "price another size.")
    src["max_position_embeddings"] = Source(SourceKind.DEFAULT, f"{shown} parses its own flags (Megatron's requirement "
                                            "does not apply): seq-length rows")
    return None


def _no_positions_with_rotary(flags: FlagValues, positions: int | None) -> None:
    """The bigscience Megatron-DeepSpeed fork (tr4 rotary runs) has no position table with `--position-embedding-type
    rotary` and asserts it was given no size: parse_args `if position_embedding_type in (absolute, alibi): assert
    max_position_embeddings is not None ... else: assert max_position_embeddings is None`. Megatron-LM spells it rope;
    epfLLM/Megatron-LLM's `--position_embedding_type rotary` (underscores) requires the size, as Megatron-LM does."""
    if positions is not None:
        raise ConfigError(f"--max-position-embeddings {positions} ({flags.source('max_position_embeddings')}) is given "
                          "with --position-embedding-type rotary: the bigscience Megatron-DeepSpeed fork asserts "
                          "max_position_embeddings is None for rotary embeddings (megatron/arguments.py parse_args). "
                          "Remove --max-position-embeddings.")
    return None


def _normalization(flags: FlagValues) -> str:
    """Megatron-LM spells the choices LayerNorm / RMSNorm, Megatron-DeepSpeed layernorm / rmsnorm (argparse choices)."""
    given = str(flags.get("normalization", "LayerNorm"))
    known = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
    if given not in (*known, *known.values()):  # argparse compares exactly: "RMSnorm" is neither fork's choice
        raise ConfigError(f"--normalization {given} ({flags.source('normalization')}) is not a choice Megatron offers "
                          "(LayerNorm, RMSNorm; Megatron-DeepSpeed: layernorm, rmsnorm). Pick one of them.")
    return known[given.lower()]


def _gated_mlp(flags: FlagValues, swiglu: bool, warnings: list[str]) -> bool:
    """argument_utils.py core_transformer_config_from_args: --squared-relu and --quick-geglu assert not --swiglu;
    --quick-geglu is a gated MLP (two up projections) like SwiGLU, its ffn default staying 4h."""
    for dest in ("squared_relu", "quick_geglu"):
        if flags.get(dest) and swiglu:
            raise ConfigError(f"{flags.seen_flags[dest]} and {flags.seen_flags['swiglu']} both set the MLP activation; "
                              "Megatron asserts not both (argument_utils.py). Keep one.")
    if flags.get("quick_geglu"):
        warnings.append("--quick-geglu: gated MLP priced as SwiGLU (same shapes, quick-GELU gate)")
        return True
    return swiglu


def resolve_megatron_shape(flags: FlagValues, tp: int, src: dict[str, Source], warnings: list[str], ds_flavour: bool = False,
                           script: str = "") -> ModelShape:
    """Build the ModelShape; fills `src` for every shape key. `script`: the training script; when it parses its own
    flags, megatron.resolve_megatron has filled in its parser's defaults (frameworks/script_defaults.py) and its
    position table follows the script's rule, not Megatron's requirement (_seq_and_positions)."""
    if flags.has("num_layers") and flags.has("encoder_num_layers"):
        raise ConfigError(f"{flags.seen_flags['num_layers']} and {flags.seen_flags['encoder_num_layers']} are both given; "
                          "Megatron refuses it ('cannot have both num-layers and encoder-num-layers specified'). Keep one.")
    layers, src["num_layers"] = _required(flags, "num_layers", "encoder_num_layers")
    hidden, src["hidden_size"] = _required(flags, "hidden_size")
    heads, src["num_attention_heads"] = _required(flags, "num_attention_heads")
    swiglu = bool(flags.get("swiglu", False))
    ffn, src["ffn_hidden_size"] = _ffn(flags, hidden, swiglu)
    swiglu = _gated_mlp(flags, swiglu, warnings)
    kv, src["kv_channels"] = _kv_channels(flags, hidden, heads, src)
    groups, src["num_query_groups"] = _query_groups(flags, heads, warnings)
    seq, positions = _seq_and_positions(flags, src, warnings, script)
    tokenizer = flags.get("tokenizer_type")
    if tokenizer is None and flags.has("merge_file"):  # older scripts: --vocab-file/--merge-file = GPT-2 BPE
        tokenizer = "GPT2BPETokenizer"
    divisible, div_src = pick(flags, "make_vocab_size_divisible_by", 128, "Megatron: 128")
    vocab, padded = megatron_vocab(flags, tokenizer, divisible, div_src, tp, src)
    moe = _moe(flags, ffn, warnings, src, ds_flavour)
    deepseek = {**resolve_mla(flags, src, warnings), **resolve_mtp(flags, src, warnings, ds_flavour),
                **resolve_shared_experts(flags, moe["num_experts"], src, warnings)}
    return ModelShape(
        num_layers=layers, hidden_size=hidden, ffn_hidden_size=ffn, num_attention_heads=heads,
        num_query_groups=groups, kv_channels=kv, seq_length=seq, vocab_size=vocab, padded_vocab_size=padded,
        swiglu=swiglu, normalization=_normalization(flags),
        position_embedding=_position_embedding(flags),  # type: ignore[arg-type]
        untie_embeddings=bool(flags.get("untie_embeddings_and_output_weights", False)),
        add_bias_linear=bool(flags.get("add_bias_linear", True)), add_qkv_bias=bool(flags.get("add_qkv_bias", False)),
        attention_sinks=flags.get("softmax_type") == "learnable",
        zero_sink_logit=flags.get("softmax_type") == "off-by-one", max_position_embeddings=positions,
        make_vocab_size_divisible_by=divisible,
        **moe, **deepseek,
    )


# --- Megatron-Core token dispatcher and expert kernels ---------------------------------------------------------

MODELLED_MOE_FLAGS = ("moe_token_dispatcher_type", "moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity",
                      "overlap_moe_expert_parallel_comm", "moe_shared_expert_overlap")
"""MoE settings the graph models (graph/moe_ops.py); on a dense model they are ignored, with a warning."""
FLEX_BACKENDS = ("deepep", "hybridep", "ncclep")
"""TransformerConfig.moe_flex_dispatcher_backend Literal (argparse choices through argument_utils.py)."""
CAPACITY_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")
"""TransformerConfig: 'moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, global_aux_loss or none'."""


def _dispatcher(flags: FlagValues, src: dict[str, Source], warnings: list[str]) -> str:
    """--moe-token-dispatcher-type, Megatron's default allgather (TransformerConfig.moe_token_dispatcher_type)."""
    kind, src["moe_token_dispatcher"] = pick(flags, "moe_token_dispatcher_type", "allgather",
                                             "Megatron --moe-token-dispatcher-type default allgather")
    if kind == "alltoall_seq":  # removed in 2025 (MoEAlltoAllSEQTokenDispatcher): the alltoall of older releases
        warnings.append("--moe-token-dispatcher-type alltoall_seq: priced as alltoall (releases since 2025 removed it)")
        return "alltoall"
    return str(kind)


def _flex_backend(flags: FlagValues, dispatcher: str) -> str:
    """TransformerConfig.__post_init__: --moe-enable-deepep (deprecated) needs flex and means backend deepep."""
    backend = str(flags.get("moe_flex_dispatcher_backend", "deepep"))
    where = flags.source("moe_flex_dispatcher_backend", "Megatron default deepep")
    if backend not in FLEX_BACKENDS:
        raise ConfigError(f"--moe-flex-dispatcher-backend {backend} ({where}) is not a choice Megatron offers "
                          f"({', '.join(FLEX_BACKENDS)}); its argument parser stops the job. Pick one of them.")
    if flags.get("moe_enable_deepep"):
        if dispatcher != "flex":
            raise ConfigError(f"--moe-enable-deepep with --moe-token-dispatcher-type {dispatcher}: Megatron raises "
                              "'DeepEP backend is only supported with flex token dispatcher' (TransformerConfig). Add "
                              "--moe-token-dispatcher-type flex.")
        if backend == "hybridep":
            raise ConfigError(f"--moe-enable-deepep with --moe-flex-dispatcher-backend hybridep ({where}): Megatron "
                              "raises 'Only one backend is supported for flex token dispatcher'. Drop one of them.")
        return "deepep"
    if backend == "ncclep" and dispatcher != "flex":
        raise ConfigError(f"--moe-flex-dispatcher-backend ncclep ({where}) with --moe-token-dispatcher-type "
                          f"{dispatcher}: Megatron raises \"moe_flex_dispatcher_backend='ncclep' requires "
                          "moe_token_dispatcher_type='flex'\". Add --moe-token-dispatcher-type flex.")
    return backend


def balancing_types(flags: FlagValues) -> tuple[str, ...]:
    """--moe-router-load-balancing-type as a tuple (nargs='+'; Megatron's default aux_loss)."""
    given = flags.get("moe_router_load_balancing_type", "aux_loss")
    return tuple(given) if isinstance(given, tuple) else (str(given),)


def _capacity(flags: FlagValues, dispatcher: str, backend: str) -> tuple[float | None, bool]:
    """Capacity factor (a negative one means dropless, as TransformerConfig sets it to None) and padding.

    TransformerConfig.__post_init__ sets a negative factor to None inside the block that then checks the load
    balancing types, so a negative factor still needs capacity-compatible balancing, and padding then finds no
    factor ('moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity')."""
    given = flags.get("moe_expert_capacity_factor")
    factor = None if given is None or given < 0 else float(given)
    pad = bool(flags.get("moe_pad_expert_input_to_capacity"))
    wrong = [t for t in balancing_types(flags) if t not in CAPACITY_BALANCING]
    if given is not None and wrong:
        raise ConfigError(f"--moe-expert-capacity-factor {given} with --moe-router-load-balancing-type {' '.join(wrong)} "
                          f"({flags.source('moe_router_load_balancing_type')}): Megatron raises 'moe_expert_capacity_factor "
                          f"only works with {', '.join(CAPACITY_BALANCING)} load balancing' (a negative factor too: "
                          "TransformerConfig checks before dropping it). Change one of them.")
    if pad and dispatcher == "flex" and backend == "deepep":
        raise ConfigError("--moe-pad-expert-input-to-capacity with the flex dispatcher's deepep backend: Megatron raises "
                          "'Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity'. "
                          "Drop the padding, or use --moe-flex-dispatcher-backend hybridep.")
    return factor, pad and factor is not None


ROUTER_DTYPES = ("fp32", "fp64")
"""TransformerConfig.moe_router_dtype Literal (None = the activations' dtype)."""


def _dispatcher_rules(flags: FlagValues, dispatcher: str) -> None:
    """Rules of the dispatchers themselves: router dtype choices; allgather refuses quantization padding
    (TransformerConfig). DeepEP / NCCL EP's 'requires TPxEP > 1' depends on the layout: validation.py checks it on
    the resolved configuration, as for a tuned one."""
    dtype = flags.get("moe_router_dtype")
    if dtype is not None and dtype not in ROUTER_DTYPES:
        raise ConfigError(f"--moe-router-dtype {dtype} ({flags.source('moe_router_dtype')}) is not a choice Megatron "
                          f"offers ({', '.join(ROUTER_DTYPES)}); its argument parser stops the job. Pick one of them.")
    if flags.get("moe_router_padding_for_quantization") and dispatcher == "allgather":
        raise ConfigError("--moe-router-padding-for-quantization with the allgather token dispatcher (Megatron's default "
                          "when --moe-token-dispatcher-type is not given): Megatron raises 'allgather and alltoall_seq "
                          "dispatcher does not support moe_router_padding_for_quantization'. Use "
                          "--moe-token-dispatcher-type alltoall or flex.")


def _ep_overlap_rules(flags: FlagValues, dispatcher: str) -> None:
    """TransformerConfig.__post_init__ asserts for --overlap-moe-expert-parallel-comm that do not depend on the
    layout; the layout's (EP > 1, virtual stages when PP > 1, no full recomputation / recompute method) are
    validation.py's, checked on the resolved configuration as for a tuned one."""
    broken = [
        (dispatcher not in ("alltoall", "flex"), f"--moe-token-dispatcher-type {dispatcher}", "'overlap_moe_expert_parallel_"
         "comm is supported with alltoall/flex token dispatcher'", "use --moe-token-dispatcher-type alltoall"),
        (not (flags.get("bf16") or flags.get("fp16")), "fp32 (no --bf16/--fp16)", "'overlap_moe_expert_parallel_comm is "
         "only supported with bf16 or fp16 model'", "add --bf16"),
        (bool(flags.get("moe_shared_expert_overlap")), "--moe-shared-expert-overlap", "'disable moe_shared_expert_overlap "
         "when enabling overlap_moe_expert_parallel_comm'", "drop --moe-shared-expert-overlap"),
        ((flags.get("mtp_num_layers") or 0) > 1, f"--mtp-num-layers {flags.get('mtp_num_layers')}", "'MTP supports at "
         "most one layer when enabling overlap_moe_expert_parallel_comm'", "use --mtp-num-layers 1"),
    ]
    for bad, what, quote, fix in broken:
        if bad:
            raise ConfigError(f"--overlap-moe-expert-parallel-comm with {what} (argv or Megatron's default): Megatron "
                              f"asserts {quote} (TransformerConfig.__post_init__). To keep the overlap, {fix}.")


def wgrad_rules(flags: FlagValues, overlap: bool) -> None:
    """--delay-wgrad-compute: validate_args asserts the Transformer Engine implementation; TransformerConfig
    'overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute' (the delayed weight
    gradients are what the EP A2A overlap runs beside the other micro-batch's dispatch)."""
    if not flags.get("delay_wgrad_compute"):
        return
    if flags.get("transformer_impl", "transformer_engine") != "transformer_engine":
        raise ConfigError(f"--delay-wgrad-compute with --transformer-impl {flags.get('transformer_impl')}: Megatron "
                          "asserts 'Delaying wgrad compute is only supported with transformer_engine implementation' "
                          "(validate_args). Use --transformer-impl transformer_engine or drop the flag.")
    if not overlap:
        raise ConfigError(f"{flags.seen_flags['delay_wgrad_compute']} without --overlap-moe-expert-parallel-comm: Megatron "
                          "asserts 'overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute' "
                          "(TransformerConfig). Add --overlap-moe-expert-parallel-comm (an MoE model with EP > 1) or "
                          "drop --delay-wgrad-compute.")


def resolve_moe_dispatch(flags: FlagValues, src: dict[str, Source], warnings: list[str]) -> MoeDispatch:
    """MoeDispatch of a Megatron-Core MoE model, with Megatron's defaults and start-up rules (exit 2)."""
    dispatcher = _dispatcher(flags, src, warnings)
    backend = _flex_backend(flags, dispatcher)
    factor, pad = _capacity(flags, dispatcher, backend)
    _dispatcher_rules(flags, dispatcher)
    overlap = bool(flags.get("overlap_moe_expert_parallel_comm"))
    if overlap:
        _ep_overlap_rules(flags, dispatcher)
    wgrad_rules(flags, overlap)
    if dispatcher == "flex" and backend == "ncclep":
        warnings.append("--moe-flex-dispatcher-backend ncclep: NCCL EP priced as an all-to-all of every top-k copy")
    if flags.get("moe_shared_expert_overlap") and not flags.has("moe_shared_expert_intermediate_size"):
        warnings.append("--moe-shared-expert-overlap without --moe-shared-expert-intermediate-size: no shared experts, "
                        "nothing to overlap")
    groups, group_topk = flags.get("moe_router_num_groups"), flags.get("moe_router_group_topk")
    for key, dest, note in (("moe_flex_dispatcher_backend", "moe_flex_dispatcher_backend", "Megatron default deepep"),
                            ("moe_grouped_gemm", "moe_grouped_gemm", "Megatron default off: SequentialMLP")):
        src[key] = flags.source(dest) if flags.has(dest) else Source(SourceKind.DEFAULT, note)
    return MoeDispatch(token_dispatcher=dispatcher, flex_backend=backend, grouped_gemm=bool(flags.get("moe_grouped_gemm")),
                       permute_fusion=bool(flags.get("moe_permute_fusion")), capacity_factor=factor, pad_to_capacity=pad,
                       overlap_ep_comm=overlap, shared_expert_overlap=bool(flags.get("moe_shared_expert_overlap")),
                       router_num_groups=groups if groups and group_topk else None,
                       router_group_topk=group_topk if groups and group_topk else None,
                       router_dtype=flags.get("moe_router_dtype"))
