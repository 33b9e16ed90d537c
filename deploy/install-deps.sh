#!/usr/bin/env bash
# Installs every build and run dependency of flame, at pinned versions, on Debian 12.
#
# Idempotent: packages already at their pinned version and a LibTorch already unpacked are left
# alone, so running it again costs a few seconds. LibTorch comes from the `torch` wheel on PyPI
# (the same 2.11.0 build, CUDA 13.0, that the GPU hosts run); only its C++ headers, shared
# libraries and CMake files are unpacked, under $FLAME_DEPS (default /opt/flame).
# The build and tests also use two pinned Python packages, the reference tokenizers that the demo
# BPE tokenizers are trained with and that the worker's tokenizers are checked against; they go
# into $FLAME_DEPS/python with `pip install --target`, never into the system Python.
#
# Usage: deploy/install-deps.sh            (as root, or with sudo on PATH)
set -euo pipefail

FLAME_DEPS=${FLAME_DEPS:-/opt/flame}
TORCH_VERSION=2.11.0
TORCH_DIR="$FLAME_DEPS/torch-$TORCH_VERSION"

# Debian 12 (bookworm) versions. A version bump is a deliberate change to this list. Python 3 with
# pip is assumed present (it is on the Debian images flame is built on).
PACKAGES=(
  build-essential=12.9 cmake=3.25.1-1 ninja-build=1.11.1-2~deb12u1 ccache=4.8+really4.7.5-1
  pkg-config=1.8.1-1
  libgrpc++-dev=1.51.1-3+b1 protobuf-compiler-grpc=1.51.1-3+b1
  libprotobuf-dev=3.21.12-3+deb12u1 protobuf-compiler=3.21.12-3+deb12u1
  libabsl-dev=20220623.1-1+deb12u2
  librocksdb-dev=7.8.3-2
  prometheus-cpp-dev=1.0.1-1
  libgtest-dev=1.12.1-0.2 libgmock-dev=1.12.1-0.2 googletest=1.12.1-0.2
  libbenchmark-dev=1.7.1-1
  libtomlplusplus-dev=3.3.0+ds-1 libcli11-dev=2.1.2+ds-1 nlohmann-json3-dev=3.11.2-2
  libsentencepiece-dev=0.1.97-3+b1 sentencepiece=0.1.97-3+b1
  libpcre2-dev=10.42-1+deb12u2 libicu-dev=72.1-3+deb12u1
  fortunes=1:1.99.1-7.3
)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for spec in "${PACKAGES[@]}"; do
  name=${spec%%=*} want=${spec#*=}
  have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
  [ "$have" = "install ok installed $want" ] || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${#missing[@]} Debian packages"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    --allow-downgrades "${missing[@]}" >/dev/null
fi

if [ ! -f "$TORCH_DIR/.complete" ]; then
  echo "install-deps: unpacking LibTorch $TORCH_VERSION into $TORCH_DIR"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 -d "$tmp" "torch==$TORCH_VERSION"
  as_root mkdir -p "$TORCH_DIR"
  # Only the C++ parts of the wheel: headers, shared libraries, CMake files.
  python3 - "$tmp" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
with zipfile.ZipFile(glob.glob(tmp + "/torch-*.whl")[0]) as whl:
    keep = [n for n in whl.namelist()
            if n.startswith(("torch/include/", "torch/lib/", "torch/share/")) or n == "torch/version.py"]
    whl.extractall(tmp + "/x", keep)
PY
  as_root cp -a "$tmp/x/torch/." "$TORCH_DIR/"
  as_root touch "$TORCH_DIR/.complete"
fi
PYTHON_DIR="$FLAME_DEPS/python"
PYTHON_PACKAGES=(tokenizers==0.22.1 sentencepiece==0.2.0)
# The stamp names the pinned versions, so a version bump reinstalls and nothing else does.
python_stamp="$PYTHON_DIR/.complete-$(IFS=_; echo "${PYTHON_PACKAGES[*]}")"
if [ ! -f "$python_stamp" ]; then
  echo "install-deps: installing ${PYTHON_PACKAGES[*]} into $PYTHON_DIR"
  as_root rm -rf "$PYTHON_DIR.new"
  as_root python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-deps --only-binary=:all: --target "$PYTHON_DIR.new" "${PYTHON_PACKAGES[@]}"
  as_root rm -rf "$PYTHON_DIR"
  as_root mv "$PYTHON_DIR.new" "$PYTHON_DIR"
  as_root touch "$python_stamp"
fi
echo "install-deps: ready (LibTorch at $TORCH_DIR, Python tools at $PYTHON_DIR)"
