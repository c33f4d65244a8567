#!/usr/bin/env bash
# Builds llama.cpp for specdec's llama.cpp adapter, CPU only, into a local
# prefix, from a pinned source package the package registries serve: the PyPI
# source distribution of llama-cpp-python vendors llama.cpp whole. The
# package's sha256 is checked before anything is unpacked.
#
#   scripts/build-llama-cpp.sh [PREFIX]        (default: build-llama/prefix)
#
# Installs the shared libraries (with the RPC backend), llama.h / ggml
# headers and their CMake packages (so that `cmake -DCMAKE_PREFIX_PATH=PREFIX`
# finds llama), and PREFIX/bin/ggml-rpc-server, the RPC backend's server. With
# SPECDEC_LLAMA_EXAMPLES="llama-simple llama-speculative-simple llama-bench
# llama-server ..." it also builds those llama.cpp programs (examples and
# tools) into PREFIX/bin (references for comparisons; not needed by the
# adapter or its tests).
# A prefix that already holds this version is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
prefix="$(mkdir -p "${1:-build-llama/prefix}" && cd "${1:-build-llama/prefix}" && pwd)"
work="$(dirname "$prefix")/llama-cpp-python-$version"
jobs="${SPECDEC_JOBS:-2}"
# The recipe's revision is part of the stamp, so that a prefix built by an
# older recipe is rebuilt.
recipe=2
stamp="$prefix/specdec-llama-cpp-python-$version-recipe$recipe"

if [ ! -f "$stamp" ]; then
  mkdir -p "$work"
  archive="$work/llama_cpp_python-$version.tar.gz"
  if [ ! -f "$archive" ]; then
    python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$work" "llama-cpp-python==$version"
  fi
  echo "$sha256  $archive" | sha256sum --check --quiet - || {
    echo "build-llama-cpp.sh: $archive does not have the pinned sha256 $sha256" >&2
    exit 1
  }
  rm -rf "$work/src" && mkdir -p "$work/src"
  tar -xzf "$archive" -C "$work/src" --strip-components=3 "llama_cpp_python-$version/vendor/llama.cpp"
  # The libraries only (llama.cpp's common library, tools and examples take
  # most of its build time and the adapter needs none of them), each finding
  # its siblings through $ORIGIN, as libggml loads its CPU backend library;
  # the RPC server is one file over ggml's public headers, compiled against
  # them (an RPATH, not a RUNPATH, so that it covers ggml's own loads too).
  # -march=native turns on AMX where the CPU reports it, but a virtual machine
  # may report AMX without letting a process use its tile state: ggml's AMX
  # matrix products then die with SIGILL (seen on a Firecracker VM of an
  # AMX-capable Xeon). The adapter needs none of it, so it is left out.
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_C_FLAGS="${CFLAGS:-} $no_amx" -DCMAKE_CXX_FLAGS="${CXXFLAGS:-} $no_amx" \
    -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_INSTALL_RPATH='$ORIGIN' -DBUILD_SHARED_LIBS=ON -DGGML_RPC=ON -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
    -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_IS_DEV=OFF >/dev/null
  cmake --build "$work/build" -j"$jobs"
  cmake --install "$work/build" >/dev/null
  mkdir -p "$prefix/bin"
  "${CXX:-c++}" -O2 -std=c++17 "$work/src/tools/rpc/rpc-server.cpp" -I"$prefix/include" -L"$prefix/lib" \
    -Wl,--disable-new-dtags,-rpath,"$prefix/lib" -lggml -lggml-base -lpthread -o "$prefix/bin/ggml-rpc-server"
  touch "$stamp"
fi

if [ -n "${SPECDEC_LLAMA_EXAMPLES:-}" ]; then
  cmake -S "$work/src" -B "$work/build" -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON >/dev/null
  read -r -a examples <<<"$SPECDEC_LLAMA_EXAMPLES"
  cmake --build "$work/build" -j"$jobs" --target "${examples[@]}"
  for example in "${examples[@]}"; do cp "$work/build/bin/$example" "$prefix/bin/"; done
fi
echo "llama.cpp (llama-cpp-python $version) in $prefix"
