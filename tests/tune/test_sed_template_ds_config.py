"""`llmperf tune -- bash ds_pretrain_gpt_350M.sh`: a Megatron-DeepSpeed script whose `deepspeed` launch line does not
say its size (no --num_gpus: llmperf's --nproc-per-node gives it) and whose ds_config is written by `sed` from a
template. The script's launch line was parsed without llmperf's size, failed, and the changes were diffed against
`bash ds_pretrain_gpt_350M.sh` itself: 'add --micro-batch-size 4', 'add --zero-stage 1' for flags the script
already has, and no ds_config key (the search never read the sed-written ds_config, whose zero_optimization.stage
is what DeepSpeed runs)."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import run_cli

# Trimmed from deepspeedai/Megatron-DeepSpeed examples_deepspeed/offload_pp/ds_pretrain_gpt_350M.sh and its
# ds_config_gpt_TEMPLATE.json (commit 4efb479d5317ce9b86096b9d8e3e8030b0b5263b): the model, batch, sed pipeline and
# launch line as written there; the MoE / curriculum / logging / data options dropped.
SCRIPT = r"""#!/bin/bash
DIR=`pwd`
SEQ_LEN=2048
NUM_LAYERS=24
HIDDEN_SIZE=1024
NUM_ATTN_HEADS=16
GLOBAL_BATCH_SIZE=256
BATCH_SIZE=2
MP_SIZE=1
PP_SIZE=1
NAME="gpt-0.35B-bs-${GLOBAL_BATCH_SIZE}-mp-${MP_SIZE}-pp-${PP_SIZE}"
megatron_options=" \
        --tensor-model-parallel-size ${MP_SIZE} \
        --micro-batch-size ${BATCH_SIZE} \
        --global-batch-size ${GLOBAL_BATCH_SIZE} \
        --num-layers ${NUM_LAYERS} \
        --hidden-size ${HIDDEN_SIZE} \
        --num-attention-heads ${NUM_ATTN_HEADS} \
        --seq-length ${SEQ_LEN} \
        --max-position-embeddings ${SEQ_LEN} \
        --fp16 \
        --no-pipeline-parallel \
        --cpu-optimizer"
megatron_options="${megatron_options} \
        --checkpoint-activations"

template_json="ds_config_gpt_TEMPLATE.json"
config_json="ds_config_gpt_${NAME}.json"
sed "s/CONFIG_BATCH_SIZE/${GLOBAL_BATCH_SIZE}/" ${template_json} \
    | sed "s/CONFIG_MBSIZE/${BATCH_SIZE}/" \
    | sed "s/LOG_INTERVAL/1/" \
    | sed "s/CONFIG_FP16_ENABLED/false/" \
    | sed "s/CONFIG_BF16_ENABLED/true/" \
	  > ${config_json}

deepspeed_options=" \
		    --deepspeed \
		    --deepspeed_config ${config_json} \
		    --pipeline-model-parallel-size ${PP_SIZE}"
deepspeed_options="${deepspeed_options} \
        --deepspeed-activation-checkpointing"

run_cmd="deepspeed ${DIR}/../../pretrain_gpt.py ${megatron_options} ${deepspeed_options} &> ${DIR}/log.txt"
echo ${run_cmd}
eval ${run_cmd}
"""

TEMPLATE = """{
  "train_batch_size" : CONFIG_BATCH_SIZE,
  "train_micro_batch_size_per_gpu": CONFIG_MBSIZE,
  "steps_per_print": LOG_INTERVAL,
  "zero_optimization": {
    "stage": 3,
    "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": 0.3}
  },
  "gradient_clipping": 1.0,
  "prescale_gradients":false,
  "fp16": {"enabled": CONFIG_FP16_ENABLED, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2,
           "min_loss_scale": 1, "initial_scale_power": 11},
  "bf16": {"enabled": CONFIG_BF16_ENABLED},
  "wall_clock_breakdown" : false
}
"""

CONFIG = "ds_config_gpt_gpt-0.35B-bs-256-mp-1-pp-1.json"


def test_changes_name_the_launch_lines_flags_and_the_sed_written_ds_config_keys(tmp_path: Path, capsys,
                                                                                monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (tmp_path / "ds_pretrain_gpt_350M.sh").write_text(SCRIPT)
    (tmp_path / "ds_config_gpt_TEMPLATE.json").write_text(TEMPLATE)
    (tmp_path / "s.yaml").write_text("micro_batch_size: [4]\ntensor_parallel: [1]\npipeline_parallel: [1]\n"
                                     "recompute: [full]\nzero_stage: [1, 3]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--nnodes", "2", "--nproc-per-node", "8", "--format",
                              "json", "--search", "s.yaml", "--apply", "--dry-run", "--", "bash",
                              "ds_pretrain_gpt_350M.sh"], capsys)
    # the script's eval'd launch line does not pass "$@" on: --apply refuses it, after listing the changes
    assert code == 2 and "cannot rewrite a shell script" in err, err
    data = json.loads(out)
    best = next(r for r in data["top"] if r["changes"])
    changes = {(c["where"], c["key"]): (c["old"], c["new"]) for c in best["changes"]}
    tuned = CONFIG.replace(".json", ".llmperf-tuned.json")
    where = next(w for w, k in changes if k == "train_micro_batch_size_per_gpu")
    # the ds_config's ZeRO-3 (its offload ratio is ZeRO-3's twin offload) is the stage the search keeps
    assert changes == {("argv", "--micro-batch-size"): ("2", "4"), ("argv", "--deepspeed_config"): (CONFIG, tuned),
                       (where, "train_micro_batch_size_per_gpu"): ("2", "4")}
    assert best["zero_stage"] == 3 and best["micro_batch_size"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds_config_gpt_TEMPLATE.json", "ds_pretrain_gpt_350M.sh",
                                                          "s.yaml"]


def test_apply_writes_a_tuned_copy_where_the_launch_line_passes_its_arguments_on(tmp_path: Path, capsys,
                                                                                  monkeypatch) -> None:
    """The same script with "$@" on its launch line: --apply appends the flags and points --deepspeed_config at a
    tuned copy of the ds_config the sed pipeline writes; the template and the script are left as they were."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (tmp_path / "run.sh").write_text(SCRIPT.replace("${deepspeed_options} &>", '${deepspeed_options} "$@" &>'))
    (tmp_path / "ds_config_gpt_TEMPLATE.json").write_text(TEMPLATE)
    (tmp_path / "s.yaml").write_text("micro_batch_size: [4]\ntensor_parallel: [1]\npipeline_parallel: [1]\n"
                                     "recompute: [full]\nzero_stage: [1, 3]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--nnodes", "2", "--nproc-per-node", "8", "--search",
                              "s.yaml", "--apply", "--dry-run", "--", "bash", "run.sh"], capsys)
    tuned = CONFIG.replace(".json", ".llmperf-tuned.json")
    assert code == 0, err
    assert f"would run: bash run.sh --micro-batch-size 4 --deepspeed_config {tuned}" in out + err
    written = json.loads((tmp_path / tuned).read_text())
    assert written["train_micro_batch_size_per_gpu"] == 4 and written["zero_optimization"]["stage"] == 3
    assert written["train_batch_size"] == 256 and written["bf16"] == {"enabled": True}
    assert (tmp_path / "ds_config_gpt_TEMPLATE.json").read_text() == TEMPLATE
    assert not (tmp_path / CONFIG).exists()  # the sed output is the script's to write when it runs
