#!/usr/bin/env bash
# Predict every launch command of this example (one JSON object per line; drop --format json for tables).
set -euo pipefail
cd "$(dirname "$0")"
exec llmperf predict --cluster dgx-h100 --batch commands.txt --format json "$@"
