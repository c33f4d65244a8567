#!/usr/bin/env bash
# Regenerates tests/fixtures/sampling_chain.{llama_cpp,hugging_face}.reference.json
# (see README.md here).
#   scripts/sampling_references/generate.sh LLAMA_PREFIX PYTHON
# LLAMA_PREFIX: llama.cpp installed by scripts/build-llama-cpp.sh;
# PYTHON: a Python with torch and transformers.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
prefix="$(cd "${1:?usage: generate.sh LLAMA_PREFIX PYTHON}" && pwd)"
python="${2:?usage: generate.sh LLAMA_PREFIX PYTHON}"
build="${SPECDEC_REFERENCES_BUILD:-$repo/build-sampling-references}"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build" -j2 >/dev/null
python3 "$here/cases.py" >"$build/cases.json"
stamp=""
for f in "$prefix"/specdec-llama-cpp-python-*; do [ -e "$f" ] && stamp="$(basename "$f")"; done
"$build/llama_cpp_reference" "$build/cases.json" "$repo/tests/fixtures/sampling_chain.llama_cpp.reference.json" \
  "llama.cpp of the PyPI sdist ${stamp#specdec-} (scripts/build-llama-cpp.sh), CPU"
(cd "$here" && "$python" hugging_face_reference.py "$repo/tests/fixtures/sampling_chain.hugging_face.reference.json")
