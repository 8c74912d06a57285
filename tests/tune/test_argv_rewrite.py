"""--apply on Megatron argv: replace in the user's spelling, add what was absent, drop contradictions."""

import dataclasses

from llmperf_hook.tune import argv_edit as ed
from llmperf_hook.tune.candidate import candidate_of
from llmperf_hook.tune.megatron_argv import rewrite_megatron_argv

from .helpers import gpt_config

LAUNCH = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py"]


def _base():
    return candidate_of(gpt_config(world=16, tp=2, pp=2, mbs=1, gbs=64, layers=24, hidden=2048, heads=16))


def test_replaces_both_spellings_and_keeps_the_rest() -> None:
    argv = [*LAUNCH, "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size=2",
            "--micro-batch-size", "1", "--global-batch-size", "64", "--lr", "1e-4"]
    new = dataclasses.replace(_base(), tp=4, pp=4, micro_batch_size=2)
    out = rewrite_megatron_argv(argv, _base(), new, 24, "megatron")
    assert out == [*LAUNCH, "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size=4",
                   "--micro-batch-size", "2", "--global-batch-size", "64", "--lr", "1e-4"]


def test_adds_absent_flags_and_switches() -> None:
    argv = [*LAUNCH, "--micro-batch-size", "1"]
    new = dataclasses.replace(_base(), cp=2, sequence_parallel=True, distributed_optimizer=True, vpp=3)
    out = rewrite_megatron_argv(argv, _base(), new, 24, "megatron")
    assert ed.flag_value(out, ["--context-parallel-size"]) == "2"
    assert "--sequence-parallel" in out and "--use-distributed-optimizer" in out
    assert ed.flag_value(out, ["--num-layers-per-virtual-pipeline-stage"]) == "4"  # 24 / (2 * 3)


def test_removes_contradictory_flags() -> None:
    base = dataclasses.replace(_base(), vpp=2, sequence_parallel=True, recompute="full", recompute_num_layers=1)
    argv = [*LAUNCH, "--sequence-parallel", "--num-layers-per-virtual-pipeline-stage", "6",
            "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1",
            "--decoder-first-pipeline-num-layers", "10"]
    new = dataclasses.replace(base, vpp=1, pp=4, sequence_parallel=False, recompute="selective", recompute_num_layers=None)
    out = rewrite_megatron_argv(argv, base, new, 24, "megatron")
    for gone in ("--sequence-parallel", "--num-layers-per-virtual-pipeline-stage", "--recompute-method",
                 "--recompute-num-layers", "--decoder-first-pipeline-num-layers", "6", "10", "uniform"):
        assert gone not in out
    assert ed.flag_value(out, ["--recompute-granularity"]) == "selective"


def test_newer_vpp_spelling_is_kept_and_old_recompute_flags_replaced() -> None:
    base = dataclasses.replace(_base(), vpp=2, recompute="selective", recompute_num_layers=None)
    argv = [*LAUNCH, "--num-virtual-stages-per-pipeline-rank", "2", "--recompute-activations"]
    new = dataclasses.replace(base, vpp=3, recompute="block", recompute_num_layers=2)
    out = rewrite_megatron_argv(argv, base, new, 24, "megatron")
    assert ed.flag_value(out, ["--num-virtual-stages-per-pipeline-rank"]) == "3"
    assert "--recompute-activations" not in out
    assert ed.flag_value(out, ["--recompute-method"]) == "block" and ed.flag_value(out, ["--recompute-num-layers"]) == "2"
    off = rewrite_megatron_argv(out, new, dataclasses.replace(new, recompute="none", recompute_num_layers=None), 24, "megatron")
    assert not any(w.startswith("--recompute") for w in off)


def test_megatron_deepspeed_zero_and_pipeline_switch() -> None:
    base = dataclasses.replace(_base(), pp=1, zero_stage=1)
    argv = [*LAUNCH, "--zero-stage", "1", "--deepspeed"]
    out = rewrite_megatron_argv(argv, base, dataclasses.replace(base, zero_stage=2), 24, "megatron-deepspeed")
    assert ed.flag_value(out, ["--zero-stage"]) == "2" and "--no-pipeline-parallel" in out
    back = rewrite_megatron_argv(out, base, dataclasses.replace(base, pp=2, zero_stage=1), 24, "megatron-deepspeed")
    assert "--no-pipeline-parallel" not in back


def test_unchanged_candidate_leaves_argv_identical() -> None:
    argv = [*LAUNCH, "--tensor-model-parallel-size", "2", "--weird", "x"]
    assert rewrite_megatron_argv(argv, _base(), _base(), 24, "megatron") == argv


def test_first_vpp_spelling_is_rewritten_or_dropped() -> None:
    """--virtual-pipeline-model-parallel-size V (Megatron-LM's 2021 spelling, which explain reads as
    --num-virtual-stages-per-pipeline-rank) stayed in the rewritten command: a tuned vpp 1 ran interleaved with V
    stages, and a tuned vpp 2 added --num-layers-per-virtual-pipeline-stage beside it, which Megatron refuses."""
    base = dataclasses.replace(_base(), vpp=4)
    argv = [*LAUNCH, "--pipeline-model-parallel-size", "2", "--virtual-pipeline-model-parallel-size", "4"]
    flat = rewrite_megatron_argv(argv, base, dataclasses.replace(base, pp=4, vpp=1), 24, "megatron")
    assert "--virtual-pipeline-model-parallel-size" not in flat and "4" == ed.flag_value(flat, ["--pipeline-model-parallel-size"])
    two = rewrite_megatron_argv(argv, base, dataclasses.replace(base, pp=4, vpp=2), 24, "megatron")
    assert ed.flag_value(two, ["--virtual-pipeline-model-parallel-size"]) == "2"
    assert not ed.find_flag(two, ["--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank"])


def test_sequence_parallel_given_at_tp1_is_dropped_for_a_tuned_tp_without_it() -> None:
    """--sequence-parallel at TP 1 is off (Megatron drops it; the user's candidate says sp False); a tuned TP 2
    candidate without sequence parallelism kept the flag, so the launched job ran with it on."""
    base = candidate_of(gpt_config(world=16, tp=1, pp=2, mbs=1, gbs=64, layers=24, hidden=2048, heads=16))
    argv = [*LAUNCH, "--tensor-model-parallel-size", "1", "--sequence-parallel"]
    out = rewrite_megatron_argv(argv, base, dataclasses.replace(base, tp=2, sequence_parallel=False), 24, "megatron")
    assert "--sequence-parallel" not in out and ed.flag_value(out, ["--tensor-model-parallel-size"]) == "2"
    kept = rewrite_megatron_argv(argv, base, dataclasses.replace(base, tp=2, sequence_parallel=True), 24, "megatron")
    assert kept.count("--sequence-parallel") == 1
    assert rewrite_megatron_argv(argv, base, dataclasses.replace(base, micro_batch_size=2), 24, "megatron").count(
        "--sequence-parallel") == 1  # still TP 1: the user's flag is left alone


def test_a_command_spelled_with_underscores_is_rewritten_in_its_spelling() -> None:
    """epfLLM's Megatron-LLM spells every option with underscores (its argparse knows no other; explain reads them as
    Megatron's): --sequence_parallel and --recompute_granularity stayed on beside an appended --tensor-model-parallel-size
    2 and --global-batch-size (real script epfllm_llama2_7b_finetune: tune priced TP 2 without SP or recompute, predict
    of the applied command differed, 0.619 vs 0.601 s)."""
    argv = ["torchrun", "--nproc_per_node", "8", "finetune.py", "--tensor_model_parallel_size", "8",
            "--micro_batch_size=1", "--global_batch_size", "64", "--sequence_parallel", "--recompute_granularity",
            "selective", "--lr", "1e-4"]
    base = dataclasses.replace(_base(), tp=8, pp=1, sequence_parallel=True, recompute="selective",
                               recompute_num_layers=None)
    new = dataclasses.replace(base, tp=2, sequence_parallel=False, recompute="none", micro_batch_size=2,
                              distributed_optimizer=True, vpp=2, pp=2)
    out = rewrite_megatron_argv(argv, base, new, 24, "megatron", (16, 64))
    assert out == ["torchrun", "--nproc_per_node", "8", "finetune.py", "--tensor_model_parallel_size", "2",
                   "--micro_batch_size=2", "--global_batch_size", "64", "--lr", "1e-4", "--pipeline_model_parallel_size",
                   "2", "--num_layers_per_virtual_pipeline_stage", "6", "--use_distributed_optimizer"]
