"""Batch scripts read as bash would read them, never run: multi-line quoted values, `clear; srun ... | tee`, and the
ds_config a `cat <<EOT > $CONFIG` here-document writes (launch/shell_script.py, launch/batch_script.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_script import logical_lines, pipelines, strip_redirections

GPT = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
       "--vocab-size 50257 --micro-batch-size 2 --global-batch-size 512 --bf16")
HEADER = "#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:8\nset -x -e\n"
BIGSCIENCE = HEADER + f"""
MICRO=2
ZERO_STAGE=1
GPT_ARGS=" \\
    {GPT} \\
    --seed 42
    --checkpoint-activations \\
    "
config_json="./ds_config.$SLURM_JOBID.json"
cat <<EOT > $config_json
{{
  "train_micro_batch_size_per_gpu": $MICRO,
  "train_batch_size": 512,
  "zero_optimization": {{"stage": $ZERO_STAGE}},
  "bf16": {{"enabled": true}}
}}
EOT
export LAUNCHER="python -u -m torch.distributed.launch \\
    --nproc_per_node 8 --nnodes $SLURM_NNODES --master_addr $MASTER_ADDR --master_port 6000"
export CMD=" \\
    `pwd`/pretrain_gpt.py --tensor-model-parallel-size 2 $GPT_ARGS \\
    --deepspeed --deepspeed_config ${{config_json}} --zero-stage $ZERO_STAGE"
MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
clear; srun --jobid $SLURM_JOBID bash -c '$LAUNCHER --node_rank $SLURM_PROCID $CMD' 2>&1 | tee -a main_log.txt
echo "END TIME: $(date)"
"""


def _write(tmp_path: Path, text: str, name: str = "job.slurm") -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_logical_lines_join_open_quotes_and_take_here_documents() -> None:
    lines = logical_lines("A=\" x\n  y\" # it's a comment\n# don't \\\ncat <<-'END' > f\n\tbody $A\n\tEND\nB=1\n")
    assert [(line.number, line.text) for line in lines] == [
        (1, "A=\" x\n  y\" # it's a comment"), (3, "# don't \\"), (4, "cat <<-'END' > f"), (7, "B=1")]
    heredoc = lines[2].heredoc
    assert heredoc is not None and (heredoc.body, heredoc.expand, heredoc.first_line) == ("body $A\n", False, 5)


def test_pipelines_split_commands_not_redirections() -> None:
    assert pipelines("clear; srun a 'b;c' 2>&1 | tee -a log && echo ok # x; y") == [
        ["clear"], [" srun a 'b;c' 2>&1 ", " tee -a log "], [" echo ok "]]
    assert pipelines("cmd &> log || true") == [["cmd &> log "], [" true"]]
    assert strip_redirections(["cat", "<<EOT", ">", "out.json", "2>&1", "-n", ">>log"]) == (["cat", "-n"],
                                                                                           ["out.json", "log"])


def test_bigscience_style_slurm_script_parses_with_its_here_document(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    job, cfg = resolve_job(["sbatch", _write(tmp_path, BIGSCIENCE)], {})
    # srun runs one task per node; each starts python -u -m torch.distributed.launch with 8 processes
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.world_size) == ("torch.distributed.launch", 4, 8, 32)
    assert job.script == f"{tmp_path}/pretrain_gpt.py" and "--checkpoint-activations" in job.script_args
    assert list(job.script_files) == ["ds_config.llmperf-sbatch.json"]
    assert not (tmp_path / "ds_config.llmperf-sbatch.json").exists()  # nothing written, nothing run
    assert (cfg.framework, cfg.optimizer.zero_stage, cfg.batch.micro_batch_size) == ("megatron-deepspeed", 1, 2)
    assert "ds_config.llmperf-sbatch.json zero_optimization.stage" in str(cfg.sources["zero_stage"])


def test_here_document_with_what_only_running_the_script_gives_is_refused(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    unset = BIGSCIENCE.replace('"stage": $ZERO_STAGE', '"stage": $STAGE_FROM_ELSEWHERE')
    with pytest.raises(UsageError, match=r"written by .*job.slurm line 16 .* with \$STAGE_FROM_ELSEWHERE"):
        resolve_job(["sbatch", _write(tmp_path, unset)], {})
    quoted = BIGSCIENCE.replace("cat <<EOT", "cat <<'EOT'")  # no expansion: bash writes $MICRO literally
    with pytest.raises(UsageError, match=r"with \$MICRO, \$ZERO_STAGE"):
        resolve_job(["sbatch", _write(tmp_path, quoted)], {})
    _, cfg = resolve_job(["sbatch", _write(tmp_path, unset)], {"STAGE_FROM_ELSEWHERE": "0"})  # given by the user
    assert cfg.optimizer.zero_stage == 0


def test_a_launch_line_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    broken = HEADER + f"clear; srun python pretrain_gpt.py {GPT} --data-path \"unclosed\n"
    with pytest.raises(UsageError, match=r"no launch line .*line\(s\) 6 could not be read as shell words"):
        parse_launch(["sbatch", _write(tmp_path, broken)], {})


def test_a_here_document_config_matches_a_plain_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 512,
                                                   "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}))
    plain = BIGSCIENCE.replace("--deepspeed_config ${config_json}", "--deepspeed_config ds.json")
    _, from_file = resolve_job(["sbatch", _write(tmp_path, plain, "plain.slurm")], {})
    _, from_heredoc = resolve_job(["sbatch", _write(tmp_path, BIGSCIENCE)], {})
    assert (from_file.optimizer, from_file.batch, from_file.precision) == \
        (from_heredoc.optimizer, from_heredoc.batch, from_heredoc.precision)
