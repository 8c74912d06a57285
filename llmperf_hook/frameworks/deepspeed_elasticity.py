"""DeepSpeed's `elasticity` section (to 0.19.6; 0.19.8 refuses it: deepspeed_engine_rules._removed): refused, as not
modelled.

With `"elasticity": {"enabled": true, ...}` DeepSpeedConfig (runtime/config.py) takes the batch from
compute_elastic_config (elasticity/elasticity.py) at the world size the job got: train_batch_size is
max_train_batch_size scaled down to the candidate with the most valid GPU counts (v0.1: the micro-batch sizes and
their LCM times a highly composite number; v0.2: per node, with model_parallel_size), the micro batch the largest
(prefer_larger_batch) of micro_batch_sizes that divides the batch per GPU, gradient_accumulation_steps = batch /
(micro x world). Those override the config's batch keys (ElasticityConfigError when the keys are there without
ignore_non_elastic_batch_info), and a world size outside the valid counts raises ElasticityIncompatibleWorldSize.
llmperf prices the batch keys it reads, which DeepSpeed would ignore here, so it refuses (exit 2) with how to price
the job instead. `enabled` is read as elasticity_enabled reads it: Python truth, default false (a disabled section
does nothing, and is left to _removed's warning).
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.errors import ConfigError


def refuse_elasticity(raw: dict[str, Any], origin: str) -> None:
    """ConfigError when the ds_config `raw` (from `origin`) enables DeepSpeed elasticity."""
    section = raw.get("elasticity")
    if not isinstance(section, dict) or not section.get("enabled", False):
        return
    enabled = section["enabled"]
    # elasticity_enabled returns the value as written and DeepSpeedConfig tests its truth: "false" is a true string
    quoted = f" is the string {enabled!r}: any non-empty string is true to DeepSpeed" if isinstance(enabled, str) else ""
    raise ConfigError(
        f"{origin} enables DeepSpeed elasticity (elasticity.enabled{quoted}): DeepSpeed then chooses train_batch_size, "
        "the micro batch and gradient_accumulation_steps itself from max_train_batch_size and micro_batch_sizes at the "
        "world size the job gets (elasticity.py compute_elastic_config), overriding the config's batch keys, and "
        "stops at a GPU count outside the ones it allows; DeepSpeed 0.19.8 and later refuse the section. llmperf does "
        "not model elasticity. To price the job, copy the config without the elasticity section (or with \"enabled\": "
        "false) and set train_batch_size and train_micro_batch_size_per_gpu to the values DeepSpeed logs at start-up "
        "('[Elasticity] overriding ...') for the GPU count you will run at.")
