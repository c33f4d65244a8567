#!/usr/bin/env bash
# The official openai Python package, pinned, in a virtual environment of its
# own (default build/openai-venv): specdec-server's client test runs with its
# interpreter (tests/server/test_openai_client.py; without it the test is
# reported as skipped). Does nothing when the pinned version is there.
#   scripts/install-openai.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-build/openai-venv}"
version=1.55.3
if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "import openai, sys; sys.exit(openai.__version__ != '$version')" 2>/dev/null; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "openai==$version"
"$venv/bin/python3" -c "import openai; print('openai', openai.__version__, 'in $venv')"
