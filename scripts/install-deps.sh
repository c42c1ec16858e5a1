#!/usr/bin/env bash
# Installs exactly the Debian packages axle needs to build, test and train.
# Idempotent: apt-get runs only when something is missing.
set -euo pipefail
PKGS=(
  cmake ninja-build g++ make pkg-config
  libdnnl-dev          # oneDNN: matmul, conv, pooling kernels
  ocl-icd-opencl-dev   # oneDNN's CMake config requires OpenCL (only "Recommends" in Debian)
  libgloo-dev          # CPU collectives (multi-process training)
  dataset-fashion-mnist zlib1g-dev
  fortunes             # the GPT workload's default corpus (axle-train --model gpt; README)
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev   # libFuzzer for the safetensors fuzz test
  iproute2             # `ip netns` for the two-host test (tests/dist/test_multihost.cpp)
  python3-minimal      # the layering tests (tests/layering.py); binutils (nm) comes with g++
  python3-venv python3-dev   # make python: Debian's venv for the pinned torch, Python.h for axle._C
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
