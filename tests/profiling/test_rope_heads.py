"""A graph rope op counts q + k heads once each; a profile's rope sample rotates two tensors of `heads` heads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.graph.op import Op
from llmperf_hook.profile import plan
from llmperf_hook.profile.features import RooflineConstants, profile_dims
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.sampler import _local_cluster

ROOT = Path(__file__).resolve().parents[2]
RC = RooflineConstants(1e12, 1e11, 4, 4)


def test_only_rope_heads_are_halved() -> None:
    assert profile_dims("rope", {"tokens": 8192, "heads": 20, "head_dim": 128}) == \
        {"tokens": 8192, "heads": 10.0, "head_dim": 128}
    gemm = {"m": 512, "n": 768, "k": 256}
    assert profile_dims("gemm", gemm) == gemm


@pytest.mark.parametrize("name", ["h100-sxm5-80gb", "a100-sxm4-80gb"])
def test_a_graph_rope_is_priced_as_the_profile_sample_of_half_its_heads(name: str) -> None:
    profile = FittedProfile(ROOT / "configs" / "profiles" / name)
    dtype = "bf16" if name.startswith("h100") else "fp16"
    # Llama-3-8B at TP2: 16 query heads + 4 key heads rotated per rank
    op = Op("layer.attn.rope", "rope", "fwd", {"tokens": 8192, "heads": 20, "head_dim": 128}, dtype=dtype)
    sample = profile.predict_class_s("rope", "fwd", dtype, {"tokens": np.array([8192.0]), "heads": np.array([10.0]),
                                                            "head_dim": np.array([128.0])})
    assert profile.predict_s([op], None)[0] == pytest.approx(float(sample[0]))


def test_profile_for_a_job_samples_its_rope_as_two_tensors_of_half_the_heads() -> None:
    argv = ("torchrun --nproc-per-node 2 pretrain_gpt.py --num-layers 2 --hidden-size 512 --num-attention-heads 8 "
            "--group-query-attention --num-query-groups 2 --position-embedding-type rope --seq-length 256 "
            "--max-position-embeddings 256 --micro-batch-size 2 --global-batch-size 8 --vocab-size 1000").split()
    ropes = [s for s in plan.job_specs(argv, {}, _local_cluster("x", RC)) if s.op_class == "rope" and s.origin == "job"]
    assert ropes and {s.dims["heads"] for s in ropes} == {5.0}  # (8 query + 2 key heads) / 2
