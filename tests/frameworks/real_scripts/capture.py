"""Turn a public launch script into the exact command it runs (a dev tool; the tests never run it).

    python tests/frameworks/real_scripts/capture.py NAME OWNER+REPO COMMIT PATH [--arg A ...] [--env K=V ...]

The script is extracted from the mirror (/work/.mirror/OWNER+REPO/repo) at COMMIT with its whole folder, and
run by bash itself in a scratch directory, so every variable, array and $(( )) is substituted as the script sets
it. `torchrun`, `deepspeed`, `python`, `srun`, `mpirun` ... are shims on PATH that record their argv and stop;
`nvidia-smi` reports 8 GPUs and `ds_ssh` 8 such hosts (a 64-GPU job, the size of the Megatron-DeepSpeed examples' own runs, e.g. `gpus-64` in their run names). A config file the recorded command names (--deepspeed_config, --deepspeed-config)
is kept with its content. The first recorded launch that runs a training script is written to
cases/NAME.json; the expectations are then filled in by hand from the script's intent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

MIRRORS = Path("/work/.mirror")
CASES = Path(__file__).parent / "cases"
LAUNCHERS = ("torchrun", "deepspeed", "python", "python3", "srun", "mpirun", "accelerate", "uv")
_SHELL_VARS = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "LC_CTYPE"})
CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--ds-config", "--ds_config", "--hostfile", "--deepspeed")

SHIM = """#!{python}
import json, os, sys
if "-c" in sys.argv and "device_count" in " ".join(sys.argv):  # GPUS_PER_NODE=$(python -c "...device_count()")
    print(8)
    sys.exit(0)
with open(os.environ["CAPTURE_LOG"], "a") as f:
    f.write(json.dumps({{"argv": [os.path.basename(sys.argv[0])] + sys.argv[1:], "cwd": os.getcwd()}}) + "\\n")
"""
DS_SSH = """#!/bin/sh
# deepspeed's ds_ssh runs the command on every host of /job/hostfile (pdsh prints two more lines): 8 hosts here
echo "hosts: worker-[0-7]"; echo ""
for h in 1 2 3 4 5 6 7 8; do "$@"; done
"""
NVIDIA_SMI = "#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo \"GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)\"; done\n"


def _extract(repo: str, commit: str, path: str, into: Path) -> None:
    git = ["git", "--git-dir", str(MIRRORS / repo / "repo")]
    top = subprocess.run([*git, "ls-tree", "--name-only", commit], check=True, capture_output=True, text=True)
    files = [f for f in top.stdout.split() if f.endswith((".py", ".sh", ".json"))]  # pretrain_gpt.py next to it
    archive = subprocess.run([*git, "archive", commit, str(Path(path).parent), *files], check=True,
                             capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def _fill_placeholders(script: Path) -> None:
    """`CHECKPOINT_PATH=<Specify path>` lines are for the user to fill: fill them with a path, as a user would."""
    text = script.read_text()
    script.write_text(re.sub(r"=<([^<>\n]+)>", lambda m: "=/data/" + re.sub(r"\W+", "_", m.group(1)).strip("_"), text))


def _shims(bin_dir: Path) -> None:
    bin_dir.mkdir()
    for name in LAUNCHERS:
        (bin_dir / name).write_text(SHIM.format(python=sys.executable))
    (bin_dir / "nvidia-smi").write_text(NVIDIA_SMI)
    (bin_dir / "ds_ssh").write_text(DS_SSH)
    for f in bin_dir.iterdir():
        f.chmod(0o755)


def _launch(records: list[dict]) -> dict:
    for rec in records:
        if any(re.search(r"(^|[ /])(pretrain|train|main|finetune|run_clm|run_translation|run_mlm)[\w.-]*\.py\b", w) for w in rec["argv"]):
            return rec
    raise SystemExit(f"no training launch recorded: {records}")


def _config_files(rec: dict) -> dict[str, str]:
    """Files the command names that the script wrote (ds_config), with their content, by the name in argv."""
    files = {}
    argv = rec["argv"]
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag in CONFIG_FLAGS and (eq or i + 1 < len(argv)):
            name = value if eq else argv[i + 1]
            src = Path(rec["cwd"]) / name
            if src.is_file():
                files[name] = src.read_text()
    return files


def capture(name: str, repo: str, commit: str, path: str, args: list[str], env: dict[str, str], in_dir: bool,
            mkdirs: list[str], touch: tuple[str, ...] = ()) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _extract(repo, commit, path, root)
        _fill_placeholders(root / path)
        _shims(root / ".bin")
        log = root / ".capture.jsonl"
        cwd = root / Path(path).parent if in_dir else root  # the folder its README says to run it from
        for d in mkdirs:
            (cwd / d).mkdir(parents=True, exist_ok=True)
        for f in touch:  # a file the user has (a converted checkpoint's config.json the script copies)
            (cwd / f).parent.mkdir(parents=True, exist_ok=True)
            (cwd / f).write_text("{}\n")
        script = Path(path).name if in_dir else path
        run_env = {"PATH": f"{root / '.bin'}:/usr/bin:/bin", "HOME": tmp, "CAPTURE_LOG": str(log), **env}
        proc = subprocess.run(["bash", script, *args], cwd=cwd, env=run_env, capture_output=True, text=True,
                              timeout=60)
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        if not records:
            raise SystemExit(f"nothing recorded; stderr:\n{proc.stderr[-3000:]}")
        rec = _launch(records)
        exported = {k: v for k, v in _exported(root, cwd, script, args, run_env).items() if k not in run_env}
        full = (rec["cwd"] + "/").replace(str(root) + "/", "", 1)
        files = {k.replace(str(root), "/workspace"): v for k, v in _config_files(rec).items()}
        rec["argv"] = [w.replace(str(root), "/workspace") for w in rec["argv"]]
        exported = {k: v.replace(str(root), "/workspace") for k, v in exported.items() if k not in _SHELL_VARS}
        return {"name": name, "repository": repo.replace("+", "/"), "commit": commit, "path": path,
                "script_args": args, "script_env": env, "run_from": "script folder" if in_dir else "repository root", "cwd": full.rstrip("/") or ".",
                "argv": rec["argv"], "env": exported, "files": files}


def _exported(root: Path, cwd: Path, path: str, args: list[str], run_env: dict[str, str]) -> dict[str, str]:
    """Variables the script exports (the launch inherits them), read by re-running it with `env` as the shim."""
    envlog = root / ".env.json"
    shim = f"#!{sys.executable}\nimport json, os\njson.dump(dict(os.environ), open({str(envlog)!r}, 'w'))\n"
    for name in LAUNCHERS:
        (root / ".bin" / name).write_text(shim)
    subprocess.run(["bash", path, *args], cwd=cwd, env=run_env, capture_output=True, timeout=60)
    return json.loads(envlog.read_text()) if envlog.exists() else {}


def write_case(name: str, case: dict) -> None:
    """cases/NAME.json with `case`, keeping the hand-written expect / notes of the file it replaces (argv on one
    line before cwd)."""
    out = CASES / f"{name}.json"
    old = json.loads(out.read_text()) if out.exists() else {}
    case["expect"] = old.get("expect", {})
    case["notes"] = old.get("notes", "")
    argv = case.pop("argv")
    text = json.dumps(case, indent=1).replace('"cwd":', f'"argv": {json.dumps(argv)},\n "cwd":', 1)
    out.write_text(text + "\n")
    print(out, " ".join(argv)[:300])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("repo")
    ap.add_argument("commit")
    ap.add_argument("path")
    ap.add_argument("--arg", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--in-dir", action="store_true", help="run from the script's own folder")
    ap.add_argument("--mkdir", action="append", default=[], help="a folder the user is expected to have made")
    ap.add_argument("--touch", action="append", default=[], help="a file the user is expected to have")
    ns = ap.parse_args()
    env = dict(e.split("=", 1) for e in ns.env)
    write_case(ns.name, capture(ns.name, ns.repo, ns.commit, ns.path, ns.arg, env, ns.in_dir, ns.mkdir,
                                tuple(ns.touch)))


if __name__ == "__main__":
    main()
