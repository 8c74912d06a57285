"""A small GPT trained on CPU: the llmperf CPU testbed (plain torch model, Megatron-style shape flags).

One script, three launch modes, so the same job can be instrumented and predicted every way it is run:

    deepspeed --num_gpus 2 train_gpt.py --deepspeed_config ds_zero1.json --num-layers 2 --hidden-size 128 ...
    torchrun --nproc-per-node 2 train_gpt.py --num-layers 2 ...            # plain DDP (gloo)
    python train_gpt.py --num-layers 2 ...                                  # one process, plain torch

The network is a decoder-only GPT as Megatron-LM builds it with --position-embedding-type learned_absolute,
--normalization LayerNorm and tied embeddings: embedding + learned positions, per layer LayerNorm -> causal
SDPA attention (fused QKV) -> residual, LayerNorm -> GELU MLP (4h unless --ffn-hidden-size) -> residual, final
LayerNorm, LM head tied to the embedding, cross-entropy. The shape flags are Megatron's names (arguments.py),
so llmperf's parser reads the same values the script trains with. Data are random tokens (seeded per rank).

CPU: DS_ACCELERATOR=cpu and the gloo backend; one thread per rank (torch.set_num_threads(1)) unless
--threads says otherwise. GPU: when torch sees CUDA and DS_ACCELERATOR is not `cpu`, each rank trains on
cuda:LOCAL_RANK with NCCL (`--device cpu` forces the CPU), and step times are taken after a synchronize.
Prints one line per step (`iter N | step_time_s T | loss L`) on rank 0 and
`done: N steps` at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--ffn-hidden-size", type=int, default=None, help="default 4 * hidden-size (Megatron)")
    p.add_argument("--num-attention-heads", type=int, default=4)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--max-position-embeddings", type=int, default=None, help="default seq-length")
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--global-batch-size", type=int, default=None, help="default micro-batch-size * data-parallel")
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--train-iters", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: cuda:LOCAL_RANK when CUDA is available and DS_ACCELERATOR is not cpu, else cpu")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--deepspeed_config", "--deepspeed-config", dest="deepspeed_config", default=None)
    p.add_argument("--deepspeed", action="store_true", help="accepted for compatibility; implied by --deepspeed_config")
    p.add_argument("--no-pipeline-parallel", action="store_true",
                   help="Megatron-DeepSpeed's flag for the non-pipeline engine (needed with ZeRO-2/3); this script "
                        "always uses DeepSpeed's plain engine, so it only tells parsers what runs")
    p.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", "0")))
    args = p.parse_args(argv)
    if args.hidden_size % args.num_attention_heads:
        p.error(f"--hidden-size {args.hidden_size} is not divisible by --num-attention-heads {args.num_attention_heads}")
    return args


class Block(nn.Module):
    """One transformer layer, pre-LayerNorm as in Megatron-LM's GPT."""

    def __init__(self, hidden: int, ffn: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        hidden, ffn = args.hidden_size, args.ffn_hidden_size or 4 * args.hidden_size
        self.embed = nn.Embedding(args.vocab_size, hidden)
        self.pos = nn.Embedding(args.max_position_embeddings or args.seq_length, hidden)
        self.blocks = nn.ModuleList(Block(hidden, ffn, args.num_attention_heads) for _ in range(args.num_layers))
        self.ln_f = nn.LayerNorm(hidden)
        for name, param in self.named_parameters():  # Megatron's init_method_std = 0.02, zero biases
            if param.dim() > 1:
                nn.init.normal_(param, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(param)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.embed.weight)  # LM head tied to the input embedding
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))


def world() -> tuple[int, int]:
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def batch_sizes(args: argparse.Namespace, world_size: int) -> tuple[int, int]:
    """(micro-batch, gradient-accumulation steps) with Megatron's rule gbs = mbs * dp * accumulation."""
    gbs = args.global_batch_size or args.micro_batch_size * world_size
    if gbs % (args.micro_batch_size * world_size):
        sys.exit(f"--global-batch-size {gbs} is not a multiple of micro-batch-size {args.micro_batch_size} "
                 f"x data-parallel size {world_size}")
    return args.micro_batch_size, gbs // (args.micro_batch_size * world_size)


def deepspeed_config(args: argparse.Namespace, world_size: int) -> dict:
    """The ds_config file with the batch keys filled from the Megatron-style flags (and checked against them)."""
    with open(args.deepspeed_config) as f:
        cfg = json.load(f)
    mbs, accum = batch_sizes(args, world_size)
    wanted = {"train_micro_batch_size_per_gpu": mbs, "gradient_accumulation_steps": accum,
              "train_batch_size": mbs * accum * world_size}
    for key, value in wanted.items():
        if key in cfg and cfg[key] != value:
            sys.exit(f"{args.deepspeed_config}: {key} = {cfg[key]} disagrees with the flags ({value})")
        cfg[key] = value
    if args.bf16:
        cfg.setdefault("bf16", {})["enabled"] = True
    return cfg


def pick_device(args: argparse.Namespace) -> torch.device:
    cuda = torch.cuda.is_available() and os.environ.get("DS_ACCELERATOR", "") != "cpu"
    if args.device == "cuda" and not cuda:
        sys.exit("--device cuda: torch sees no CUDA device (or DS_ACCELERATOR=cpu is set)")
    if args.device == "cpu" or not cuda:
        return torch.device("cpu")
    torch.cuda.set_device(args.local_rank)
    return torch.device("cuda", args.local_rank)


def build_engine(args: argparse.Namespace, model: nn.Module, world_size: int, device: torch.device):
    """(step function, accumulation steps): DeepSpeed engine, DDP, or a plain module."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)  # torch Adam: nothing to JIT-compile
    if args.deepspeed_config:
        import deepspeed

        deepspeed.init_distributed(dist_backend=backend)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                               config=deepspeed_config(args, world_size))
        return engine, engine.gradient_accumulation_steps()
    if args.bf16:
        model = model.to(torch.bfloat16)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if world_size > 1:
        torch.distributed.init_process_group(backend)
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    accum = batch_sizes(args, world_size)[1]
    return _PlainEngine(model, optimizer, accum), accum


class _PlainEngine:
    """The DeepSpeed engine's calls (forward, backward, step per micro-batch) for plain torch / DDP:
    step() is called after every micro-batch and steps the optimizer at the accumulation boundary."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, accum: int) -> None:
        self.model, self.optimizer, self.accum, self.micro_steps = model, optimizer, accum, 0

    def __call__(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(tokens, labels)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        self.micro_steps += 1
        if self.micro_steps % self.accum == 0:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)


def train_step(args: argparse.Namespace, engine, accum: int, gen: torch.Generator,
               device: torch.device) -> torch.Tensor:
    """One optimizer step: `accum` micro-batches of random tokens through forward, backward and engine.step()."""
    shape = (args.micro_batch_size, args.seq_length + 1)
    for _ in range(accum):
        data = torch.randint(0, args.vocab_size, shape, generator=gen).to(device, non_blocking=True)
        loss = engine(data[:, :-1], data[:, 1:])
        engine.backward(loss)
        engine.step()
    return loss


def train(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    rank, world_size = world()
    torch.manual_seed(args.seed)  # same initial weights on every rank
    device = pick_device(args)
    with device:  # parameters are created (and initialised) on the device, not copied there
        model = GPT(args)
    engine, accum = build_engine(args, model, world_size, device)
    gen = torch.Generator().manual_seed(args.seed + rank)
    for it in range(args.train_iters):
        start = time.perf_counter()
        loss = train_step(args, engine, accum, gen, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if rank == 0:
            print(f"iter {it} | step_time_s {time.perf_counter() - start:.6f} | loss {loss.item():.4f}", flush=True)
    if rank == 0:
        print(f"done: {args.train_iters} steps", flush=True)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # Free the engine (DDP's reducer, DeepSpeed's buffers) and then the process group, before the interpreter
        # tears them down in its own order: with torch 2.13 + gloo a DDP job left so aborts at exit about one run
        # in three ("terminate called without an active exception", exit 250); freed in this order, 0 of 12.
        del engine
        gc.collect()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(train(parse_args()))
