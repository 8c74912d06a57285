"""A predict with no store under $LLMPERF_HOME never imports SQLite: it only asks where the store would be
(store/location.py), and the store package imports its SQLite half on first use of one of its names."""

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
from llmperf_hook.cli import main
try:
    main(['predict', '--cluster', 'dgx-a100', '--format', 'json', '--', 'torchrun', '--nproc-per-node', '8',
          'pretrain_gpt.py', '--num-layers', '4', '--hidden-size', '1024', '--num-attention-heads', '16',
          '--seq-length', '1024', '--max-position-embeddings', '1024', '--micro-batch-size', '1',
          '--global-batch-size', '64', '--bf16'])
except SystemExit as exc:
    assert not exc.code, exc.code
sys.stderr.write('SQLITE=%s\\n' % ('sqlite3' in sys.modules or 'llmperf_hook.store.sqlite_store' in sys.modules))
"""


def test_predict_without_a_store_imports_no_sqlite(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LLMPERF_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "SQLITE=False" in out.stderr, out.stderr[-2000:]


def test_store_names_still_import_from_the_package() -> None:
    from llmperf_hook.store import OpSampleRecord, default_store_path, open_store  # noqa: F401
    from llmperf_hook.store.sqlite_store import STORE_FILE

    assert default_store_path().name == STORE_FILE
