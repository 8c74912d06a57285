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


@pytest.mark.parametrize("chain", ["sed -i 's/ZERO_STAGE/1/' tmpl.json\ncp tmpl.json ds_config_gbs64.json\n",
                                   "sed 's/ZERO_.*/1/' tmpl.json > ds_config_gbs64.json\n",
                                   "sed 's/ZERO_STAGE/&1/' tmpl.json > ds_config_gbs64.json\n",
                                   "sed 's/ZERO_STAGE/1/2/' tmpl.json > ds_config_gbs64.json\n"])
def test_anything_but_literal_substitutions_is_not_worked_out(chain: str, tmp_path: Path,
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
