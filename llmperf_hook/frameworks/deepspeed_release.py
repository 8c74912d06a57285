"""Which DeepSpeed release runs a job, and what releases before v0.6.0 did differently in ZeRO-3.

The release is LLMPERF_DEEPSPEED_VERSION when the job's environment (or a `VAR=value` word before the launch
command) gives it, else the DeepSpeed installed beside llmperf (importlib.metadata reads its version without
importing it: the machine that launches the job usually runs it), else unknown: today's behaviour.

ZeRO-3 before v0.5.5 (deepspeed/runtime/zero/partition_parameters.py of v0.3.x-v0.5.4) gathered each parameter
tensor on its own, after `torch.cuda.synchronize()`, with a Python loop over the ranks and torch's list
all_gather (one copy per rank afterwards), so no fetch overlapped compute and the gradient reduce-scatter did not
overlap either (commit c0eeb69df, first released in v0.5.5). Before v0.6.0 it also reduce-scattered every
parameter gradient as a list of per-rank tensors (replaced by reduce_scatter_coalesced). graph/zero3_legacy.py
prices both; the fields below switch them on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Mapping

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.training_config import OptimizerConfig
from llmperf_hook.launch.sizing import DEEPSPEED_VERSION_ENV, PIN_MEMORY_BACKEND_ENV
from llmperf_hook.provenance import Source, SourceKind

Version = tuple[int, int, int]

ASYNC_FETCH_VERSION: Version = (0, 5, 5)
"""First release whose ZeRO-3 fetch neither synchronises the device nor gathers tensor by tensor (c0eeb69df)."""
COALESCED_REDUCE_VERSION: Version = (0, 6, 0)
"""First release whose ZeRO-3 gradient reduce-scatter is coalesced (reduce_scatter_coalesced)."""

RELEASE_DATES: tuple[tuple[Version, tuple[int, int, int]], ...] = (
    ((0, 3, 0), (2020, 9, 10)), ((0, 3, 1), (2020, 11, 12)), ((0, 3, 8), (2020, 12, 9)), ((0, 3, 9), (2020, 12, 22)),
    ((0, 3, 10), (2021, 1, 8)), ((0, 3, 11), (2021, 2, 2)), ((0, 3, 12), (2021, 3, 12)), ((0, 3, 13), (2021, 3, 16)),
    ((0, 3, 14), (2021, 4, 8)), ((0, 3, 15), (2021, 4, 19)), ((0, 3, 16), (2021, 4, 29)), ((0, 4, 0), (2021, 6, 8)),
    ((0, 4, 1), (2021, 6, 21)), ((0, 4, 2), (2021, 6, 28)), ((0, 4, 3), (2021, 7, 12)), ((0, 4, 4), (2021, 7, 29)),
    ((0, 4, 5), (2021, 8, 6)), ((0, 5, 0), (2021, 8, 17)), ((0, 5, 1), (2021, 8, 26)), ((0, 5, 2), (2021, 9, 13)),
    ((0, 5, 3), (2021, 9, 16)), ((0, 5, 4), (2021, 10, 6)), ((0, 5, 5), (2021, 11, 2)), ((0, 5, 6), (2021, 11, 11)),
    ((0, 5, 7), (2021, 11, 19)), ((0, 5, 8), (2021, 11, 30)), ((0, 5, 9), (2022, 1, 3)), ((0, 5, 10), (2022, 1, 14)),
    ((0, 6, 0), (2022, 3, 7)),
)
"""Release dates of DeepSpeed v0.3.0-v0.6.0 (git tags of deepspeedai/DeepSpeed; the November 2020 patch releases
between v0.3.1 and v0.3.8 are left out: the same ZeRO code)."""


def parse_version(text: str) -> Version | None:
    """(major, minor, patch) from "0.3.13", "v0.4", "0.19.8+cu121"; None when the text has no version."""
    match = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)) if match else None


def release_before(year: int, month: int) -> Version | None:
    """The newest release published before the given month began (what a run measured then used at the latest);
    None after v0.6.0 (today's ZeRO-3 from then on)."""
    released = [v for v, date in RELEASE_DATES if date[:2] < (year, month)]
    if not released or released[-1] >= COALESCED_REDUCE_VERSION:
        return None
    return released[-1]


def job_release(env: Mapping[str, str]) -> tuple[Version | None, Source | None]:
    """The DeepSpeed release of the job and where that came from (see the module docstring)."""
    given = env.get(DEEPSPEED_VERSION_ENV)
    if given is not None:
        version = parse_version(given)
        if version is None:
            raise ConfigError(f"{DEEPSPEED_VERSION_ENV}={given!r} (environment) is not a DeepSpeed version; give it as "
                              "MAJOR.MINOR.PATCH, e.g. 0.14.4, or unset it.")
        return version, Source(SourceKind.ENV, DEEPSPEED_VERSION_ENV)
    installed = installed_release()
    return installed, Source(SourceKind.DERIVED, "the DeepSpeed installed beside llmperf") if installed else None


@dataclass(frozen=True)
class JobRelease:
    """The job's DeepSpeed release (job_release) as the ds_config checks that depend on it see it."""

    version: Version | None
    """None: unknown (no LLMPERF_DEEPSPEED_VERSION, no DeepSpeed installed): today's checks all apply."""
    source: Source | None = None
    """Where the version came from."""

    def has(self, since: Version) -> bool:
        """Whether the release includes a change first released in `since` (unknown: yes)."""
        return self.version is None or self.version >= since

    @property
    def stated(self) -> bool:
        """Whether the user named the release (LLMPERF_DEEPSPEED_VERSION), not llmperf's guess from the install."""
        return self.source is not None and self.source.kind is SourceKind.ENV

    def named(self) -> str:
        """"DeepSpeed 0.19.2 (LLMPERF_DEEPSPEED_VERSION)", for messages."""
        if self.version is None:
            return "an unknown DeepSpeed release (no DeepSpeed installed, LLMPERF_DEEPSPEED_VERSION unset: today's)"
        return f"DeepSpeed {'.'.join(map(str, self.version))} ({self.source.detail if self.source else 'given'})"


TODAYS_RELEASE = JobRelease(None)
"""A release nobody named: every check of today's DeepSpeed applies."""


def schema_release(env: Mapping[str, str]) -> JobRelease:
    """The job's release (job_release) for the release-dependent ds_config checks."""
    return JobRelease(*job_release(env))


LOSS_SCALE_CHECK_VERSION: Version = (0, 18, 8)
"""First release whose DeepSpeedFP16Config refuses a negative, non-finite or boolean fp16.loss_scale, enabled or not
(precision_config.py _validate_loss_scale: 'fp16.loss_scale must be >= 0 (0 enables dynamic loss scaling)'; 63eeb114b,
#7889, 2026-03-13; tag v0.18.8 contains it, v0.18.7 does not)."""
DYNAMIC_SCALE_CHECK_VERSION: Version = (0, 19, 3)
"""First release whose DeepSpeedFP16Config refuses loss_scale_window / min_loss_scale <= 0 under dynamic loss
scaling, and a bool or non-integer there whatever the mode (_reject_non_integer_scale_params; ded23491c, #8050,
2026-06-22; tag v0.19.3 contains it, v0.19.2 does not)."""
ALLREDUCE_OP_VERSION: Version = (0, 19, 6)
"""First release that reads gradient_allreduce_op (1cae4920e, #8232, 2026-08-15: after v0.19.5, version.txt 0.19.6).
Before it DeepSpeedConfig never looks at the key (unknown top-level keys are ignored): gradients are averaged."""
REMOVED_FEATURES_VERSION: Version = (0, 19, 8)
"""First release known to refuse the removed feature sections (runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS,
deepspeedai/DeepSpeed#8490, 71d316d60, 2026-09-12; the installed 0.19.8 has it, the mirror's 0.19.6 does not; 0.19.7
is not available here and is taken as accepting them)."""


@lru_cache(maxsize=1)
def installed_release() -> Version | None:
    """The installed DeepSpeed's version from its package metadata (read once; deepspeed is not imported)."""
    from importlib import metadata  # ~25 ms of imports (email, zipfile, csv): only DeepSpeed jobs without the env var

    try:
        return parse_version(metadata.version("deepspeed"))
    except metadata.PackageNotFoundError:
        return None


MULTI_RANK_ALLREDUCE_VERSION = (0, 12, 4)
"""First release with zero_optimization.use_multi_rank_bucket_allreduce (default true; DeepSpeed 2afa1c7f2, Nov 2023,
"Communication Optimization for Large-Scale Training"): ZeRO-1/2 all-reduce each gradient bucket; before, each
slice was reduced to the rank that owns it (dist.reduce), reduce-scatter traffic."""


def multi_rank_bucket_release(env: Mapping[str, str]) -> bool:
    """Whether the job's DeepSpeed (job_release; unknown = the installed one or newer) all-reduces ZeRO-1/2 buckets."""
    version, _ = job_release(env)
    return version is None or version >= MULTI_RANK_ALLREDUCE_VERSION


ZERO1_NONCONTIGUOUS_RELEASES: tuple[tuple[Version, Version, bool], ...] = (
    ((0, 4, 4), (0, 7, 2), True), ((0, 8, 0), (0, 13, 0), False))
"""[first, end) releases whose engine turns contiguous_gradients off at ZeRO stage 1 (engine.py
_configure_zero_optimizer: "Overlap and contiguous grads are meaningless in stage 1 and are ignored"), and whether
for every model (True) or only without MoE layers (e4ba72229, #2703, v0.8.0). v0.7.2 (b288cf1b9) and v0.13.0
(af033831f, #4887) dropped it. Without contiguous gradients stage_1_and_2.py reduce_ipg_grads takes
buffered_reduce_fallback(None, ...), a dist.all_reduce of each bucket (v0.5.10: allreduce_bucket), not
average_tensor's dist.reduce to each slice's owner."""


def zero1_noncontiguous_release(env: Mapping[str, str], moe: bool) -> bool:
    """Whether the job's DeepSpeed (job_release; unknown = today's, which keeps them) runs ZeRO-1 without
    contiguous gradients, so all-reducing every gradient bucket (ZERO1_NONCONTIGUOUS_RELEASES)."""
    version, _ = job_release(env)
    return version is not None and any(first <= version < end and (every or not moe)
                                       for first, end, every in ZERO1_NONCONTIGUOUS_RELEASES)


PINNED_OFFLOAD_VERSION: Version = (0, 19, 5)
"""First release whose offload_optimizer / offload_param pin_memory default to True (7dfa67aea, 2026-08)."""


def pinned_offload_release(env: Mapping[str, str]) -> bool:
    """Whether the job's DeepSpeed (job_release; unknown = today's) pins offloaded state by default."""
    version, _ = job_release(env)
    return version is None or version >= PINNED_OFFLOAD_VERSION


NATIVE_PIN_VERSION: Version = (0, 19, 6)
"""First release with DS_PIN_MEMORY_BACKEND (aa0e91b95, 2026-08-15, version.txt 0.19.6); older ones ignore it."""


def native_pinned_memory(env: Mapping[str, str]) -> bool:
    """DS_PIN_MEMORY_BACKEND=native in the job's environment (deepspeed/utils/pin_memory.py
    get_active_native_pinned_memory: the value stripped and lower-cased), on a DeepSpeed that reads it (job_release;
    unknown = today's)."""
    if env.get(PIN_MEMORY_BACKEND_ENV, "torch").strip().lower() != "native":
        return False
    version, _ = job_release(env)
    return version is None or version >= NATIVE_PIN_VERSION


def release_zero3_fields(zero_stage: int, version: Version | None) -> dict[str, Any]:
    """OptimizerConfig fields that make ZeRO-3 run as `version` ran it (empty for v0.6.0 and later, or unknown)."""
    if zero_stage != 3 or version is None or version >= COALESCED_REDUCE_VERSION:
        return {}
    fields: dict[str, Any] = {"zero3_per_tensor_grad_reduce": True}
    if version < ASYNC_FETCH_VERSION:
        fields.update(zero3_list_param_gather=True, stage3_prefetch_bucket_size_elems=0, overlap_grad_reduce=False)
    return fields


RELEASE_KEY = "deepspeed_release"
"""sources key of a job whose DeepSpeed runs ZeRO-3 the old way, at whatever stage it runs (tune moves jobs between
stages): where the release came from, the release last."""
TODAY_KEY = "zero3_fields_today"
"""sources key of such a job at ZeRO-3: the fields as_released replaced, as JSON {field: [today's value, source kind,
source detail]}, so that tune moves it to ZeRO-1/2 with what DeepSpeed derives there (zero3_fields_at)."""


ZERO3_ACCUM_CAST_VERSION: Version = (0, 19, 2)
"""First release whose ZeRO-3 casts each reduce-scattered gradient partition to gradient_accumulation_dtype in
__avg_scatter_grads (56e7e0c55, #8056 "Consistent fp32 grads flow"). From v0.10.1 (8afcda2ac, the first ZeRO-3 that
accumulates in a dtype other than the model's) to v0.19.1 it casts the partition back to the model's dtype only when
communication_data_type differs from it, and partition_grads widens it in its copy into the fp32 buffer."""


ZERO3_COMM_DTYPE_BUCKET_VERSION: Version = (0, 17, 2)
"""First release whose ZeRO-3 gradient bucket is allocated in communication_data_type (ed5f73755, #6993 "Enable
torch.autocast with ZeRO": ipg_buckets keyed by dtype); before it the bucket is in the model's dtype and
__avg_scatter_grads casts every gradient with `g.to(self.communication_data_type)`."""


def as_released(optimizer: OptimizerConfig, env: Mapping[str, str], src: dict[str, Source],
                warnings: list[str]) -> OptimizerConfig:
    """`optimizer` with the ZeRO-3 behaviour of the job's DeepSpeed release (job_release), the change named; the
    release is recorded (RELEASE_KEY) at any stage: a ZeRO-1 job of DeepSpeed 0.5 that tune moves to ZeRO-3 runs it.
    A release before ZERO3_ACCUM_CAST_VERSION also keeps ZeRO-3's reduced partitions uncast, one before
    ZERO3_COMM_DTYPE_BUCKET_VERSION its gradient bucket in the model's dtype (at any stage, as tune may move the job to
    ZeRO-3)."""
    version, where = job_release(env)
    if version is not None and where is not None and version < ZERO3_ACCUM_CAST_VERSION:
        optimizer = replace(optimizer, zero3_accum_cast_on_reduce=False)
        src["zero3_accum_cast_on_reduce"] = where
    if version is not None and where is not None and version < ZERO3_COMM_DTYPE_BUCKET_VERSION:
        optimizer = replace(optimizer, zero3_comm_dtype_bucket=False)
        src["zero3_comm_dtype_bucket"] = where
    fields = release_zero3_fields(3, version)
    if not fields:
        return optimizer
    assert version is not None and where is not None
    release = ".".join(map(str, version))
    src[RELEASE_KEY] = Source(where.kind, f"{where.detail} {release}")
    if optimizer.zero_stage != 3:
        return optimizer
    src[TODAY_KEY] = Source(SourceKind.DERIVED, json.dumps(
        {k: [getattr(optimizer, k), *((src[k].kind.name, src[k].detail) if k in src else ())] for k in fields}))
    for key in fields:
        src[key] = where
    gathers = ("per-tensor list all-gathers after a device synchronize (no prefetch, no overlap) and "
               if "zero3_list_param_gather" in fields else "")
    warnings.append(f"ZeRO-3 priced as DeepSpeed {release} ({where}) ran it: {gathers}per-tensor list "
                    "reduce-scatters of the gradients (graph/zero3_legacy.py)")
    return replace(optimizer, **fields)


def zero3_fields_at(stage: int, sources: Mapping[str, Source]) -> tuple[dict[str, Any], dict[str, Source]]:
    """(OptimizerConfig fields, their sources) of the job (its `sources`) moved to ZeRO `stage` under its release:
    that release's ZeRO-3 at 3, today's values (and their sources) of the fields it replaced at 1/2; nothing for a
    release that runs today's ZeRO-3."""
    recorded = sources.get(RELEASE_KEY)
    if recorded is None:
        return {}, {}
    if stage == 3:
        return release_zero3_fields(3, parse_version(recorded.detail.rsplit(" ", 1)[-1])), {}
    today = sources.get(TODAY_KEY)
    saved = json.loads(today.detail) if today is not None else {}
    origins = {k: Source(SourceKind[v[1]], v[2]) for k, v in saved.items() if len(v) == 3}
    return {k: v[0] for k, v in saved.items()}, origins


SPARSE_MOE_DISPATCH_VERSION: Version = (0, 19, 4)
"""First release whose MOELayer routes tokens with index_select (_sparse_encode / _sparse_decode; 619e3199d, #8195,
2026-08-02; tag v0.19.4 contains it, v0.19.3 does not). Before it the einsums "sec,sm->ecm" and "sec,ecm->sm" over
the gate's one-hot [S, E, C] dispatch mask and combine weights, which autograd keeps (schedule/activations.py)."""


def moe_dense_dispatch_release(env: Mapping[str, str]) -> bool:
    """Whether the job's DeepSpeed (job_release; unknown: today's) dispatches MoE tokens with the dense einsums."""
    return not JobRelease(*job_release(env)).has(SPARSE_MOE_DISPATCH_VERSION)


LINEAR_WRAP_ON_INITIALIZE: Version = (0, 19, 4)
"""First release whose deepspeed.initialize installs zero3_linear_wrap for a model built outside zero.Init
(617061d6b, #8189, 2026-07-31; v0.19.3 lacks it). Before, only zero.Init's patch_init_and_builtins replaced
torch.nn.functional.linear, which then stays replaced ("This will persist unless manually reset")."""
CONV1D_MODEL_TYPES = frozenset({"gpt2"})
"""Hugging Face model types whose linears are transformers' Conv1D (pytorch_utils.py: `torch.addmm(self.bias,
x.view(-1, x.size(-1)), self.weight)`), which never call F.linear: the bias stays fused under ZeRO-3."""
_ZERO_INIT_MARKERS = ("zero.Init", "HfDeepSpeedConfig")
"""What a script's source holds when it builds its model inside zero.Init: the context itself, or transformers'
HfDeepSpeedConfig, under which from_pretrained / from_config enter one (integrations/deepspeed.py)."""


def _script_builds_in_zero_init(script: str) -> bool | None:
    """The script's own source names zero.Init or HfDeepSpeedConfig (read, never run); None when unreadable."""
    try:
        with open(script, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return any(marker in text for marker in _ZERO_INIT_MARKERS)


def zero3_splits_bias(model_type: str, memory_efficient_linear: bool, framework_inits: bool, script: str,
                      env: Mapping[str, str], warnings: list[str] | None = None) -> bool:
    """TrainingConfig.torch_linear_layers of a script built from transformers-style nn.Linear: whether ZeRO-3 runs
    them through zero3_linear_wrap, whose LinearFunctionForZeroStage3 adds the bias after the matmul
    (graph/zero_layer_ops.zero3_bias_add_ops). Not for GPT-2's Conv1D, not with memory_efficient_linear false
    (zero.Init skips _enable_mem_efficient_linear), and before v0.19.4 only for a model built inside zero.Init:
    `framework_inits` (the HF Trainer / Accelerator, DeepSpeed-Chat and OpenRLHF build under HfDeepSpeedConfig) or
    the script's source (unknown release: the installed one or today's). A script that cannot be read on such a
    release is assumed to build its model itself, as a plain DeepSpeed script does; `warnings` gets that assumption."""
    if model_type in CONV1D_MODEL_TYPES or not memory_efficient_linear:
        return False
    if framework_inits:
        return True
    version, origin = job_release(env)
    if version is None or version >= LINEAR_WRAP_ON_INITIALIZE:
        return True
    inside = _script_builds_in_zero_init(script)
    if inside is None and warnings is not None:
        warnings.append(
            f"ZeRO-3 linears: cannot read the script {script!r} to see whether it builds its model inside "
            f"deepspeed.zero.Init. DeepSpeed {'.'.join(map(str, version))} ({origin.detail if origin else 'release'}) "
            "swaps torch.nn.functional.linear for zero3_linear_wrap only there (v0.19.4, 617061d6b, does it in "
            "deepspeed.initialize too), so the model is assumed built outside it: each linear's bias stays fused "
            "in its GEMM. Run llmperf where the script is readable if it uses zero.Init or HfDeepSpeedConfig.")
    return bool(inside)
