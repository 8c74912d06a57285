"""The checks explain makes once a DeepSpeed job's ZeRO stage, engine and sequence parallelism are final, as candidate
masks: the same functions frameworks/assemble.py calls, evaluated once per distinct (stage, engine, SP) of a table.

`frameworks/validation.validate_config` (the search's per-candidate check) holds Megatron's layout rules; the ds_config
filter of `tune` (ds_config_rewrite.zero_stages_deepspeed_accepts) re-parses the command's ds_config at each stage. Both
miss the checks assemble makes after parsing, when the stage, the engine and the flags meet, so a candidate the
applied command's `explain` refuses was ranked (bf16 with data_types.grad_accum_dtype bf16 at ZeRO-0 under
--no-pipeline-parallel on DeepSpeed 0.16: 'Bfloat16 wrapper must use a gradient accumulation type of fp32'). Those
are, for the knobs tune changes:

- check_bf16_accumulation (deepspeed_engine_rules): bf16 gradient accumulation without ZeRO, or bf16 under ZeRO
  without the key, per the job's DeepSpeed release (deepspeed_release.schema_release of its environment) and engine;
- check_hpz (deepspeed_job): ZeRO++ hpZ groups must divide the world at stage 3;
- _check_mds_connections (assemble): Megatron-DeepSpeed refuses --sequence-parallel unless CUDA_DEVICE_MAX_CONNECTIONS
  is 1.

The engine of a candidate is candidate._pipeline_engine's, the one apply_candidate prices and the rewritten command runs
(--no-pipeline-parallel kept or added by tune/megatron_argv.py). A refusal is a named mask, counted as invalid with the
refusal's first clause (its values kept), like the other layout rules (search.py), so it is never ranked.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping

import numpy as np

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.assemble import _check_mds_connections
from llmperf_hook.frameworks.deepspeed_config import DsSettings
from llmperf_hook.frameworks.deepspeed_engine_rules import check_bf16_accumulation
from llmperf_hook.frameworks.deepspeed_job import check_hpz
from llmperf_hook.frameworks.deepspeed_release import schema_release
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.launch.parsed_job import ParsedJob
from llmperf_hook.tune.candidate import Candidate, _pipeline_engine, candidate_of
from llmperf_hook.tune.command_rules import Masks, MaskFn

DEEPSPEED_FRAMEWORKS = ("megatron-deepspeed", "deepspeed", "hf-deepspeed")
RULE_PREFIX = "explain refuses: "
"""Prefix of the rule names these masks count under (the refusal's first sentence follows)."""


def assemble_rule_masks(cfg: TrainingConfig, job: ParsedJob, settings: Mapping[int, DsSettings | None] | None) -> MaskFn:
    """The masks of the checks above for this job. `settings`: stage -> the command's ds_config parsed at that stage
    (ds_config_rewrite.ds_settings_at_stages, what explain reads from the tuned copy; None: no readable ds_config, a
    config built by the script's code, whose values the TrainingConfig holds)."""
    if cfg.framework not in DEEPSPEED_FRAMEWORKS:
        return lambda cols: {}
    release, base = schema_release(job.env), candidate_of(cfg)
    refusals: dict[tuple[int, bool, bool], str | None] = {}

    def refusal(zero: int, engine: bool, sp: bool) -> str | None:
        ds = (settings or {}).get(zero) or DsSettings(
            path="the ds_config", zero_stage=zero, zero_hpz_partition_size=cfg.optimizer.zero_hpz_partition_size,
            grad_accum_dtype=cfg.optimizer.grad_accum_dtype)
        try:
            check_bf16_accumulation(ds.grad_accum_dtype, ds.path, zero, cfg.precision, engine, release)
            check_hpz(ds, cfg.world_size)
            if cfg.framework == "megatron-deepspeed":
                _check_mds_connections(job, sp)
        except ConfigError as err:
            return RULE_PREFIX + _rule_name(str(err))
        return None

    def masks(cols: Mapping[str, np.ndarray]) -> Masks:
        engine = _engine_column(cfg, base, cols)
        sp = cols["sp"] > 0 if cfg.framework == "megatron-deepspeed" else np.zeros(engine.shape, dtype=bool)
        key = cols["zero"] * 4 + engine * 2 + sp
        out: Masks = {}
        for k in np.unique(key).tolist():
            combo = (k // 4, bool(k // 2 % 2), bool(k % 2))
            if combo not in refusals:
                refusals[combo] = refusal(*combo)
            rule = refusals[combo]
            if rule is not None:
                out[rule] = out[rule] | (key == k) if rule in out else key == k
        return out

    return masks


def _rule_name(message: str) -> str:
    """The refusal's first clause, values kept (they differ per stage, and say which release and file): 'ds.json
    data_types.grad_accum_dtype 'bf16' with bf16 training and ZeRO stage 0'."""
    head = re.split(r": |; ", message, maxsplit=1)[0]
    return head if len(head) <= 120 else head[:120].rsplit(" ", 1)[0] + " ..."


def _engine_column(cfg: TrainingConfig, base: Candidate, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per row: DeepSpeed's PipelineEngine runs (candidate._pipeline_engine, evaluated per distinct (PP > 1, stage))."""
    multi = cols["pp"] > 1
    engine = np.zeros(multi.shape, dtype=bool)
    for pp_multi in (False, True):
        for zero in np.unique(cols["zero"]).tolist():
            rows = (multi == pp_multi) & (cols["zero"] == zero)
            if rows.any():
                probe = dataclasses.replace(base, pp=2 if pp_multi else 1, zero_stage=int(zero))
                engine[rows] = _pipeline_engine(cfg, probe)
    return engine
