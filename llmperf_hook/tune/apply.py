"""`tune --apply`: the user's launch command rewritten for the chosen candidate (and a new ds_config if needed).

Megatron flags are replaced in argv (tune/megatron_argv.py); a DeepSpeed config is never edited in place:
a tuned copy is planned next to it (`ds.llmperf-tuned.json`, or `-2`, `-3`, ... if taken) and argv is
pointed at the copy. `plan_tuned_command` only reads; `write_planned_files` is the one place that writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from llmperf_hook.errors import LlmperfError, UsageError
from llmperf_hook.frameworks.deepspeed_chat import ORIGIN as DS_CHAT
from llmperf_hook.frameworks.openrlhf import ORIGIN as OPENRLHF, rewrite_openrlhf_argv
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.launch.options import scan_options
from llmperf_hook.launch.parse import _shell_script_index, parse_launch, shell_command_index
from llmperf_hook.launch.parsed_job import ParsedJob, ScriptFile
from llmperf_hook.tune.accelerate_apply import accelerate_options_span, rewrite_accelerate_job
from llmperf_hook.tune import ds_config_rewrite as dsr
from llmperf_hook.tune.candidate import Candidate, candidate_of, hf_batch_flags, moe_whole_pipe_sends, split_layers
from llmperf_hook.tune.command_string import rewrite_command_string, shell_join as _shell_join, training_words
from llmperf_hook.tune.accelerate_fsdp_apply import plugin_checkpointing, plugin_checkpointing_off
from llmperf_hook.tune.fsdp_config_apply import checkpointing_off, switchable_fsdp_config
from llmperf_hook.tune.megatron_argv import rewrite_megatron_argv

MEGATRON = ("megatron", "megatron-deepspeed")


@dataclass(frozen=True)
class TunedCommand:
    """The launch command to run instead of the user's."""

    argv: tuple[str, ...]
    new_files: Mapping[str, str] = field(default_factory=dict)
    """Path -> content of files to create before launching (never existing files)."""
    notes: tuple[str, ...] = ()
    """What changed where, one line each, for the report."""
    launch_refusal: str | None = None
    """Why --apply must neither write nor launch this command (the layout was tuned for another world size)."""


def _split_joined(argv: Sequence[str]) -> list[str]:
    from llmperf_hook.launch.argv_words import split_joined_words  # issue 2's normaliser, same words as parsed

    return split_joined_words(list(argv))


def expand_flag_variables(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """`$GPT_ARGS` (a variable holding several flags, left unexpanded) -> its flags, as the parser read them: a
    flag inside the variable can only be changed or dropped once it is a word of its own (appending a later
    `--micro-batch-size` wins by argparse's last-wins rule, but `--use-distributed-optimizer` or
    `--recompute-granularity full` inside the variable stayed on while the tuned layout had them off).
    A variable holding one value (`--tensor-model-parallel-size $TP`) stays as written."""
    import os

    from llmperf_hook.launch.argv_words import expand_env_refs

    env = os.environ if env is None else env
    out: list[str] = []
    for word in argv:
        expanded = expand_env_refs(word, env, {}) if "$" in word else word
        if expanded != word and expanded.strip().startswith("-") and any(c.isspace() for c in expanded.strip()):
            try:
                out.extend(shlex.split(expanded))
            except ValueError:
                out.extend(expanded.split())
        else:
            out.append(word)
    return out


def _shell_command_index(argv: Sequence[str]) -> int | None:
    """Index of CMD in `... sh -c CMD ...` (srun ... sh -c "python pretrain_gpt.py ...", bash -x -c CMD, bash -o
    pipefail -c CMD), where the flags live: the word the parser reads the command from."""
    return next((k for i in range(len(argv)) if (k := shell_command_index(argv, i)) is not None), None)


def _wrap_index(argv: Sequence[str]) -> int | None:
    """Index of the word holding CMD in `sbatch [opts] --wrap CMD` / `--wrap=CMD`: sbatch runs CMD with sh as the
    job's script, so the training command is in argv, where it is rewritten as inside `sh -c`. Only sbatch's own
    options are looked at, as the parser reads them (launch/sbatch.sbatch_launch: up to the script): a `--wrap`
    among a script's arguments (`sbatch job.sh --wrap X`) is the script's."""
    i = next((i for i, word in enumerate(argv) if os.path.basename(word) == "sbatch"), None)
    if i is None:
        return None
    from llmperf_hook.launch.sbatch import SBATCH_GRAMMAR, SBATCH_OPTIONS  # the shell-script reader: sbatch only

    try:
        rest = scan_options(argv, i + 1, SBATCH_OPTIONS, "sbatch", SBATCH_GRAMMAR).rest  # `sbatch -W job.sh`: a switch
    except LlmperfError:
        return None
    for k in range(i + 1, rest):
        if argv[k] == "--wrap" and k + 1 < rest:
            return k + 1
        if argv[k].startswith("--wrap="):
            return k
    return None


def command_string_index(argv: Sequence[str]) -> int | None:
    """Index of the word holding CMD in `sh -c CMD` / `sbatch --wrap CMD` (None for any other command)."""
    k = _shell_command_index(argv)
    return _wrap_index(argv) if k is None else k


def launch_words(argv: Sequence[str]) -> list[str]:
    """The words whose flags a change list compares: inside `sh -c CMD` / `sbatch --wrap CMD`, CMD's training command
    (flags in one word are no flags to compare: every row read 'no flag of your command sets it'); else `argv`."""
    k = command_string_index(argv)
    if k is None:
        return list(argv)
    words = training_words(argv[k].removeprefix("--wrap="))
    return list(argv) if words is None else words


def script_index(words: Sequence[str]) -> int | None:
    """Where the training script stands in `words` as the launch parser reads them (the launcher's options before
    it, the script's flags after), or None when it cannot tell."""
    try:
        job = parse_launch(list(words), dict(os.environ))
    except LlmperfError:
        return None
    return list(words).index(job.script) if job.script in words else None


def plan_tuned_command(argv: Sequence[str], base_cfg: TrainingConfig, new: Candidate,
                       new_cfg: TrainingConfig, cwd: Path | None = None) -> TunedCommand:
    """The rewritten command (below), marked not launchable when llmperf's --nnodes / --nproc-per-node sized
    the search differently from what the command itself starts."""
    plan = _plan_tuned_command(argv, base_cfg, new, new_cfg, cwd)
    refusal = size_override_refusal(argv, base_cfg)
    return TunedCommand(plan.argv, plan.new_files, plan.notes, refusal) if refusal else plan


def size_override_refusal(argv: Sequence[str], cfg: TrainingConfig) -> str | None:
    """`tune --nproc-per-node 6 --apply -- torchrun --nproc-per-node 8 ...` searched layouts of 6 GPUs but would
    launch 8 processes (a tuned --micro-batch-size 8 at GBS 48 then fails Megatron's GBS % (MBS*DP) check).
    None when no override changed the size, or when the command does not say it (the override does)."""
    given = [k for k in ("nnodes", "nproc_per_node") if str(cfg.sources.get(k, "")).startswith("llmperf option")]
    if not given:
        return None
    try:
        own = parse_launch(list(argv), dict(os.environ))
    except LlmperfError:
        return None
    if own.world_size == cfg.world_size:
        return None
    options = ", ".join(f"--{k.replace('_', '-')} {getattr(cfg, k)}" for k in given)
    return (f"tune --apply: the layouts were searched for {cfg.world_size} GPUs ({options} given to llmperf), but the "
            f"command starts {own.world_size} process(es) ({own.nnodes} node(s) x {own.nproc_per_node}); launched as "
            "written, the tuned layout would run on the wrong number of GPUs, where Megatron or DeepSpeed may refuse "
            "it. Put the size in the launch command itself and tune again, or drop --apply and make the changes "
            "listed above by hand.")


def _plan_tuned_command(argv: Sequence[str], base_cfg: TrainingConfig, new: Candidate,
                        new_cfg: TrainingConfig, cwd: Path | None = None,
                        written: Mapping[str, ScriptFile] | None = None) -> TunedCommand:
    """Rewrite `argv` (the command as the user gave it) so that the framework runs `new`; a training command
    passed to `sh -c` or `sbatch --wrap` as one word is rewritten inside that word; for `sbatch job.sh` the script's launch line is
    (what the user edits by hand; --apply appends its changes to the script's arguments only where the script passes
    them on: tune/script_forward.py). `written`: the files that script writes before its launch line (a ds_config
    from a here-document), read as explain reads them instead of the disk."""
    job = batch_script_job(argv, (base_cfg.nnodes, base_cfg.nproc_per_node))
    if job is not None:  # the script's launch line, as the user edits it (and a tuned copy of its ds_config)
        words = [job.script, *job.script_args]
        inner = _plan_tuned_command(words, base_cfg, new, new_cfg, cwd, job.script_files)
        return TunedCommand(inner.argv, inner.new_files, (*inner.notes, "the launch line inside the script"))
    k = command_string_index(argv)
    if k is not None:  # only CMD's training command is rewritten, in place (tune/command_string.py)
        prefix = "--wrap=" if argv[k].startswith("--wrap=") else ""
        text = argv[k][len(prefix):]
        words = training_words(text)
        inner = _plan_tuned_command(shlex.split(text) if words is None else words, base_cfg, new, new_cfg, cwd, written)
        cmd = _shell_join(inner.argv) if words is None else rewrite_command_string(text, inner.argv)
        return TunedCommand((*argv[:k], prefix + cmd, *argv[k + 1:]), inner.new_files, inner.notes)
    base = candidate_of(base_cfg)
    if plugin_checkpointing(base_cfg) and new.recompute != base.recompute:  # switched in accelerate's launcher
        kept = dataclasses.replace(new, recompute=base.recompute, recompute_num_layers=base.recompute_num_layers)
        plan = _plan_tuned_command(argv, base_cfg, kept, new_cfg, cwd, written)
        notes = list(plan.notes)
        out, files = plugin_checkpointing_off(plan.argv, cwd or Path.cwd(), notes)
        return TunedCommand(argv=tuple(out), new_files={**plan.new_files, **files}, notes=tuple(notes))
    out = _split_joined(expand_flag_variables(argv))
    notes: list[str] = []
    if base_cfg.framework in MEGATRON:
        rewritten = _rewrite_megatron_flags(out, base_cfg, new)
        if rewritten != out:
            notes.append("Megatron flags replaced in argv")
        out = rewritten
    files: dict[str, str] = {}
    if base_cfg.framework == "deepspeed" and DS_CHAT in str(base_cfg.sources.get("zero_stage", "")):
        chat = dsr.rewrite_ds_chat_argv(out, base, new, new_cfg.batch.num_microbatches)
        if chat != out:
            notes.append("DeepSpeed-Chat flags replaced in argv (its ds_config is built from them)")
        return TunedCommand(argv=tuple(chat), notes=tuple(notes))
    if base_cfg.framework == "deepspeed" and OPENRLHF in str(base_cfg.sources.get("zero_stage", "")):
        rlhf = rewrite_openrlhf_argv(out, new.micro_batch_size, new.zero_stage, new.recompute != "none")
        if rlhf != out:
            notes.append("OpenRLHF flags replaced in argv (DeepspeedStrategy builds its ds_config from them)")
        return TunedCommand(argv=tuple(rlhf), notes=tuple(notes))
    span = accelerate_options_span(out) if base_cfg.framework == "hf-deepspeed" else None
    if span is not None and dsr.find_ds_config(out[span[1]:]) is None:  # the DeepSpeed plugin of accelerate launch
        batch = (new_cfg.batch.num_microbatches, new_cfg.batch.global_batch_size)
        out, files = rewrite_accelerate_job(out, span, base, new, batch, cwd or Path.cwd(), notes)
        return TunedCommand(argv=tuple(out), new_files=files, notes=tuple(notes))
    if base_cfg.framework == "torch" and hf_batch_flags(base_cfg):  # no ds_config: the Trainer's flags alone, the
        # script's, never `accelerate launch --gradient_accumulation_steps` (the Trainer hands Accelerator its own
        # GradientAccumulationPlugin, so the launcher's value is not the job's)
        span = accelerate_options_span(out)
        cut = span[1] if span is not None else 0
        fsdp = switchable_fsdp_config(out[cut:], cwd)  # FSDP's own checkpointing on: switched in its config
        switch = dataclasses.replace(new, recompute=base.recompute, recompute_num_layers=base.recompute_num_layers)
        hf = out[:cut] + dsr.rewrite_hf_argv(out[cut:], base, switch if fsdp else new, new_cfg.batch.num_microbatches)
        if hf != out:
            notes.append("Hugging Face Trainer flags replaced in argv")
        if fsdp is not None and new.recompute == "none" != base.recompute:
            tail, files = checkpointing_off(hf[cut:], fsdp, cwd or Path.cwd(), notes)
            return TunedCommand(argv=tuple(hf[:cut] + tail), new_files=files, notes=tuple(notes))
        return TunedCommand(argv=tuple(hf), notes=tuple(notes))
    ref = dsr.find_ds_config(out)
    if ref is not None and base_cfg.framework != "megatron":
        out, files = _retarget_ds_config(out, ref, base, new, new_cfg, base_cfg.framework, cwd or Path.cwd(), notes,
                                         (written or {}).get(os.path.normpath(ref.path)))
    return TunedCommand(argv=tuple(out), new_files=files, notes=tuple(notes))


def batch_script_job(argv: Sequence[str], size: tuple[int | None, int | None] = (None, None)) -> ParsedJob | None:
    """`sbatch [opts] job.sh` / `bash train.sh` as the parser reads it, or None for any other command: its launch line
    (the training script and its flags, variables expanded) and the files the script writes before it
    (ParsedJob.script_files). Diffing or rewriting the outer argv itself listed every tuned flag as 'add' and never a
    flag to drop (--recompute-activations in the script stayed on while the tuned layout had recompute off).
    `size`: llmperf's --nnodes / --nproc-per-node (the resolved job's), for a launch line that does not say its size
    (`deepspeed pretrain_gpt.py ...` without --num_gpus, Megatron-DeepSpeed's examples_deepspeed): without them the
    parse failed, and the diff compared the tuned launch line against `bash train.sh` itself (every flag 'add', the
    ds_config the script writes never read, so its keys were never listed)."""
    if script_file_kind(argv) is None:
        return None
    job = parse_sized(argv, size)
    return job if job is not None and is_batch_script(argv, job.script) else None


def parse_sized(argv: Sequence[str], size: tuple[int | None, int | None]) -> ParsedJob | None:
    """`argv` parsed as the launch parser reads it; where that fails, with `size` (llmperf's --nnodes /
    --nproc-per-node, the resolved job's) as overrides, as tune resolved it; None when neither parses."""
    for given in ((None, None), size):
        try:
            return parse_launch(list(argv), dict(os.environ), *given)
        except LlmperfError:
            if given == size:
                return None
    return None


def script_file_kind(argv: Sequence[str]) -> str | None:
    """'sbatch script' for `sbatch job.sh`, 'shell script' for `bash [-x] train.sh` / `sh train.sh` / `./train.sh` (how
    Megatron-LM's README runs examples/gpt3/train_gpt3_175b_distributed.sh), else None: the launch line lives in a
    file, where --apply's flags never reach it."""
    if any(os.path.basename(word) == "sbatch" for word in argv):
        return None if _wrap_index(argv) is not None else "sbatch script"  # --wrap CMD: the command is in argv
    for i, word in enumerate(argv):
        if any(c.isspace() for c in word) or word.startswith("-"):  # `sh -c "CMD"`'s CMD (rewritten in place), options
            continue
        if _shell_script_index(argv, i) is not None:  # the launch parser's rule: not `bash -c CMD`, not `bash -s`
            return "shell script"
    return None


def is_batch_script(argv: Sequence[str], script: str) -> bool:
    """`sbatch job.sh` or `bash train.sh`: the training script (`script`, as parsed) is not in the argv but inside
    the script file that runs it, which --apply does not rewrite (flags appended to the outer argv reach the script as
    $1 ...: applied only where it passes them on, tune/script_forward.py)."""
    return script not in argv and script_file_kind(argv) is not None


def _rewrite_megatron_flags(words: list[str], base_cfg: TrainingConfig, new: Candidate) -> list[str]:
    """`words` with the Megatron flags of `new`, the layer count split over stages and the global batch the search
    held taken from the user's configuration."""
    return rewrite_megatron_argv(words, candidate_of(base_cfg), new, split_layers(base_cfg), base_cfg.framework,
                                 (base_cfg.world_size, base_cfg.batch.global_batch_size), _parser_has_zero_stage(words))


def _parser_has_zero_stage(words: list[str]) -> bool:
    """False where the training script's parser lacks --zero-stage (a user's own argparse, tune/fork_knobs): its stage
    goes in the tuned ds_config only, as the search priced it; True where the command cannot be read."""
    from llmperf_hook.tune.fork_knobs import fork_parser

    try:
        job = parse_launch(list(words), dict(os.environ))
    except LlmperfError:
        return True
    parser = fork_parser(job.script, job.script_args)
    return parser is None or parser.has("zero-stage") or not parser.zero_in_ds_config


def _retarget_ds_config(argv: list[str], ref: dsr.DsConfigRef, base: Candidate, new: Candidate,
                        new_cfg: TrainingConfig, framework: str, cwd: Path, notes: list[str],
                        written: ScriptFile | None = None) -> tuple[list[str], dict[str, str]]:
    """`written`: the launch script writes this ds_config before launching (its here-document is the content)."""
    if new == base:  # the command's own layout: its ds_config runs as it is
        return argv, {}
    inline = dsr.inline_form(ref.path, ref.flag == dsr.HF_DEEPSPEED_FLAG)
    original = Path(ref.path) if Path(ref.path).is_absolute() or inline else cwd / ref.path
    raw = dsr.read_as_given(ref) if inline else dsr.read_ds_config(original, written)
    num_mb = new_cfg.batch.num_microbatches
    tuned = dsr.tuned_ds_config(raw, new, num_mb, set_zero=new.zero_stage != base.zero_stage,
                                global_batch_size=new_cfg.batch.global_batch_size, auto_filled=framework != "deepspeed")
    recompute_changed = (new.recompute, new.recompute_num_layers) != (base.recompute, base.recompute_num_layers)
    if framework == "megatron-deepspeed" and recompute_changed and dsr.release_pipeline_interval(tuned):
        notes.append("ds_config pipeline.activation_checkpoint_interval set to 0: the Megatron recompute flags decide")
    p = new_cfg.parallel
    if moe_whole_pipe_sends(new_cfg, p.tp, p.pp, new_cfg.deepspeed_pipeline_engine) and dsr.whole_pipe_sends(tuned):
        notes.append("ds_config pipeline.pipe_partitioned and grad_partitioned set to false: an MoE model at TP > 1 "
                     "and PP > 1 under DeepSpeed's PipelineEngine runs only so (Megatron-DeepSpeed GPTModelPipe)")
    if framework == "hf-deepspeed" and dsr.trainer_fills_accumulation(tuned, num_mb):
        notes.append("ds_config gradient_accumulation_steps \"auto\" added: the Trainer fills it from the rewritten "
                     "--gradient_accumulation_steps (without it accelerate writes 1 and deepspeed.initialize asserts "
                     "train_batch_size == micro x 1 x world)")
    if framework == "hf-deepspeed":
        hf = dsr.rewrite_hf_argv(argv, base, new, num_mb)
        if hf != argv:
            notes.append("Hugging Face Trainer flags replaced in argv")
        argv = hf
    if tuned == raw:
        return argv, {}
    word = dsr.inline_tuned_word(ref, tuned)
    if word is not None:  # base64 / JSON in argv: rewritten in the same form, no file (dsr.inline_tuned_word)
        notes.append(f"DeepSpeed config given in argv ({inline}) replaced by the tuned one, in the same form")
        return dsr.point_argv_at(argv, ref, word), {}
    content = json.dumps(tuned, indent=2) + "\n"
    target = dsr.fresh_path(original, content)
    shown = str(Path(ref.path).parent / target.name) if not Path(ref.path).is_absolute() else str(target)
    if target.exists():  # the same tuned copy from an earlier run: reused, not written again
        notes.append(f"DeepSpeed config {shown} (the tuned copy of {ref.path} an earlier run wrote, reused)")
        return dsr.point_argv_at(argv, ref, shown), {}
    notes.append(f"new DeepSpeed config {shown} (copy of {ref.path}; the original is untouched)")
    return dsr.point_argv_at(argv, ref, shown), {str(target): content}


def write_planned_files(cmd: TunedCommand) -> None:
    """Create the planned files; refuses to overwrite (exclusive create), so a user's file is never touched.
    The one step every --apply (dry run or launch) passes first: a command planned not launchable stops here."""
    if cmd.launch_refusal:
        raise UsageError(cmd.launch_refusal)
    for path, content in cmd.new_files.items():
        with open(path, "x", encoding="utf-8") as fh:
            fh.write(content)
