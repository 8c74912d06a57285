"""Measure Megatron-Core GPT training steps on one GPU, as Megatron-LM's `pretrain_gpt.py --transformer-impl local` runs them.

    python benchmarks/measure_megatron_core.py OUT.jsonl [--only NAME ...] [--kernels DIR]

Run on a GPU machine with megatron-core installed (benchmarks/measure_gpu_extra.sh). For each configuration of
CONFIGS it builds what Megatron-LM's `pretrain_gpt.py` builds for one GPU (megatron/training/training.py
setup_model_and_optimizer and train_step, at megatron-core's own level, without megatron.training):
  - GPTModel (in Float16Module, as training.get_model wraps it for --bf16) with the local layer spec (get_gpt_layer_local_spec: megatron-core's own linear layers and
    DotProductAttention, i.e. unfused attention; torch LayerNorm without apex), learned absolute positions, the
    output layer tied to the input embedding (Megatron-LM's default), bf16 parameters, dropout 0.1;
  - megatron-core DistributedDataParallel with gradients accumulated and reduced in fp32 (Megatron-LM sets
    accumulate_allreduce_grads_in_fp32 for bf16), the NaN check of the gradients on (Megatron-LM's default,
    --check-for-nan-in-loss-and-grad), no overlap, no distributed optimizer;
  - get_megatron_optimizer(adam, bf16): Float16OptimizerWithFloat16Params with fp32 main parameters (torch AdamW
    when neither Transformer Engine nor apex is installed, as on the machine this ran on), gradient clipping 1.0;
  - per iteration, train_step's order: zero_grad_buffer, optimizer.zero_grad, forward_backward_func over the
    global batch's micro-batches (finalize_model_grads as the grad finalizer), optimizer.step().
  - full recompute where the configuration says so (--recompute-granularity full --recompute-method uniform
    --recompute-num-layers 1, the setting of the vTrain sweeps of ../shared/validation/dev.csv).
Timing: 3 warm-up iterations, then 3 blocks of 3 iterations, each block between two torch.cuda.synchronize()
calls (no synchronize inside a block: the host runs ahead as in a real job, as Megatron-LM's log-interval timer
sees it); the figure is the median of the blocks' per-iteration times. Peak allocated / reserved memory after
the run. One JSON line per configuration with the Megatron-LM command that describes it (`llmperf predict` input).
A configuration that fails is written with its error and the next one runs. --kernels DIR: after the timed
blocks, 3 more iterations under torch.profiler, every kernel's device time per iteration by aten op in
DIR/NAME.txt (benchmarks/kernel_breakdown.py's table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

VOCAB = 50304
CONFIGS = [  # name, layers, hidden, heads, seq, micro-batch, global batch, full recompute
    ("l12h1024-m1", 12, 1024, 16, 2048, 1, 8, True),
    ("l12h1024-m2", 12, 1024, 16, 2048, 2, 8, True),
    ("l12h1024-m4", 12, 1024, 16, 2048, 4, 8, True),
    ("l12h1024-m8", 12, 1024, 16, 2048, 8, 8, True),
    ("l12h1024-m4-norc", 12, 1024, 16, 2048, 4, 8, False),
    ("l24h2048-m1", 24, 2048, 16, 2048, 1, 8, True),
    ("l24h2048-m2", 24, 2048, 16, 2048, 2, 8, True),
    ("l24h2048-m4", 24, 2048, 16, 2048, 4, 8, True),
    ("l24h2048-m2-norc", 24, 2048, 16, 2048, 2, 8, False),
    ("l4h4096-m2", 4, 4096, 32, 2048, 2, 8, True),
    ("l12h1024-s1024-m8", 12, 1024, 16, 1024, 8, 32, True),
    ("l2h512-m1", 2, 512, 8, 1024, 1, 16, False),
]
WARMUP_ITERS, BLOCKS, ITERS_PER_BLOCK = 3, 3, 3


def megatron_command(layers: int, hidden: int, heads: int, seq: int, mbs: int, gbs: int, recompute: bool) -> list[str]:
    """The Megatron-LM launch command of one configuration, for `llmperf predict`."""
    cmd = ["torchrun", "--nproc-per-node", "1", "pretrain_gpt.py", "--num-layers", str(layers),
           "--hidden-size", str(hidden), "--num-attention-heads", str(heads), "--seq-length", str(seq),
           "--max-position-embeddings", str(seq), "--micro-batch-size", str(mbs), "--global-batch-size", str(gbs),
           "--bf16", "--transformer-impl", "local", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(VOCAB),
           "--no-gradient-accumulation-fusion", "--lr", "1e-4", "--train-iters", "12",
           # TransformerConfig's defaults where Megatron-LM's arguments differ (build() leaves them as they are)
           "--no-masked-softmax-fusion", "--attention-softmax-in-fp32", "--no-bias-gelu-fusion", "--no-bias-dropout-fusion"]
    if recompute:
        cmd += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    return cmd


def build(layers: int, hidden: int, heads: int, seq: int, recompute: bool):
    import torch
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    kw = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1) if recompute else {}
    cfg = TransformerConfig(num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                            ffn_hidden_size=4 * hidden, bf16=True, params_dtype=torch.bfloat16,
                            pipeline_dtype=torch.bfloat16, attention_dropout=0.1, hidden_dropout=0.1, **kw)
    model = GPTModel(config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=VOCAB,
                     max_sequence_length=seq, share_embeddings_and_output_weights=True).cuda()
    model = Float16Module(cfg, model)  # training.get_model: bf16 weights, inputs cast on the first stage
    ddp = DistributedDataParallel(cfg, DistributedDataParallelConfig(grad_reduce_in_fp32=True, check_for_nan_in_grad=True), model)
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-4, weight_decay=0.01, bf16=True,
                                                 params_dtype=torch.bfloat16, clip_grad=1.0), [ddp])
    cfg.no_sync_func = ddp.no_sync
    cfg.finalize_model_grads_func = finalize_model_grads
    cfg.grad_scale_func = opt.scale_loss
    return ddp, opt


def measure(name: str, layers: int, hidden: int, heads: int, seq: int, mbs: int, gbs: int, recompute: bool,
            kernels_dir: str | None = None) -> dict:
    import torch
    from megatron.core.pipeline_parallel import get_forward_backward_func

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    ddp, opt = build(layers, hidden, heads, seq, recompute)
    positions = torch.arange(seq, device="cuda").unsqueeze(0).expand(mbs, -1)
    loss_mask = torch.ones(mbs, seq, device="cuda")

    def loss_func(output):  # pretrain_gpt.loss_func: sum over the loss mask, token count, reporting loss
        loss = torch.sum(output.float().view(-1) * loss_mask.view(-1))
        num_tokens = loss_mask.sum().to(torch.int)
        return loss, num_tokens, {"lm loss": torch.cat([loss.detach().view(1), num_tokens.view(1)])}

    def forward_step(data_iterator, model):
        tokens = torch.randint(0, VOCAB, (mbs, seq + 1), device="cuda")
        return model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]), loss_func

    fb = get_forward_backward_func()

    def iteration():
        ddp.zero_grad_buffer()
        opt.zero_grad()
        fb(forward_step_func=forward_step, data_iterator=None, model=[ddp], num_microbatches=gbs // mbs,
           seq_length=seq, micro_batch_size=mbs, forward_only=False)
        opt.step()

    for _ in range(WARMUP_ITERS):
        iteration()
    blocks = []
    for _ in range(BLOCKS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(ITERS_PER_BLOCK):
            iteration()
        torch.cuda.synchronize()
        blocks.append((time.perf_counter() - t0) / ITERS_PER_BLOCK)
    if kernels_dir:  # every kernel of 3 more iterations by aten op (benchmarks/kernel_breakdown.py's table)
        from pathlib import Path

        from kernel_breakdown import PROFILED, write_table

        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(PROFILED):
                iteration()
            torch.cuda.synchronize()
        Path(kernels_dir).mkdir(parents=True, exist_ok=True)
        write_table(Path(kernels_dir) / f"{name}.txt", prof, statistics.median(blocks), True,
                    " ".join(megatron_command(layers, hidden, heads, seq, mbs, gbs, recompute)))
    out = {"step_time_s": statistics.median(blocks), "block_step_times_s": blocks,
           "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
           "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
           "optimizer": type(opt).__name__, "inner_optimizer": type(getattr(opt, "optimizer", None)).__name__}
    del ddp, opt
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--kernels", default=None, help="also write each configuration's kernel table into this folder")
    args = ap.parse_args()
    import torch

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29681")
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(1234)
    with open(args.out, "a") as f:
        for name, *shape in CONFIGS:
            if args.only and name not in args.only:
                continue
            row = {"name": name, "layers": shape[0], "hidden": shape[1], "heads": shape[2], "seq": shape[3],
                   "micro_batch": shape[4], "global_batch": shape[5], "full_recompute": shape[6],
                   "command": megatron_command(*shape)}
            t0 = time.time()
            try:
                row.update(measure(name, *shape, kernels_dir=args.kernels))
            except Exception as err:  # noqa: BLE001 - record it, go on with the next configuration
                row["error"] = f"{type(err).__name__}: {err}"
                row["traceback"] = traceback.format_exc()[-3000:]
            row["wall_s"] = round(time.time() - t0, 1)
            print(json.dumps({k: v for k, v in row.items() if k not in ("command", "traceback")}), flush=True)
            f.write(json.dumps(row) + "\n")
            f.flush()
            import gc
            gc.collect()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
