"""predict's profile lookup (predict/fitted.py imports profile/staged_folder.py) does not import socket (H143: ~2 ms
of every `llmperf predict`); the stage names still carry this host's name."""

import re
import socket
import subprocess
import sys

from llmperf_hook.profile import staged_folder


def test_profile_lookup_does_not_import_socket() -> None:
    probe = "import sys\nimport llmperf_hook.predict.fitted\nprint('socket' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_host_is_this_machines_name_without_dots() -> None:
    assert staged_folder._host() == (re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:64] or "host")
