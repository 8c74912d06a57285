"""frameworks/accelerator_code.drives_accelerator: a script driving Accelerate's Accelerator is told by its code (an
alias, a star import, the module), never by a comment, and a script that also builds a Trainer is the Trainer's."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.frameworks.accelerator_code import drives_accelerator


@pytest.mark.parametrize("code, drives", [
    ("from accelerate import Accelerator\naccelerator = Accelerator()\n", True),
    ("from accelerate import Accelerator as Acc\nacc = Acc(gradient_accumulation_steps=4)\n", True),
    ("from accelerate import *\naccelerator = Accelerator()\n", True),
    ("import accelerate as A\nacc = A.Accelerator()\n", True),
    ("import accelerate.accelerator\nacc = accelerate.accelerator.Accelerator()\n", True),
    ("from accelerate.accelerator import Accelerator\nacc = Accelerator()\n", True),
    # a mention in a comment or a docstring, an import never called, another package's Accelerator: not driven
    ("# we used to build Accelerator() here\nfrom transformers import Trainer\nTrainer(model=None).train()\n", False),
    ('"""Runs like Accelerator(mixed_precision="bf16")."""\nprint(1)\n', False),
    ("from accelerate import Accelerator\nprint(Accelerator)\n", False),
    ("from lightning import Accelerator\nAccelerator()\n", False),
    # R66: accelerate used for something else (state, seeds, utilities) by a Trainer script or any script
    ("from accelerate import PartialState\nfrom transformers import Trainer\nPartialState()\nTrainer(model=None)\n",
     False),
    ("import accelerate\nfrom accelerate.utils import set_seed\nset_seed(0)\naccelerate.utils.set_seed(1)\n", False),
    ("import accelerate as acc\nstate = acc.PartialState()\nacc.utils.gather_object([1])\n", False),
    # the Trainer builds its own Accelerator: a script building both is the Trainer's
    ("from accelerate import Accelerator\nfrom trl import SFTTrainer\nacc = Accelerator()\nSFTTrainer(model=None)\n", False),
])
def test_drives_accelerator(tmp_path: Path, code: str, drives: bool) -> None:
    script = tmp_path / "train.py"
    script.write_text(code)
    assert drives_accelerator(str(script)) is drives


def test_unreadable_or_missing_script_is_not_an_accelerator_script(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def (:\n")
    assert not drives_accelerator(str(tmp_path / "broken.py")) and not drives_accelerator(str(tmp_path / "none.py"))
