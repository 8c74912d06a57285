"""Step-time predictions of Megatron-Core MoE jobs per token dispatcher (graph/moe_ops.py).

    python benchmarks/bench_moe_dispatch.py

Mixtral-8x7B on 64 H100 (alltoall, allgather, and each with --moe-grouped-gemm) and a DeepSeek-V3-like model on
1,024 H100 (flex / DeepEP with node-limited routing, and alltoall). Run it on a tree before graph/moe_ops.py
(PYTHONPATH=that tree) to see the old pricing, which ignored the dispatcher flags. One thread (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from llmperf_hook.api import predict_command  # noqa: E402

MIXTRAL = ("torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
           "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
           "--seq-length 4096 --max-position-embeddings 32768 --vocab-size 32000 --swiglu --normalization RMSNorm "
           "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
           "--num-experts 8 --moe-router-topk 2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 "
           "--expert-model-parallel-size 8 --sequence-parallel --micro-batch-size 1 --global-batch-size 256 --bf16 "
           "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather").split()
DEEPSEEK = ("torchrun --nnodes 128 --nproc-per-node 8 pretrain_gpt.py --num-layers 64 --hidden-size 7168 "
            "--ffn-hidden-size 18432 --num-attention-heads 128 --multi-latent-attention --q-lora-rank 1536 "
            "--kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --seq-length 4096 "
            "--max-position-embeddings 4096 --vocab-size 129280 --swiglu --normalization RMSNorm "
            "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
            "--num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 "
            "--moe-layer-freq ([0]*3+[1]*61) --tensor-model-parallel-size 1 --pipeline-model-parallel-size 16 "
            "--expert-model-parallel-size 64 --expert-tensor-parallel-size 1 --micro-batch-size 1 --global-batch-size 1024 "
            "--bf16 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --moe-grouped-gemm "
            "--moe-router-num-groups 8 --moe-router-group-topk 4").split()


def _ep2(argv: list[str]) -> list[str]:
    i = argv.index("--expert-model-parallel-size")
    return argv[:i + 1] + ["2"] + argv[i + 2:]


CASES = [
    ("Mixtral-8x7B 64xH100 alltoall", MIXTRAL + ["--moe-token-dispatcher-type", "alltoall"]),
    ("Mixtral-8x7B 64xH100 allgather (default)", MIXTRAL),
    ("Mixtral-8x7B 64xH100 EP 2 alltoall (4 local experts)", _ep2(MIXTRAL) + ["--moe-token-dispatcher-type", "alltoall"]),
    ("Mixtral-8x7B 64xH100 EP 2 alltoall grouped GEMM", _ep2(MIXTRAL) + ["--moe-token-dispatcher-type", "alltoall",
                                                                        "--moe-grouped-gemm"]),
    ("DeepSeek-V3-like 1024xH100 flex deepep", DEEPSEEK + ["--moe-token-dispatcher-type", "flex",
                                                           "--moe-flex-dispatcher-backend", "deepep"]),
    ("DeepSeek-V3-like 1024xH100 alltoall", DEEPSEEK + ["--moe-token-dispatcher-type", "alltoall"]),
    ("DeepSeek-V3-like 1024xH100 alltoall + EP overlap", DEEPSEEK + ["--moe-token-dispatcher-type", "alltoall",
                                                                     "--overlap-moe-expert-parallel-comm",
                                                                     "--num-layers-per-virtual-pipeline-stage", "2"]),
]


def main() -> None:
    print(f"{'case':52s} {'step s':>8s} {'MFU %':>6s} {'EP exposed s (worst stage)':>26s} {'predict s':>9s}")
    for name, argv in CASES:
        start = time.perf_counter()
        try:
            est = predict_command(argv, {}, cluster="dgx-h100").estimate
        except Exception as exc:  # noqa: BLE001 - an older tree may refuse a flag; print why
            print(f"{name:52s} {type(exc).__name__}: {str(exc)[:80]}")
            continue
        wall = time.perf_counter() - start
        ep = max((s.exposed_comm_s.get("ep", 0.0) for s in getattr(est, "stages", ())), default=0.0)
        print(f"{name:52s} {est.step_time_s:8.3f} {100 * est.mfu:6.1f} {ep:26.3f} {wall:9.2f}")


if __name__ == "__main__":
    main()
