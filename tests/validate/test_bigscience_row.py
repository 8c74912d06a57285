"""A measured run of BLOOM's fork (public_runs.csv p21, bigscience tr11-176B-ml; its flags carry
--pp-partition-method, an option only that fork defines) becomes a command in the fork's own options: its parser
refuses Megatron-LM's --vocab-size, --recompute-* and --attention-backend (frameworks/megatron_unknown_args), so the
row failed validation once frameworks told the fork apart (626e564). Priced the same: 95.66 s both ways."""

from __future__ import annotations

from pathlib import Path

from llmperf_hook.frameworks.megatron_unknown_args import unknown_option_names
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.validate.launch_command import build_launch_plan
from llmperf_hook.validate.runs_csv import build_measured_run, read_runs_csv

CSV = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "public_runs.csv"


def test_a_bloom_row_is_spelled_as_the_fork_takes_it(tmp_path: Path) -> None:
    raw = next(row for row in read_runs_csv(CSV) if row["row_id"] == "p21")
    argv = list(build_launch_plan(build_measured_run(raw, 22), tmp_path).argv)
    args = argv[argv.index("pretrain_gpt.py") + 1:]
    assert unknown_option_names(args, "pretrain_gpt.py") == []
    assert "--checkpoint-activations" in args and args[args.index("--pad-vocab-size-to") + 1] == "250880"
    cfg = resolve_job(argv, {})[1]
    assert (cfg.recompute.granularity, cfg.model.padded_vocab_size, cfg.optimizer.zero_stage) == ("full", 250880, 1)
