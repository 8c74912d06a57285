"""A ds_config written by a chain of `sed` substitutions on a template (Megatron-DeepSpeed's examples_deepspeed
scripts: `sed "s/GBSIZE/${global_batch_size}/" ${template_json} | sed ... > ${config_json}`) is the text sed gives:
each script is run by the real bash and sed, and llmperf (which runs neither) must read the same file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch

TEMPLATE = ('{\n  "train_batch_size" : CONFIG_BATCH_SIZE,\n  "train_micro_batch_size_per_gpu": CONFIG_MBSIZE,\n'
            '  "zero_optimization": {"stage": ZERO_STAGE},\n  "note": "ZERO_STAGE ZERO_STAGE",\n'
            '  "prescale_gradients": PRESCALE_GRAD\n}\n')
SETTINGS = "global_batch_size=64\nbatch_size=2\nzero_stage=1\nprescale_grad=true\ntemplate_json=tmpl.json\n" \
           'config_json="ds_config_gbs${global_batch_size}.json"\n'
CHAINS = {
    "megatron_deepspeed": 'sed "s/CONFIG_BATCH_SIZE/${global_batch_size}/" ${template_json} \\\n'
                          '    | sed "s/CONFIG_MBSIZE/${batch_size}/" \\\n    | sed "s/ZERO_STAGE/${zero_stage}/" \\\n'
                          '    | sed "s/PRESCALE_GRAD/${prescale_grad}/" \\\n      > ${config_json}\n',
    "expressions": "sed -e 's/CONFIG_BATCH_SIZE/64/' -e \"s/CONFIG_MBSIZE/$batch_size/\" -e 's|ZERO_STAGE|1|g' "
                   '-e "s/PRESCALE_GRAD/false/" $template_json > $config_json\n',
    "semicolons": "sed 's/CONFIG_BATCH_SIZE/64/;s/CONFIG_MBSIZE/2/;s/ZERO_STAGE/0/;s/PRESCALE_GRAD/true/' tmpl.json "
                  "> ds_config_gbs64.json\n",
    "template_written_first": "cat > tmpl.json <<'EOF'\n" + TEMPLATE + "EOF\n"
                              'sed "s/CONFIG_BATCH_SIZE/8/g" tmpl.json | sed "s/CONFIG_MBSIZE/1/" '
                              '| sed "s/ZERO_STAGE/2/" | sed "s/PRESCALE_GRAD/false/" > ${config_json}\n',
    "copy then sed -i": "cp $template_json $config_json\nsed -i \"s/CONFIG_BATCH_SIZE/${global_batch_size}/\" "
                        "$config_json\nsed -i -e 's/CONFIG_MBSIZE/2/' -e 's/ZERO_STAGE/1/g' $config_json\n"
                        "sed --in-place 's/PRESCALE_GRAD/true/' $config_json\n",
    "regular expressions": "sed -e 's/\\(\"stage\": \\)ZERO_[A-Z]*/\\11/' -e 's/CONFIG_[A-Z_]*,/64,/' "
                           "-e 's/CONFIG_MBSIZE/&/; s/CONFIG_MBSIZE/2/' -e 's/ZERO_STAGE/0/2' "
                           "-e 's/PRESCALE_GRAD$/true/' tmpl.json > ds_config_gbs64.json\n",
    "extended": "sed -E 's/CONFIG_[A-Z_]+SIZE/8/g; s/ZERO_STAGE+/3/g; s/(PRESCALE)_GRAD/false/' tmpl.json "
                "| sed 's/false/true/I' > ds_config_gbs64.json\n",
    "cat into tee": "cat <<EOF | tee $config_json > /dev/null\n" + TEMPLATE.replace("CONFIG_BATCH_SIZE", "64")
                    .replace("CONFIG_MBSIZE", "$batch_size").replace("ZERO_STAGE", "2").replace("PRESCALE_GRAD", "true")
                    + "EOF\n",
}
LAUNCH = "deepspeed --num_gpus 8 pretrain_gpt.py --num-layers 2 --deepspeed_config ${config_json}\n"


def _write(tmp_path: Path, chain: str) -> Path:
    (tmp_path / "tmpl.json").write_text(TEMPLATE)
    script = tmp_path / "train.sh"
    script.write_text(SETTINGS + chain + LAUNCH)
    return script


@pytest.mark.parametrize("name", CHAINS)
def test_the_file_the_sed_chain_writes(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("bash") is None or shutil.which("sed") is None:
        pytest.skip("needs bash and sed")
    script = _write(tmp_path, CHAINS[name])
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "deepspeed").write_text("#!/bin/sh\n")
    (stubs / "deepspeed").chmod(0o755)
    subprocess.run(["bash", str(script)], env={"PATH": f"{stubs}:/usr/bin:/bin"}, cwd=tmp_path, check=True, timeout=30)
    written = (tmp_path / "ds_config_gbs64.json").read_text()
    (tmp_path / "ds_config_gbs64.json").unlink()
    if name == "template_written_first":
        (tmp_path / "tmpl.json").unlink()  # the here-document is the template
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", str(script)], {})
    assert job.script_files["ds_config_gbs64.json"].text == written


@pytest.mark.parametrize("chain", ["sed -n 's/ZERO_STAGE/1/p' tmpl.json > ds_config_gbs64.json\n",
                                   "sed 'y/ZERO/zero/' tmpl.json > ds_config_gbs64.json\n",
                                   "sed 's/[[:upper:]_]*STAGE/1/' tmpl.json > ds_config_gbs64.json\n",
                                   "sed 's/ZERO_STAGE/1/2/' tmpl.json > ds_config_gbs64.json\n",
                                   "cp tmpl.json ds_config_gbs64.json\n"
                                   "sed -i 's/ZERO_STAGE/1/w log' ds_config_gbs64.json\n"])
def test_anything_but_substitutions_is_not_worked_out(chain: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.frameworks.resolve import resolve_job

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="does not exist"):
        resolve_job(["bash", str(_write(tmp_path, chain))], {})


def test_the_ds_config_from_the_template_sizes_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.frameworks.resolve import resolve_job

    monkeypatch.chdir(tmp_path)
    model = ("--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
             "--tokenizer-type NullTokenizer --vocab-size 1000 --micro-batch-size 2 --global-batch-size 64 --fp16 "
             "--deepspeed")
    script = _write(tmp_path, CHAINS["megatron_deepspeed"])
    script.write_text(script.read_text().replace("--num-layers 2", model))
    _, cfg = resolve_job(["bash", str(script)], {})
    assert (cfg.optimizer.zero_stage, cfg.batch.micro_batch_size) == (1, 2)


@pytest.mark.skipif(shutil.which("sed") is None, reason="needs sed")
def test_a_replacement_holding_the_delimiter_is_no_substitution(tmp_path: Path) -> None:
    """`s/ZERO_STAGE/1/2/` (a value with a `/` expanded into the replacement) is no `s/WORD/TEXT/`: sed stops with
    "unknown option to `s'" and writes nothing, so there is no text to work out."""
    from llmperf_hook.launch.sed_templates import sed_output

    (tmp_path / "tmpl.json").write_text(TEMPLATE)
    assert subprocess.run(["sed", "s/ZERO_STAGE/1/2/", "tmpl.json"], cwd=tmp_path, capture_output=True).returncode != 0
    assert sed_output([["sed", "s/ZERO_STAGE/1/2/", "tmpl.json"]], lambda _: TEMPLATE) is None
    assert sed_output([["sed", "s|ZERO_STAGE|1/2|", "tmpl.json"]], lambda _: TEMPLATE) == \
        subprocess.run(["sed", "s|ZERO_STAGE|1/2|", "tmpl.json"], cwd=tmp_path, capture_output=True, text=True).stdout


SED_TEXT = ('{\n  "train_batch_size": GBSIZE,\n  "micro": MBSIZE, "x": "a.b(c)+d|e"\n  "gbs": $GBS ^1,\n'
            '  "stage": ZERO_STAGE ZERO_STAGE\n}\nno newline')
SED_SCRIPTS = [
    ["s/GBSIZE/64/"], ["s/ZERO_.*/1/"], ["s/ZERO_STAGE/&1/"], ["s/ZERO_STAGE/1/2"], ["s/ZERO_STAGE/1/g"],
    ["s/\\(GB\\)SIZE/\\1-\\1/"], ['s/"micro": [A-Z]*/"micro": 4/'], ["s/a.b(c)+d|e/ok/"], ["s/[0-9]\\{1,\\}/N/g"],
    ["s|/|\\\\|g"], ["s/zero_stage/z/I"], ["s/^  //"], ["s/,$/;/"], ["s/GBSIZE/64/;s/MBSIZE/2/"], ["s/MBSIZE/a\\/b/"],
    ["s/E/\\n/2"], ["s/x/y/3"], ["s/e\\+/E/g"], ["s/\\./DOT/"], ["s/ZERO_STAGE/1/2/"], ["-E", "s/(GB)SIZE/\\1\\1/"],
    ["-E", "s/e+/E/g"], ["-E", "s/a.b\\(c\\)\\+d\\|e/ok/"], ["-e", "s/GBSIZE/1/", "--expression=s/MBSIZE/2/"],
    ["s/I*/-/g"], ["s/$GBS ^1/64/"], ["s/[]a-z[]/_/g"], ["s/\\(^ *\\)\"/\\1'/"], ["s/[&&~~||]/_/g"],
]


@pytest.mark.skipif(shutil.which("sed") is None, reason="needs sed")
@pytest.mark.filterwarnings("error")  # `[&&]`: Python's re warns of a set operator, literal in POSIX brackets
@pytest.mark.parametrize("args", SED_SCRIPTS, ids=[" ".join(a) for a in SED_SCRIPTS])
def test_substitutions_give_what_sed_gives(args: list[str], tmp_path: Path) -> None:
    """Regular expressions (basic and -E), `&`, `\\1`, flags g / N / I, `\\n` in the replacement, `;`-joined commands:
    worked out as the real sed gives them, or not at all (None) where sed stops."""
    from llmperf_hook.launch.sed_templates import sed_output

    (tmp_path / "tmpl.json").write_text(SED_TEXT)
    real = subprocess.run(["sed", *args, "tmpl.json"], cwd=tmp_path, capture_output=True, text=True)
    ours = sed_output([["sed", *args, "tmpl.json"]], lambda _: SED_TEXT)
    assert ours == (real.stdout if real.returncode == 0 else None)


SED_UNTRANSLATED = [["s/\\(GB\\|GBSIZE\\)/x/"], ["-E", "s/(GB|GBSIZE)/x/"], ["s/GBSIZE/\\L&/"], ["s/MB/\\x41/"],
                    ["s/[a\\]/x/g"], ["s/\\`{/x/"], ["s/\\<GB/x/"], ["s/\\d071/x/"]]


@pytest.mark.skipif(shutil.which("sed") is None, reason="needs sed")
@pytest.mark.parametrize("args", SED_UNTRANSLATED, ids=[" ".join(a) for a in SED_UNTRANSLATED])
def test_what_python_reads_otherwise_is_not_worked_out(args: list[str], tmp_path: Path) -> None:
    """Alternation (POSIX's longest match: `\\(GB\\|GBSIZE\\)` takes GBSIZE, Python's re GB), GNU's case conversion and
    character codes, a backslash in a bracket expression (literal there) and GNU's anchors `\\``, `\\<`: sed runs
    them, and Python's re would give another text, so the file stays unknown (it gave that other text)."""
    from llmperf_hook.launch.sed_templates import sed_output

    (tmp_path / "tmpl.json").write_text(SED_TEXT)
    real = subprocess.run(["sed", *args, "tmpl.json"], cwd=tmp_path, capture_output=True, text=True)
    assert real.returncode == 0 and real.stdout != SED_TEXT
    assert sed_output([["sed", *args, "tmpl.json"]], lambda _: SED_TEXT) is None


@pytest.mark.parametrize("copy, copied", [("cp -f tmpl.json ds.json", True), ("cp -- tmpl.json ds.json", True),
                                          ("cp -u tmpl.json ds.json", False), ("cp -s tmpl.json ds.json", False)])
def test_a_copy_with_options(copy: str, copied: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cp -f` copies the template's text; with an option that may leave the old file (-u, -n) or write a link (-s)
    the copy is 'written by a command': before, any option left the name unrecorded, so a stale ds.json of the
    folder was read as the job's."""
    (tmp_path / "tmpl.json").write_text(TEMPLATE)
    (tmp_path / "ds.json").write_text('{"train_batch_size": 999}')
    (tmp_path / "train.sh").write_text(f"{copy}\n{LAUNCH.replace('${config_json}', 'ds.json')}")
    monkeypatch.chdir(tmp_path)
    written = parse_launch(["bash", "train.sh"], {}).script_files["ds.json"]
    assert (written.text, written.command) == ((TEMPLATE, "") if copied else ("", copy))
