"""The predict path stays light: no torch, deepspeed, lightgbm or sklearn on import or --help."""

import subprocess
import sys

HEAVY = ("torch", "deepspeed", "lightgbm", "sklearn")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint('HEAVY:' + ' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("HEAVY:")][-1]
    return line[len("HEAVY:"):].split()


def test_import_package_is_light() -> None:
    assert _loaded_after("import llmperf_hook, llmperf_hook.cli") == []


def test_help_is_light() -> None:
    code = "from llmperf_hook.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert _loaded_after(code) == []
