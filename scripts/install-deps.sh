#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages specdec builds with, if any is missing.
# (The CUDA toolkit is optional and not installed here: the GPU backend is
# built when nvcc is found.) With SPECDEC_FUZZ_SECONDS set to more than 0
# it also installs clang and its runtime libraries, which build the libFuzzer
# targets (scripts/fuzz.sh).
set -euo pipefail
packages=(cmake g++ make ninja-build catch2 nlohmann-json3-dev libeigen3-dev libcpp-httplib-dev python3-venv)
[ "${SPECDEC_FUZZ_SECONDS:-0}" = 0 ] || packages+=(clang libclang-rt-14-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
