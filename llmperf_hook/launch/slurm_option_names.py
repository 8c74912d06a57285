"""Every option Slurm's sbatch and srun accept, with its getopt_long arity, for reading them as Slurm does.

Generated (not hand-written) from SchedMD/slurm 284c3b9 (2026-08-20) src/common/slurm_opt.c: each `slurm_cli_opt_t`
of `common_options` with a name, for the client whose set function it has (`set_func`: every client; `set_func_sbatch`,
`set_func_srun`), its `--name` and, where `val` is a character, its short option `-X`; arity from `has_arg`
(required_argument "1", no_argument "0", optional_argument "?": a value only as `--name=value` or `-Xvalue`). Both
clients read their command line with getopt_long and the option string "+..." (slurm_option_table_create): option
processing stops at the first word that is not an option, and a long option may be abbreviated to any unique prefix.
SPANK plugins add options on a site (pyxis's --container-image ...); PYXIS lists pyxis's (NVIDIA/pyxis args.c), the
ones Megatron-LM's and NeMo's Slurm scripts use.
"""

from __future__ import annotations


def _table(by_arity: dict[str, str]) -> dict[str, str]:
    return {name: arity for arity, names in by_arity.items() for name in names.split()}


PYXIS = _table({
    "1": "--container-image --container-mounts --container-workdir --container-name --container-save --container-env",
    "0": "--container-mount-home --no-container-mount-home --container-remap-root --no-container-remap-root "
         "--container-entrypoint --no-container-entrypoint --container-writable --container-readonly",
})
"""pyxis's SPANK options (NVIDIA/pyxis args.c); with CSCS's --environment (its EDF plugin) the plugin options llmperf's
srun/sbatch tables read."""

SBATCH_ARITY: dict[str, str] = {**_table({
    "1": """
-A -B -C -D -F -G -J -L -M -N -S -a -b -c -d -e -i -m -n -o -p -q -t -w -x --account --acctg-freq --array
--autocomplete --batch --bb --bbf --begin --chdir --cluster --cluster-constraint --clusters --comment --constraint
--container --container-id --context --core-spec --cores-per-socket --cpu-freq --cpus-per-gpu --cpus-per-task
--deadline --delay-boot --dependency --distribution --error --exclude --export --export-file --extra --extra-node-
info --gid --gpu-bind --gpu-freq --gpus --gpus-per-node --gpus-per-socket --gpus-per-task --gres --gres-flags --hint
--input --job-name --kill-on-invalid-dep --licenses --mail-type --mail-user --mcs-label --mem --mem-bind --mem-per-
cpu --mem-per-gpu --mem-update --mincpus --network --nodefile --nodelist --nodes --ntasks --ntasks-per-core
--ntasks-per-gpu --ntasks-per-node --ntasks-per-socket --ntasks-per-tres --open-mode --output --partition --prefer
--priority --profile --qos --reservation --resources --runtime --segment --signal --sockets-per-node --switches
--tasks-per-node --thread-spec --threads-per-core --time --time-min --tmp --tres-bind --tres-per-task --uid --wait-
all-nodes --wckey --wrap
""",
    "0": """
-H -O -Q -V -W -h -s -v --consolidate-segments --contiguous --external --get-user-env --help --hold --ignore-pbs
--no-requeue --overcommit --oversubscribe --parsable --quiet --reboot --spread-job --spread-segments --stepmgr
--test-only --usage --use-min-nodes --verbose --version --wait
""",
    "?": """
-k --exclusive --nice --no-kill --oom-kill-step --propagate --requeue --resv-ports
""",
}), **PYXIS, "--environment": "1"}

SRUN_ARITY: dict[str, str] = {**_table({
    "1": """
-A -B -C -D -F -G -J -L -M -N -S -T -W -b -c -d -e -i -m -n -o -p -q -r -t -w -x --accel-bind --account --acctg-freq
--autocomplete --bb --bbf --bcast-exclude --begin --chdir --cluster --cluster-constraint --clusters --comment
--constraint --container --container-id --context --core-spec --cores-per-socket --cpu-bind --cpu-freq --cpu_bind
--cpus-per-gpu --cpus-per-task --deadline --delay-boot --dependency --distribution --epilog --error --exclude
--export --extra --extra-node-info --gpu-bind --gpu-freq --gpus --gpus-per-node --gpus-per-socket --gpus-per-task
--gres --gres-flags --het-group --hint --ignore-signals --input --job-name --jobid --licenses --mail-type --mail-
user --mcs-label --mem --mem-bind --mem-per-cpu --mem-per-gpu --mem-update --mincpus --mpi --msg-timeout --network
--nodefile --nodelist --nodes --ntasks --ntasks-per-core --ntasks-per-gpu --ntasks-per-node --ntasks-per-socket
--ntasks-per-tres --open-mode --output --pack-group --partition --prefer --priority --profile --prolog --qos
--relative --reservation --resources --runtime --segment --signal --slurmd-debug --sockets-per-node --switches
--task-epilog --task-prolog --tasks-per-node --thread-spec --threads --threads-per-core --time --time-min --tmp
--treewidth --tres-bind --tres-per-task --wait --wckey
""",
    "0": """
-E -H -O -Q -V -X -Z -h -l -s -u -v --async --consolidate-segments --contiguous --debugger-test --disable-status
--exact --help --hold --interactive --label --multi-prog --no-allocate --overcommit --oversubscribe --parsable
--preserve-env --quiet --quit-on-interrupt --reboot --spread-job --spread-segments --stepmgr --test-only
--unbuffered --usage --use-min-nodes --verbose --version --wait-for-children --whole
""",
    "?": """
-I -K -k --bcast --compress --exclusive --external-launcher --immediate --kill-on-bad-exit --nice --no-kill --oom-
kill-step --overlap --propagate --pty --resv-ports --send-libs
""",
}), **PYXIS, "--environment": "1"}
