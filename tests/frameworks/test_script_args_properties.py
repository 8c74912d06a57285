"""Random training-script arguments never crash the resolver: a TrainingConfig or a user-facing error."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmperf_hook.errors import LlmperfError
from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS

_FLAGS = st.sampled_from(sorted(SCRIPT_FLAGS) + ["--no-swiglu", "--no-sequence-parallel", "--unknown-flag"])
_VALUES = st.sampled_from(["0", "1", "2", "3", "4", "8", "-1", "64", "4096", "x", "auto", "True", "rope", "full",
                           "block", "uniform", "selective", "RMSNorm", "GPT2BPETokenizer", "NullTokenizer", "ds.json", ""])
_WORD = st.one_of(_FLAGS, _VALUES)
_INT_FLAGS = st.sampled_from(sorted(k for k, f in SCRIPT_FLAGS.items() if f.kind == "int"))
_PAIR = st.one_of(st.tuples(_FLAGS, _VALUES), st.tuples(_INT_FLAGS, st.sampled_from(["0", "-1", "1", "3"]))).map(list)
_BASE = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8", "--seq-length", "128",
         "--max-position-embeddings", "128", "--micro-batch-size", "1", "--vocab-size", "1000"]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=st.lists(_WORD, max_size=8), pairs=st.lists(_PAIR, max_size=6), base=st.booleans(),
       model=st.sampled_from([None, "llama2-7b"]))
def test_random_script_args_never_crash(words: list[str], pairs: list[list[str]], base: bool, model: str | None) -> None:
    extra = words + [w for pair in pairs for w in pair]
    argv = ["torchrun", "--nproc-per-node", "8", "train.py", *(_BASE if base else []), *extra]
    try:
        job, cfg = resolve_job(argv, {}, JobOverrides(model=model))
    except LlmperfError:
        return
    p = cfg.parallel
    assert p.tp * p.pp * p.cp * p.dp == cfg.world_size == job.world_size
