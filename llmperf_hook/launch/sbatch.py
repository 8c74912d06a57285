"""`sbatch [options] SCRIPT` -> the launch line inside SCRIPT, run in the allocation the options ask for.

What a user means by `llmperf predict -- sbatch job.sh` is "the job this script will run". sbatch
(slurm.schedmd.com/sbatch.html) reads `#SBATCH` lines at the top of the script, up to its first command, and
options on its own command line win over them. The script then runs on the first node with the allocation in
SLURM_* variables (SLURM_NNODES / SLURM_JOB_NUM_NODES, SLURM_NTASKS_PER_NODE, SLURM_NTASKS, SLURM_GPUS_ON_NODE),
which the srun or launcher line inside inherits. So: the allocation becomes those variables (only for what the
options state; the rest comes from the submitting environment, which sbatch exports by default), plain
`NAME=value` / `export NAME=value` lines of the script are applied in order, and the one launch line (srun,
torchrun, deepspeed, accelerate, mpirun, or python running a launcher module) is parsed in that environment; a
script without one but with one `python train.py` line runs that once, on the first node (one process).
A script with no such line, or several, exits 2 naming them: pass the line itself after `--`.
`llmperf run -- sbatch job.sh` still submits the script unchanged.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import replace
from typing import Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import unexpanded_hint
from llmperf_hook.launch.batch_script import read_batch_script
from llmperf_hook.launch.script_launch import ScriptLaunch
from llmperf_hook.launch.launch_line import is_launch
from llmperf_hook.launch.options import Grammar, Option, scan_options
from llmperf_hook.launch.posix_shell import script_shell
from llmperf_hook.launch.shell_script import ScriptLine, logical_lines, restore_dollars
from llmperf_hook.launch.slurm import SRUN_OPTIONS, export_items
from llmperf_hook.launch.slurm_default_nodes import default_node_count
from llmperf_hook.launch.slurm_node_count import NODE_RANGE_ENV, parse_node_counts
from llmperf_hook.launch.slurm_option_names import SBATCH_ARITY
from llmperf_hook.launch.standard_input import read_standard_input

SBATCH_OPTIONS: dict[str, Option] = {
    **SRUN_OPTIONS, "--wrap": Option("wrap"), "-a": Option("array"), "--array": Option("array"),
    "-d": Option("dependency"), "--dependency": Option("dependency"), "--mail-type": Option("mail_type"),
    "--mail-user": Option("mail_user"), "--gpus-per-socket": Option("gpus_per_socket"),
    "--requeue": Option("requeue", takes_value=False), "--parsable": Option("parsable", takes_value=False),
}
SBATCH_GRAMMAR = Grammar(SBATCH_ARITY, "getopt", "sbatch reads its options with getopt_long, src/common/slurm_opt.c",
                         strict=False)
"""sbatch's own options as Slurm reads them, on its command line and in #SBATCH lines alike: unique prefixes of long
options (`--nod=2` is ambiguous and stops sbatch; `--ntasks-per-n=8` is --ntasks-per-node) and sbatch's arities
(`-W`/`--wait` is a switch here, where srun's takes seconds)."""
SBATCH_JOB_ID = "llmperf-sbatch"
"""SLURM_JOB_ID given to the script's launch line: the job does not exist yet (sbatch has not run)."""
_TASK_LAYOUT = ("SLURM_NTASKS_PER_NODE", "SLURM_NTASKS", "SLURM_GPUS_ON_NODE")


def _read_script(path: str, what: str = "sbatch script") -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist (relative paths are read from {os.getcwd()}). Run llmperf "
                         "from the directory you launch from, or give the path.") from None
    except OSError as err:
        raise UsageError(f"cannot read {what} {path}: {err.strerror or err}.") from None


def shell_script_launch(path: str, env: dict[str, str], used: dict[str, str], args: Sequence[str] = (),
                        shell_word: str | None = None, text: str | None = None) -> ScriptLaunch:
    """`bash train.sh ARGS` (sh, zsh, dash: `shell_word`; or `./train.sh`, run by its #! line): the script's one
    launch line, read as for sbatch but without an allocation (Megatron-LM's example scripts, `bash examples/gpt3/
    train_gpt3_175b_distributed.sh ...`, size the job on their torchrun line). `text`: the script when the shell reads
    it from its standard input (`bash -s ARGS <<EOF`), `path` then naming where it came from."""
    text = _read_script(path, "shell script") if text is None else text
    return read_batch_script(logical_lines(text), env, used, path, "shell script", args, script_shell(shell_word, text))


def script_on_input(stdin: str | None, what: str) -> str:
    """The script a command reads from its standard input: `stdin` (a here-document the launch script gives it), else
    llmperf's own standard input; refused when there is none to read, or it is empty."""
    text = read_standard_input() if stdin is None else restore_dollars(stdin)  # the script's shell expands them
    if text is None:
        raise UsageError(f"{what} is given no script file, so it reads the script from its standard input, which is "
                         "a terminal here (or cannot be read). Give the script on llmperf's standard input (`llmperf "
                         "predict -- sbatch <<EOF` ... `EOF`, or `< job.sh`), or write it to a file and give its path.")
    if not text.strip():
        raise UsageError(f"{what} is given no script file and its standard input is empty, so it has no script to run. "
                         "Give the script there (a here-document `<<EOF` ... `EOF`), or give its path.")
    return text


_MAGIC_WORDS = ("#SBATCH", "#SLURM")
"""The prefixes of a directive line (src/sbatch/opt.c _opt_batch_script magic_word1/2; `#SLURM` is read too, with an
error message asking for #SBATCH, and any line starting with it is one, `#SLURM_X` included)."""


def _header_options(lines: list[ScriptLine], path: str) -> list[list[str]]:
    """#SBATCH words before the script's first command, read as sbatch's _opt_batch_script reads them (src/sbatch/
    opt.c): only a line that starts with `#SBATCH` (or `#SLURM`) in its first column is a directive (`  #SBATCH -N 2` is a comment);
    reading stops at the first line whose first non-blank character is not `#`; an unmatched quote stops sbatch. A
    heterogeneous job's `#SBATCH hetjob` (or `packjob`) line starts the next component: one word list per component."""
    components: list[list[str]] = [[]]
    words = components[0]
    for line in lines:
        stripped = line.text.strip()
        magic = next((word for word in _MAGIC_WORDS if line.text.startswith(word)), "")
        if magic:
            try:
                directive = shlex.split(line.text[len(magic):], comments=True)
            except ValueError:
                raise UsageError(f"sbatch would stop: {path} line {line.number} has an unmatched quote in "
                                 f"{stripped!r} (sbatch: 'Unmatched quote'). Close the quote.") from None
            if directive and directive[0].lower() in ("hetjob", "packjob"):
                words = []
                components.append(words)
                directive = directive[1:]
            words += directive
        elif stripped and not stripped.startswith("#"):
            break
    return components


def _directive_line(lines: list[ScriptLine], path: str) -> str:
    """`PATH line N (`#SBATCH ...`)`: the last #SBATCH line of the first component giving -N / --nodes (the last one
    wins, as for any option given twice)."""
    found = ""
    for line in lines:
        if re.match(r"#(?:SBATCH|SLURM)\s+(?:hetjob|packjob)\b", line.text, re.IGNORECASE):
            break
        if re.match(r"#(?:SBATCH|SLURM)\s.*(?:--nodes\b|-N\s*\d)", line.text):
            found = f"{path} line {line.number} (`{line.text.strip()[:60]}`)"
    return found


def _header_values(lines: list[ScriptLine], path: str) -> list[dict[str, str]]:
    """The #SBATCH options of each component (one for a job that is not heterogeneous); a word that is not an option
    stops sbatch ('Invalid directive found in batch script')."""
    out = []
    for words in _header_options(lines, path):
        header = scan_options(words, 0, SBATCH_OPTIONS, f"sbatch script {path} #SBATCH", SBATCH_GRAMMAR)
        if header.rest < len(words):
            raise UsageError(f"sbatch would stop: {path} has #SBATCH {words[header.rest]!r}, which is not an option "
                             "(sbatch: 'Invalid directive found in batch script'). Write it as an option, or remove it.")
        out.append(header.values)
    return out


def _het_groups(components: list[dict[str, str]], path: str) -> dict[str, str]:
    """A heterogeneous job's per-component variables: each allocation variable again with `_HET_GROUP_<k>` appended
    (Slurm heterogeneous_jobs.html, Environment Variables), the plain names being component 0's, where the script
    runs; srun --het-group=k reads component k's (slurm.het_group_env)."""
    if len(components) < 2:
        return {}
    out: dict[str, str] = {}
    for k, values in enumerate(components):
        _check_counts(values, f"{path} (hetjob component {k})")
        out.update({f"{name}_HET_GROUP_{k}": value for name, value in _allocation_env(values).items()})
    return out


_COUNTS = {"ntasks": (re.compile(r"\d+"), "--ntasks", 'Invalid numeric value "{}" for --ntasks.'),
           "ntasks_per_node": (re.compile(r"\d+"), "--ntasks-per-node",
                               'Invalid numeric value "{}" for --ntasks-per-node.')}
"""The allocation's counts as sbatch reads them before submitting (src/common/proc_args.c verify_node_count, and
parse_int for the task counts, both exit on an error): a value the script left as a placeholder (`#SBATCH
--nodes=your_own_num_nodes`, Megatron-LM's examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh) stops sbatch."""


_ARRAY = ("--array={spec} ({path}) submits a job array: one job per index, each with this allocation, run as Slurm "
          "finds room (sbatch(1) --array). llmperf priced one array task's job; the tasks do not share a step.")
_ZERO_NODES = ("Slurm would refuse the job: --nodes={value} ({where}) asks for "
               "no node (sbatch: 'Batch job submission failed: Node count specification invalid'). slurmctld takes a "
               "zero-node job only to create or destroy a persistent burst buffer, which runs the script on no node "
               "(job_mgr.c: 'Zero node count OK for persistent burst buffer create or destroy'; node_scheduler.c "
               "select_nodes). Give the number of nodes the job trains on (#SBATCH --nodes=N, N >= 1).")
"""sbatch itself accepts -N 0 (verify_node_count); the controller rejects the job (ESLURM_INVALID_NODE_COUNT)."""


def _check_counts(values: dict[str, str], path: str, where: str = "") -> None:
    """sbatch's checks of the counts; `where` says which line or option gave --nodes."""
    if "nodes" in values:
        try:
            counts = parse_node_counts(values["nodes"])
        except ValueError as err:
            raise UsageError(f"sbatch would stop: --nodes={values['nodes']} (its command line or the #SBATCH lines of "
                             f"{path}) is not a node count (sbatch: '{err}'){unexpanded_hint(values['nodes'])}. Give "
                             "a count, a MIN-MAX range or a list of counts.") from None
        if counts.high == 0:  # `0`; `0,4` lets Slurm start it on up to 4
            raise UsageError(_ZERO_NODES.format(value=values["nodes"], where=where or f"the #SBATCH lines of {path}"))
    for dest, (valid, option, said) in _COUNTS.items():
        value = values.get(dest)
        if value is not None and not valid.fullmatch(value.strip()):
            raise UsageError(f"sbatch would stop: {option}={value} (its command line or the #SBATCH lines of {path}) "
                             f"is not a count (sbatch: '{said.format(value)}'){unexpanded_hint(value)}. Give the "
                             "number.")


def _allocation_env(values: dict[str, str]) -> dict[str, str]:
    """The SLURM_* variables the batch step sees for what the sbatch options state."""
    env: dict[str, str] = {"SLURM_JOB_ID": SBATCH_JOB_ID, "SLURM_JOBID": SBATCH_JOB_ID}  # and its older name
    # the count the job gets: llmperf prices the most --nodes allows (slurm_node_count.py); without it, what the
    # other options imply (slurm_default_nodes.py)
    nodes = str(parse_node_counts(values["nodes"]).assumed if "nodes" in values else default_node_count(values)[0])
    env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = nodes
    if "ntasks_per_node" in values:
        env["SLURM_NTASKS_PER_NODE"] = values["ntasks_per_node"]
    if "ntasks" in values:
        env["SLURM_NTASKS"] = values["ntasks"]
    elif _digits(values.get("ntasks_per_node")):  # sbatch(1) SLURM_NTASKS: "if any of the --ntasks-per-* options
        env["SLURM_NTASKS"] = str(int(nodes) * int(_digits(values["ntasks_per_node"])))  # are specified, set to the
        # number of tasks in the job" (slurmctld job_mgr.c: num_tasks = min_nodes * ntasks_per_node)
    for dest, name in (("gpus_per_node", "SLURM_GPUS_PER_NODE"), ("gpus", "SLURM_GPUS")):
        if values.get(dest):  # sbatch(1): "Only set if the --gpus-per-node option is specified" (-G for SLURM_GPUS)
            env[name] = values[dest]
    gpus = values.get("gpus_per_node") or (values["gres"] if "gpu" in values.get("gres", "") else None)
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = gpus.split(",")[0].split(":")[-1]
    elif _digits(values.get("gpus_per_task")) and _digits(values.get("ntasks_per_node")):
        env["SLURM_GPUS_ON_NODE"] = str(int(_digits(values["gpus_per_task"])) * int(_digits(values["ntasks_per_node"])))
    elif _digits(values.get("gpus")):  # -G total over the nodes
        env["SLURM_GPUS_ON_NODE"] = str(-(-int(_digits(values["gpus"])) // max(int(nodes), 1)))
    return env


def _digits(value: str | None) -> str:
    """The count of a GPU option ("h100:8" -> "8"), or "" when it is not a number."""
    text = (value or "").split(",")[0].split(":")[-1]
    return text if text.isdigit() else ""


_INPUT_ENV = {"SBATCH_GPUS_PER_NODE": "gpus_per_node", "SBATCH_GPUS": "gpus", "SBATCH_GRES": "gres",
              "SBATCH_GPUS_PER_TASK": "gpus_per_task", "SBATCH_EXPORT": "export"}
"""The SBATCH_* input variables that size the allocation or choose the script's environment (src/sbatch/opt.c
env_vars: the same as --gpus-per-node, -G/--gpus, --gres, --gpus-per-task, --export); sbatch has none for the node
or task counts."""


def _job_environment(export: str, env: dict[str, str], used: dict[str, str]) -> None:
    """The environment the batch script starts with under `--export=VALUE` (src/sbatch/sbatch.c
    _fill_job_desc_from_opts, env.c env_merge_filter), `env` replaced in place. ALL (the default): the submitting
    environment. NONE / NIL: only its SLURM* variables (env_array_merge_slurm_spank). A list: its items in order, each
    overwriting the one before (`NAME=value`, `NAME` with the submitting value, `ALL` the whole submitting
    environment), then the SLURM* variables. NONE and a list also load the user's login environment on the node
    (get_user_env), which llmperf cannot read. Any mode but ALL also sets SLURM_EXPORT_ENV to the value unless it is
    set (opt.c _opt_verify, setenv without overwrite), which the script's srun reads as its own --export: with NONE
    the script's own exports reach no srun task unless it sets SLURM_EXPORT_ENV=ALL (sbatch.html --export=NONE)."""
    if export.upper() == "ALL":
        return
    submitting = {**env}
    submitting.setdefault("SLURM_EXPORT_ENV", export)
    job: dict[str, str] = {}
    for item in export_items(export) if export.upper() not in ("NONE", "NIL") else []:
        name, eq, value = item.partition("=")
        if item.upper() == "ALL":
            job.update(submitting)
        elif eq:
            job[name] = used[name] = value
        elif name in submitting:
            job[name] = submitting[name]
    job.update({name: value for name, value in submitting.items() if name.startswith("SLURM")})
    env.clear()
    env.update(job)


def _input_env(env: dict[str, str], used: dict[str, str]) -> dict[str, str]:
    """The sbatch options the submitting environment's SBATCH_* variables give."""
    found = {dest: env[name] for name, dest in _INPUT_ENV.items() if env.get(name, "").strip()}
    used.update({name: env[name] for name in _INPUT_ENV if env.get(name, "").strip()})
    return found


def sbatch_launch(words: Sequence[str], i: int, env: dict[str, str], used: dict[str, str],
                  stdin: str | None = None) -> ScriptLaunch:
    """The launch sbatch's script (or --wrap command) runs; `env` gains the allocation and the script's assignments.
    Without a script file sbatch reads the script from its standard input: `stdin` (the here-document of a launch
    script's `sbatch <<EOF`), else llmperf's own standard input. Command-line options win over SBATCH_* input
    variables, which win over #SBATCH lines (sbatch.html, INPUT ENVIRONMENT VARIABLES)."""
    cli = scan_options(words, i + 1, SBATCH_OPTIONS, "sbatch", SBATCH_GRAMMAR)
    if "wrap" in cli.values and cli.rest < len(words):
        raise UsageError(f"sbatch would stop: --wrap is given with {words[cli.rest]!r} after it (sbatch: 'Script "
                         "arguments not permitted with --wrap option'). Give either --wrap \"CMD\" or a script.")
    given = {**_input_env(env, used), **cli.values}
    het: dict[str, str] = {}  # a heterogeneous job's components (_het_groups)
    if "wrap" in cli.values:  # sbatch wraps the command in a `#!/bin/sh` script (the last --wrap wins), whose shell
        # expands a `$` that was literal where the sbatch line was written (`--wrap 'srun ... $SLURM_NNODES'`)
        lines, path, header = logical_lines(restore_dollars(cli.values["wrap"])), "--wrap", given
        shell = script_shell("/bin/sh", "")
    else:
        path = words[cli.rest] if cli.rest < len(words) else "(standard input)"
        text = _read_script(path) if cli.rest < len(words) else script_on_input(stdin, "sbatch")
        lines, shell = logical_lines(text), script_shell(None, text)
        components = _header_values(lines, path)
        header = {**components[0], **given}  # the command line's options are the first component's
        het = _het_groups([header, *components[1:]], path)
    if "export" in header:
        _job_environment(header["export"], env, used)
    _check_counts(header, path, "sbatch's command line" if "nodes" in given else _directive_line(lines, path))
    allocation = {**_allocation_env(header), **het}
    env.update(allocation)
    used.update(allocation)
    if "nodes" in header:  # a MIN-MAX range: the fewest, for a step the allocation sizes (slurm.py), not the job's
        env[NODE_RANGE_ENV] = header["nodes"]
    script_args = words[cli.rest + 1:] if "wrap" not in cli.values else ()
    launch = read_batch_script(lines, env, used, path, args=script_args, shell=shell)
    where = "sbatch's command line" if "nodes" in given else f"#SBATCH in {path}"
    assumed = parse_node_counts(header["nodes"]).warning(f"--nodes={header['nodes']}", where) \
        if "nodes" in header else default_node_count(header)[2]
    launch = replace(launch, warnings=(*launch.warnings, assumed)) if assumed else launch
    if header.get("array"):  # sbatch(1) --array: one job per index, each with the whole allocation asked for
        launch = replace(launch, warnings=(*launch.warnings, _ARRAY.format(spec=header["array"], path=path)))
    if not is_launch(launch.words, " ".join(launch.words), launch.stdin):  # a bare python runs once, not as the tasks
        for name in _TASK_LAYOUT:
            if name in allocation:
                env.pop(name, None)
                used.pop(name, None)
    return launch
