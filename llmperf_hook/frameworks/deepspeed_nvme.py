"""DeepSpeed ZeRO-Infinity (offload to NVMe) as DeepSpeed 0.19 checks and runs it: the ds_config's aio section and
swap buffers, and the limits a model must fit.

- aio (runtime/swap_tensor/aio_config.py get_aio_config, read raw with get_scalar_param): block_size (1 MiB),
  queue_depth (8), intra_op_parallelism (1; thread_count before 0.15), single_submit (false), overlap_events (true),
  use_gds (false). They size the libaio requests of DeepSpeed's async_io handle, which pybind11 builds with integer
  and boolean arguments: another type fails at deepspeed.initialize. llmperf prices swaps at the host's measured
  sequential bandwidth (hardware/spec.py ClusterSpec.nvme_*), the figure DeepSpeed's own ds_io reports at its tuned
  settings: values other than the defaults get one warning.
- offload_optimizer.pipeline_read / pipeline_write overlap the swaps with the CPU step (PipelinedOptimizerSwapper);
  priced serial, with one warning.
- offload_param nvme: every parameter partition of at least the aio alignment goes through one pinned swap buffer
  of offload_param.buffer_size elements (default 1e8): partitioned_param_swapper.get_buffer asserts 'More elements
  {numel} than buffer size' at model construction, so the largest partition (usually the word embedding's) must
  fit. The swap buffers are pinned host memory (buffer_count x buffer_size x the parameter bytes; the optimizer
  swapper another buffer_count x the largest sub-group x 4 bytes), not in llmperf's GPU memory estimate: noted.
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.deepspeed_schema import AUTO, ds_bool, pydantic_int
from llmperf_hook.frameworks.training_config import TrainingConfig

AIO_DEFAULTS: dict[str, Any] = {"block_size": 1_048_576, "queue_depth": 8, "intra_op_parallelism": 1,
                                "thread_count": 1, "single_submit": False, "overlap_events": True, "use_gds": False}
"""runtime/swap_tensor/constants.py AIO_*_DEFAULT (thread_count: the key's pre-0.15 name)."""
PARAM_BUFFER_DEFAULT = 100_000_000
"""offload_param.buffer_size default (zero/offload_config.py pp_int(1e8))."""
PARAM_BUFFER_COUNT_DEFAULT = 5
OPTIMIZER_BUFFER_COUNT_DEFAULT = 4
"""offload_param.buffer_count / offload_optimizer.buffer_count defaults (zero/offload_config.py)."""


def _aio_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    aio = raw.get("aio")
    if aio is None:
        return []
    if not isinstance(aio, dict):
        raise ConfigError(f"{origin} aio is {aio!r}; DeepSpeed reads it as an object of libaio settings (get_aio_config)."
                          " Write \"aio\": {\"block_size\": 1048576, \"queue_depth\": 8} or drop it.")
    changed = []
    for key, value in aio.items():
        default = AIO_DEFAULTS.get(key)
        if default is None:
            continue  # get_aio_config reads only its own keys: others are ignored
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
        if not ok:
            kind = "true or false" if isinstance(default, bool) else "a positive integer"
            raise ConfigError(f"{origin} aio.{key} is {value!r}; DeepSpeed passes it unconverted to its async_io handle "
                              f"(get_aio_config reads it raw), which needs {kind} and fails at deepspeed.initialize. "
                              "Fix the value or drop the key.")
        if value != default:
            changed.append(f"{key} = {value!r}")
    if not changed:
        return []
    return [f"{origin} aio {', '.join(changed)}: NVMe swaps are priced at the host's sequential NVMe bandwidth (the "
            "cluster's nvme_read_GBps / nvme_write_GBps), not from the libaio request settings"]


def nvme_warnings(raw: dict[str, Any], fields: dict[str, Any], origin: str) -> list[str]:
    """The aio section's checks and the settings of an NVMe offload that are accepted but not priced."""
    out = _aio_warnings(raw, origin)
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    section = zero.get("offload_optimizer") if isinstance(zero.get("offload_optimizer"), dict) else {}
    if fields["offload_param"] == "nvme" and fields["zero_stage"] == 3:
        count = param_buffer_count(raw)
        pinned = count * param_buffer_elems(raw) * (2 if fields["fp16"] is True or fields["bf16"] is True else 4)
        out.append(f"{origin} zero_optimization.offload_param nvme pins {count} swap buffers of buffer_size elements, "
                   f"{pinned / 1e9:.1f} GB of host memory per rank (partitioned_param_swapper.py), outside the GPU "
                   "memory estimate")
    if fields["offload_optimizer"] == "nvme" and fields["zero_stage"] == 3:
        piped = [key for key in ("pipeline_read", "pipeline_write", "pipeline")
                 if section.get(key, AUTO) != AUTO and ds_bool(section[key], f"offload_optimizer.{key}", origin)]
        if piped:
            out.append(f"{origin} zero_optimization.offload_optimizer.{' and '.join(piped)}: the optimizer's NVMe swaps "
                       "overlap the CPU step (PipelinedOptimizerSwapper); priced serial (step time overestimated)")
    return out


def _offload_section_int(raw: dict[str, Any], section_name: str, key: str, default: int) -> int:
    """zero_optimization.<section_name>.<key> as DeepSpeed reads it (pydantic lax int; check_zero_section refused
    the rest)."""
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    section = zero.get(section_name) if isinstance(zero.get(section_name), dict) else {}
    value = pydantic_int(section.get(key, default))
    return default if value is None else value


def param_buffer_count(raw: dict[str, Any]) -> int:
    """offload_param.buffer_count: pinned NVMe swap buffers of buffer_size elements (partitioned_param_swapper.py)."""
    return _offload_section_int(raw, "offload_param", "buffer_count", PARAM_BUFFER_COUNT_DEFAULT)


def optimizer_buffer_count(raw: dict[str, Any]) -> int:
    """offload_optimizer.buffer_count: pinned fp32 swap buffers of the largest sub-group (optimizer_utils.py
    SwapBufferManager(count=swap_config.buffer_count))."""
    return _offload_section_int(raw, "offload_optimizer", "buffer_count", OPTIMIZER_BUFFER_COUNT_DEFAULT)


def param_buffer_elems(raw: dict[str, Any]) -> int:
    """offload_param.buffer_size: elements of each pinned NVMe swap buffer."""
    return _offload_section_int(raw, "offload_param", "buffer_size", PARAM_BUFFER_DEFAULT)


PARAM_MAX_IN_CPU_DEFAULT = 1_000_000_000
"""offload_param.max_in_cpu default (zero/offload_config.py pp_int(1e9))."""


def param_max_in_cpu_elems(raw: dict[str, Any]) -> int:
    """offload_param.max_in_cpu (ge=0): partition elements kept in host memory under an NVMe offload."""
    return _offload_section_int(raw, "offload_param", "max_in_cpu", PARAM_MAX_IN_CPU_DEFAULT)


def largest_param(cfg: TrainingConfig) -> int:
    """Elements of the largest parameter tensor on a tensor-parallel rank: the word embedding (or an untied output
    layer, the same size), the fused QKV, MLP up (x2 with SwiGLU's fused gate) or one expert's."""
    m, t = cfg.model, cfg.parallel.tp
    word = m.padded_vocab_size // t * (m.word_embed_proj_dim or m.hidden_size)
    qkv = m.hidden_size * (m.num_attention_heads + 2 * m.num_query_groups) * m.kv_channels // t
    gate = 2 if m.swiglu else 1
    up = m.hidden_size * m.ffn_hidden_size * gate // t
    expert = m.hidden_size * (m.moe_ffn_hidden_size or m.ffn_hidden_size) * gate // max(1, cfg.parallel.etp) \
        if m.num_experts else 0
    return max(word, qkv, up, expert)


def check_nvme_param_buffers(cfg: TrainingConfig) -> None:
    """offload_param nvme: the largest parameter's partition (its size // data-parallel ranks) must fit one swap
    buffer (partitioned_param_swapper.py get_buffer's assert)."""
    o = cfg.optimizer
    if o.zero_stage != 3 or o.offload_param != "nvme":
        return
    largest = largest_param(cfg)
    d = max(1, cfg.parallel.dp * cfg.parallel.cp)
    partition = -(-largest // d)
    if partition > o.nvme_param_buffer_elems:
        raise ConfigError(
            f"offload_param to nvme: the largest parameter ({largest:,} elements per tensor-parallel rank, the "
            f"word embedding or output layer) split over {d} data-parallel ranks is {partition:,} elements, more than "
            f"zero_optimization.offload_param.buffer_size {o.nvme_param_buffer_elems:,}; DeepSpeed asserts 'More "
            "elements ... than buffer size' when it partitions the model (partitioned_param_swapper.py get_buffer). "
            f"Set buffer_size to at least {partition:,} (each of buffer_count pinned host buffers is that big), or use "
            "more data-parallel ranks.")
