"""What frees memory when a job does not fit (schedule/memory_knobs.py): each knob is named in the framework's own
words, and the memory it reports is what `llmperf predict` gives for the command with that change made; `run
--require-fit` says by how much the job is short and which knob frees the most."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.cli import main
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory_knobs import describe_knobs, knob_effects

# A 13B-class Megatron job on one DGX A100 node at micro-batch 4, nothing sharded or recomputed: ~150 GiB per GPU.
ARGV = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "40", "--hidden-size", "5120",
        "--num-attention-heads", "40", "--seq-length", "4096", "--max-position-embeddings", "4096",
        "--micro-batch-size", "4", "--global-batch-size", "64", "--vocab-size", "32000", "--bf16",
        "--tensor-model-parallel-size", "2"]


def _predict(argv: list[str], cluster="dgx-a100"):
    return predict_command(argv, {}, cluster=cluster)


def test_each_gpu_knob_is_what_predict_gives_for_the_command_with_it() -> None:
    """Appending a knob's words to the command (Megatron's argparse: the last value given wins) and predicting again
    gives the peak the knob reports, so its words and its figure agree."""
    pred = _predict(ARGV)
    mem = pred.estimate.memory
    assert not mem.fits
    effects = knob_effects(pred.config, pred.cluster, mem)
    words = {e.knob.split()[0] for e in effects}
    assert {"--micro-batch-size", "--recompute-granularity", "--sequence-parallel", "--use-distributed-optimizer",
            "--tensor-model-parallel-size", "--pipeline-model-parallel-size"} <= words
    for e in effects:
        again = _predict(ARGV + e.knob.split()).estimate.memory
        assert again.peak_bytes_per_gpu == e.memory.peak_bytes_per_gpu, e.knob
        assert e.freed_bytes == mem.peak_bytes_per_gpu - again.peak_bytes_per_gpu > 0
    assert effects[0].fits or not any(e.fits for e in effects)  # a knob that makes it fit is named first


def test_knobs_the_framework_would_refuse_are_not_offered() -> None:
    """At TP 8 the doubled TP 16 does not divide the 40 heads (Megatron asserts heads % TP == 0): not offered;
    PP 2 splits the 40 layers evenly: offered."""
    from llmperf_hook.schedule.memory_knobs import _accepted, _layout_knobs

    cfg = _predict(["torchrun", "--nnodes", "2", *ARGV[1:-1], "8"]).config  # 16 GPUs: TP 8 x DP 2
    offered = [words for words, _ in _accepted(cfg, _layout_knobs(cfg))]
    assert "--tensor-model-parallel-size 16" not in offered and "--pipeline-model-parallel-size 2" in offered
    assert "--tensor-model-parallel-size 16" in [words for words, _ in _layout_knobs(cfg)]


def test_host_knobs_for_deepspeed_offload(tmp_path) -> None:
    """ZeRO-3 offloading optimizer and parameters from one node whose host RAM is too small: moving the optimizer
    to NVMe frees the most host memory (its 16 B of fp32 state and gradient per parameter, less its swap
    buffers)."""
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, '
                  '"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, '
                  '"offload_param": {"device": "cpu"}}}')
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "40", "--hidden-size", "5120",
            "--num-attention-heads", "40", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "32000", "--bf16", "--deepspeed",
            "--deepspeed_config", str(ds), "--zero-stage", "3", "--no-pipeline-parallel"]
    small = dataclasses.replace(load_cluster("dgx-a100"), host_memory_bytes=64 * 2**30)
    pred = _predict(argv, small)
    mem = pred.estimate.memory
    assert mem.fits and not mem.host_fits
    effects = knob_effects(pred.config, small, mem)
    assert effects[0].knob in ("zero_optimization.offload_optimizer.device nvme",
                               "zero_optimization.offload_optimizer.device none")
    by_knob = {e.knob: e for e in effects}
    nvme = by_knob["zero_optimization.offload_optimizer.device nvme"]
    assert nvme.memory.host_components.get("host_optimizer_states", 0) == 0
    text = describe_knobs(pred.config, small, mem)
    assert text.startswith("Freed most by: ") and "GiB per node" in text


def test_run_require_fit_says_how_short_and_which_knob_frees_most(capsys: pytest.CaptureFixture[str]) -> None:
    """With the distributed optimizer the job is ~132 GiB per GPU: full recompute alone brings it to ~64 GiB and is
    named first, with what it frees and the verdict after it."""
    with pytest.raises(SystemExit) as ex:
        main(["run", "--cluster", "dgx-a100", "--dry-run", "--require-fit", "--", *ARGV, "--use-distributed-optimizer"])
    err = " ".join(capsys.readouterr().err.split())
    assert ex.value.code == 3, err
    assert "exceeds the 80.00 GiB" in err and " by " in err and "Traceback" not in err
    assert re.search(r"Freed most by: --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
                     r"frees \d+\.\d GiB per GPU \(peak then \d+\.\d GiB: fits\)", err), err


def test_host_knobs_for_megatron_optimizer_offload() -> None:
    """Megatron's HybridDeviceOptimizer on a node with too little host RAM: halving --optimizer-offload-fraction frees
    half its host bytes, dropping --optimizer-cpu-offload all of them (and puts the state back on the GPU)."""
    argv = [*ARGV, "--micro-batch-size", "1", "--use-distributed-optimizer", "--use-precision-aware-optimizer",
            "--optimizer-cpu-offload"]
    small = dataclasses.replace(load_cluster("dgx-a100"), host_memory_bytes=32 * 2**30)
    pred = _predict(argv, small)
    mem = pred.estimate.memory
    assert mem.fits and not mem.host_fits
    by_knob = {e.knob: e for e in knob_effects(pred.config, small, mem)}
    assert by_knob["--optimizer-offload-fraction 0.5"].freed_bytes == pytest.approx(mem.host_bytes_per_node / 2)
    off = by_knob["no --optimizer-cpu-offload"]
    assert off.freed_bytes == mem.host_bytes_per_node
    assert off.memory.components["optimizer_states"] > mem.components["optimizer_states"] == 0


def test_zero2_offload_is_not_told_to_use_nvme(tmp_path) -> None:
    """ZeRO-1/2 offload to CPU memory whatever offload_optimizer.device says (stage_1_and_2.py; llmperf prices nvme
    there as cpu, with a warning): only 'device none' is offered for them."""
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, '
                  '"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}')
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "8", *ARGV[6:14], "--micro-batch-size", "1",
            "--global-batch-size", "8", "--vocab-size", "32000", "--bf16", "--deepspeed", "--deepspeed_config", str(ds),
            "--zero-stage", "2", "--no-pipeline-parallel"]
    small = dataclasses.replace(load_cluster("dgx-a100"), host_memory_bytes=16 * 2**30)
    pred = _predict(argv, small)
    assert pred.estimate.memory.fits and not pred.estimate.memory.host_fits
    knobs = [e.knob for e in knob_effects(pred.config, small, pred.estimate.memory)]
    assert knobs == ["zero_optimization.offload_optimizer.device none"]


def test_a_host_knob_that_leaves_the_gpu_short_says_so() -> None:
    """On a 64 GiB GPU the offloaded job fits the GPU but not the 32 GiB host; dropping --optimizer-cpu-offload
    empties the host and puts ~18 GiB of optimizer state back on the GPU, which is then short: the verdict after it
    names the GPU, not 'still short' (the host is no longer short)."""
    argv = [*ARGV, "--micro-batch-size", "1", "--use-distributed-optimizer", "--use-precision-aware-optimizer",
            "--optimizer-cpu-offload"]
    a100 = load_cluster("dgx-a100")
    small = dataclasses.replace(a100, host_memory_bytes=32 * 2**30,
                                gpu=dataclasses.replace(a100.gpu, memory_capacity_bytes=64 * 2**30))
    pred = _predict(argv, small)
    mem = pred.estimate.memory
    assert mem.fits and not mem.host_fits
    off = {e.knob: e for e in knob_effects(pred.config, small, mem)}["no --optimizer-cpu-offload"]
    assert off.memory.host_fits and not off.memory.fits
    text = describe_knobs(pred.config, small, mem)
    assert re.search(r"no --optimizer-cpu-offload frees [\d.]+ GiB per node \(host memory then 0\.0 GiB: the GPU is "
                     r"then short\)", text), text
    assert re.search(r"--optimizer-offload-fraction 0\.5 frees [\d.]+ GiB per node \(host memory then [\d.]+ GiB: "
                     r"still short\)", text), text


@pytest.mark.parametrize("virtual", [["--num-layers-per-virtual-pipeline-stage", "2"],
                                     ["--num-virtual-stages-per-pipeline-rank", "4"]])
def test_doubling_pp_under_interleaving_is_priced_as_the_command_with_it(virtual: list[str]) -> None:
    """PP 4 with 4 virtual stages per rank: '--pipeline-model-parallel-size 8' appended keeps
    --num-layers-per-virtual-pipeline-stage 2 (2 chunks per rank then) or --num-virtual-stages-per-pipeline-rank 4
    (4 chunks of 1 layer). The knob is offered with that command's peak when it frees memory, and not offered when
    that command needs more (it priced 4 chunks for both: 'frees 10.5 GiB, peak then 182 GiB' where the command
    with 2 chunks takes 211 GiB, more than the job's 193)."""
    argv = [*ARGV[:5], "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "8192",
            "--max-position-embeddings", "8192", "--micro-batch-size", "4", "--global-batch-size", "64", "--vocab-size",
            "128256", "--bf16", "--fp8-format", "hybrid", "--pipeline-model-parallel-size", "4", *virtual]
    pred = _predict(argv, "dgx-h100")
    mem = pred.estimate.memory
    knob = "--pipeline-model-parallel-size 8"
    effects = {e.knob: e for e in knob_effects(pred.config, pred.cluster, mem)}
    again = _predict(argv + knob.split(), "dgx-h100").estimate.memory
    if again.peak_bytes_per_gpu < mem.peak_bytes_per_gpu:
        assert effects[knob].memory.peak_bytes_per_gpu == again.peak_bytes_per_gpu
    else:
        assert knob not in effects
    assert (knob in effects) == (virtual[0] == "--num-virtual-stages-per-pipeline-rank")  # both branches run


def test_megatron_deepspeed_micro_batch_knob_names_the_ds_config_key_too(tmp_path) -> None:
    """Megatron-DeepSpeed with a ds_config that sets train_micro_batch_size_per_gpu 4: '--micro-batch-size 1' alone
    is refused (the engine and Megatron's schedule would disagree), so the knob names both, and its figure is the
    prediction of the command and ds_config with both set to 1."""
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 1}}
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(config))
    argv = ["deepspeed", "--num_gpus", "8", *ARGV[3:], "--deepspeed", "--deepspeed_config", str(ds),
            "--pipeline-model-parallel-size", "2"]
    pred = _predict(argv)
    effects = {e.knob: e for e in knob_effects(pred.config, pred.cluster, pred.estimate.memory)}
    knob = effects["--micro-batch-size 1 and the ds_config's train_micro_batch_size_per_gpu 1"]
    one = tmp_path / "ds1.json"
    one.write_text(json.dumps({**config, "train_micro_batch_size_per_gpu": 1}))
    again = _predict([str(one) if w == str(ds) else w for w in argv] + ["--micro-batch-size", "1"]).estimate.memory
    assert again.peak_bytes_per_gpu == knob.memory.peak_bytes_per_gpu


def test_fsdp_job_knobs_are_in_its_own_words() -> None:
    """An HF Trainer FSDP job with CPU offload (framework torch): the micro-batch knob names the flag the batch came
    from, --per_device_train_batch_size (it named DeepSpeed's ds_config key), and the host knob drops FSDP's
    offload (it offered Megatron's --optimizer-offload-fraction / --optimizer-cpu-offload)."""
    from llmperf_hook.frameworks.resolve import JobOverrides

    argv = ["torchrun", "--nproc_per_node", "8", "run_clm.py", "--model_name_or_path", "x", "--fsdp",
            "full_shard offload", "--bf16", "--per_device_train_batch_size", "8", "--block_size", "4096"]
    small = dataclasses.replace(load_cluster("dgx-a100"), host_memory_bytes=64 * 2**30)
    pred = predict_command(argv, {}, cluster=small, overrides=JobOverrides(model="llama2-7b"))
    mem = pred.estimate.memory
    assert not mem.fits and not mem.host_fits
    gpu = [e.knob for e in knob_effects(pred.config, small, mem)]
    assert gpu[0] == "--per_device_train_batch_size 1"
    host_side = dataclasses.replace(mem, peak_bytes_per_gpu=0, fits=True)  # as run sees a job short of host RAM only
    host = {e.knob: e for e in knob_effects(pred.config, small, host_side)}
    assert list(host) == ["no FSDP CPU offload (--fsdp without 'offload'; accelerate: fsdp_offload_params false)"]
    assert next(iter(host.values())).memory.host_bytes_per_node == 0


def test_megatron_knobs_beyond_the_layout_agree_with_predict() -> None:
    """With the distributed optimizer on Transformer Engine, --use-precision-aware-optimizer frees 2 B per shard
    parameter (the master kept as int16 remainders), as predict says for the command with it. Activation CPU
    offloading is not offered (its copies are not timed); halving it is a host knob."""
    argv = [*ARGV, "--use-distributed-optimizer"]
    pred = _predict(argv)
    effects = {e.knob: e for e in knob_effects(pred.config, pred.cluster, pred.estimate.memory)}
    again = _predict(argv + ["--use-precision-aware-optimizer"]).estimate.memory
    assert effects["--use-precision-aware-optimizer"].memory.peak_bytes_per_gpu == again.peak_bytes_per_gpu
    assert not [k for k in effects if k.startswith("--cpu-offloading")]
    offload = _predict([*argv, "--cpu-offloading-num-layers", "20"])
    small = dataclasses.replace(offload.cluster, host_memory_bytes=64 * 2**30)
    mem = dataclasses.replace(offload.estimate.memory, host_capacity_bytes=small.host_memory_bytes)
    host = {e.knob: e for e in knob_effects(offload.config, small, dataclasses.replace(mem, fits=True))}
    halved = _predict([*argv, "--cpu-offloading-num-layers", "10"]).estimate.memory
    assert host["--cpu-offloading-num-layers 10"].memory.host_bytes_per_node == halved.host_bytes_per_node


def test_a_knob_that_leaves_the_job_tight_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a knob the job may fit only tightly (its allocated bytes fit, its peak does not: schedule/memory_fit.py):
    the sentence says "fits, tight", not "fits"."""
    import llmperf_hook.schedule.memory_knobs as knobs

    mem = _predict(ARGV).estimate.memory
    assert not mem.fits
    cap = mem.capacity_bytes
    # the first knob priced leaves the job 1 GiB over the GPU, within its fragmentation; the others free 1 byte
    after = iter([(cap + 2**30, True)] + [(mem.peak_bytes_per_gpu - 1, False)] * 20)

    def priced(_cfg, _cluster):
        peak, tight = next(after)
        return dataclasses.replace(mem, peak_bytes_per_gpu=peak, fits=tight, tight=tight)

    monkeypatch.setattr(knobs, "_memory", priced)
    sentence = describe_knobs(_predict(ARGV).config, load_cluster("dgx-a100"), mem)
    assert re.search(r"peak then [\d.]+ GiB: fits, tight\)", sentence), sentence
