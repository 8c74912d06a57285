"""The CPU testbed's twelve DeepSpeed configurations and the limits the benchmark scores them by
(benchmarks/bench_cpu_testbed.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN_GPT = REPO / "examples" / "cpu-testbed" / "train_gpt.py"
CLUSTER = "cpu-testbed"
TARGETS = {"before": 10.0, "instrumented": 3.0, "others": 8.0}
QUIET_WALL_PER_CPU = {1: 1.1, 2: 1.25}
"""Step wall / CPU time of the slowest rank above which a run counts as contended (other programs held the
cores): one rank computes all the time; two ranks also wait for each other in gloo: 1.03-1.17 in the
quietest runs on this machine (load ~1.5), 1.3-2.0 while another program held a core. The calibration run's
refine marks a run above the same limit contended (LLMPERF_REFINE_MAX_WALL_PER_CPU) and calibrates from its CPU
time (refine/contention.py)."""


@dataclass(frozen=True)
class TestbedConfig:
    layers: int
    hidden: int
    heads: int
    seq: int
    mbs: int
    zero: int
    ranks: int
    dtype: str
    accum: int = 1
    vocab: int = 1024
    bind: bool = False
    """Launch with DeepSpeed's --bind_cores_to_rank (numactl -C: each rank on its own cores; --bind-cores)."""

    def label(self) -> str:
        acc = f" ga{self.accum}" if self.accum > 1 else ""
        return (f"L{self.layers} h{self.hidden} s{self.seq} mbs{self.mbs}{acc} z{self.zero} "
                f"{self.ranks}r {self.dtype}" + (" bound" if self.bind else ""))

    def ds_config(self) -> dict:
        cfg = {"train_micro_batch_size_per_gpu": self.mbs, "gradient_accumulation_steps": self.accum,
               "train_batch_size": self.mbs * self.accum * self.ranks, "zero_optimization": {"stage": self.zero},
               "steps_per_print": 10 ** 9}
        if self.dtype == "bf16":
            cfg["bf16"] = {"enabled": True}
        return cfg

    def argv(self, ds_json: Path, port: int) -> list[str]:
        flags = ["--num-layers", self.layers, "--hidden-size", self.hidden, "--num-attention-heads", self.heads,
                 "--seq-length", self.seq, "--max-position-embeddings", self.seq, "--micro-batch-size", self.mbs,
                 "--global-batch-size", self.mbs * self.accum * self.ranks, "--vocab-size", self.vocab,
                 "--no-pipeline-parallel"]
        flags += ["--bf16"] if self.dtype == "bf16" else []
        bind = ["--bind_cores_to_rank"] if self.bind else []
        return ["deepspeed", "--num_gpus", str(self.ranks), *bind, "--master_port", str(port), str(TRAIN_GPT),
                "--deepspeed_config", str(ds_json), *map(str, flags), "--train-iters", "1000"]


CONFIGS = (
    TestbedConfig(2, 128, 4, 128, 2, 0, 1, "fp32"),
    TestbedConfig(2, 256, 4, 128, 2, 1, 2, "fp32"),
    TestbedConfig(4, 128, 4, 256, 1, 1, 2, "fp32"),
    TestbedConfig(2, 256, 8, 256, 2, 2, 2, "fp32"),
    TestbedConfig(1, 512, 8, 128, 2, 3, 2, "fp32"),
    TestbedConfig(4, 256, 4, 64, 4, 0, 2, "fp32"),
    TestbedConfig(2, 128, 4, 512, 1, 2, 1, "fp32"),
    TestbedConfig(3, 192, 4, 128, 4, 1, 1, "fp32"),
    TestbedConfig(2, 128, 4, 128, 2, 1, 2, "fp32", accum=2),
    TestbedConfig(2, 128, 4, 128, 2, 1, 2, "bf16"),
    TestbedConfig(2, 256, 4, 64, 2, 0, 1, "bf16"),
    TestbedConfig(1, 256, 4, 256, 1, 2, 2, "bf16"),
)
DTYPES = tuple(sorted({c.dtype for c in CONFIGS}))
"""The dtypes the configurations train in. One the profile's framework cost file lacks is scored on the operator
profile alone and said (testbed_setup.missing_dtype_caveats; re-measured only with --remeasure-framework-cost): no bf16
reading ends in any box on an AVX2-only EPYC, and until session 21 such a file scored the bf16 configurations unsaid,
priced as a GPU's (predict/dispatch.py's sustained floor), 76-121 % high (/work/notes/h174.md, r65.md)."""
