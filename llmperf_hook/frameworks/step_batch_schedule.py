"""Megatron-LM's --step-batch-size-schedule 'THRESHOLD:BATCH ...' (core_v0.18.0 on), read as
StepBatchsizeNumMicroBatchesCalculator reads it (megatron/core/num_microbatches_calculator.py): _parse_schedule
splits on blanks and commas, parses both numbers with the suffixes K M B T (_parse_numeric_value: int(float(x) * 1eN)),
turns the thresholds from tokens into samples (threshold // seq_length; global_vars.py passes args.seq_length), sorts
by threshold; _validate_schedule asserts a first threshold 0, strictly increasing thresholds and positive batches. The
calculator's global_batch_size is the last entry's batch; update() asserts, once training runs, that the current
batch divides by micro-batch x DP."""

from __future__ import annotations

from dataclasses import dataclass

from llmperf_hook.errors import ConfigError

_SUFFIX_SCALE = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


@dataclass(frozen=True)
class StepBatchSchedule:
    steps: tuple[tuple[int, int], ...]
    """(threshold in samples, global batch), sorted by threshold."""

    @property
    def final_batch(self) -> int:
        return self.steps[-1][1]


def _number(word: str) -> int:
    word = word.strip().upper()
    scale = _SUFFIX_SCALE.get(word[-1:], 1)
    return int(float(word[:-1] if scale != 1 else word) * scale)


def step_batch_schedule(text: str, seq_length_tokens: int | None) -> StepBatchSchedule:
    """The schedule as Megatron runs it, or exit 2 with the ValueError / assertion Megatron stops on."""
    def refuse(why: str) -> ConfigError:
        return ConfigError(f"--step-batch-size-schedule {text!r}: {why} (Megatron's "
                           "StepBatchsizeNumMicroBatchesCalculator, megatron/core/num_microbatches_calculator.py). Write 'THRESHOLD:BATCH ...' with a first "
                           "threshold 0 and increasing thresholds (tokens; suffixes K M B T), e.g. '0:16 2.4B:320'.")
    steps = []
    for entry in text.strip().replace(",", " ").split():
        if ":" not in entry:
            raise refuse(f"entry {entry!r} has no ':' (ValueError 'Invalid schedule entry')")
        threshold, batch = entry.split(":", 1)
        try:
            steps.append((_number(threshold), _number(batch)))
        except ValueError:
            raise refuse(f"entry {entry!r} is not two numbers (ValueError parsing it)") from None
    if seq_length_tokens:
        steps = [(threshold // seq_length_tokens, batch) for threshold, batch in steps]
    steps.sort(key=lambda step: step[0])
    if not steps:
        raise refuse("no entry (it asserts 'schedule must have at least one entry')")
    if steps[0][0] != 0:
        raise refuse(f"the first threshold is {steps[0][0]} samples (it asserts 'first schedule entry must have "
                     "threshold 0')")
    for (before, _), (after, _) in zip(steps, steps[1:]):
        if after <= before:
            raise refuse(f"thresholds {before} and {after} samples (tokens // seq length {seq_length_tokens}) are not "
                         "strictly increasing (it asserts 'schedule thresholds must be strictly increasing')")
    if any(batch <= 0 for _, batch in steps):
        raise refuse("a batch is not positive (it asserts 'batch size must be positive')")
    return StepBatchSchedule(tuple(steps))


def unsplit_batches_warning(schedule: StepBatchSchedule, micro_batch: int, dp: int) -> list[str]:
    """The schedule's earlier batches that micro-batch x DP does not divide: update(consistency_check=True) asserts
    'current global batch size (B) is not divisible by micro_batch_size (M) * data_parallel_size (D)' when training
    reaches one (a fresh run reaches the first at its first step; a run resumed past one never does). The final
    batch, the one priced, is checked with the global batch."""
    bad = [batch for _, batch in schedule.steps[:-1] if batch % (micro_batch * dp)]
    if not bad:
        return []
    return [f"--step-batch-size-schedule: batch {', '.join(map(str, bad))} is not divisible by micro-batch x DP = "
            f"{micro_batch} x {dp}: Megatron asserts it when training reaches that batch (a fresh run at the first "
            "entry, step 1); the prediction is at the final batch"]
