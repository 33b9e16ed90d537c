#!/usr/bin/env bash
# Runs the ops' CUDA tests on a GPU host (from the repository root): first with no GPU visible,
# where every CUDA test must skip, then on the GPU. Takes a prebuilt flame_ops_cuda_tests as $1
# when one starts there; otherwise builds tests/worker/ops_cuda/ against the Python torch.
# Logs go to $OUT (or ./ops-cuda-logs).
#   tests/worker/ops_cuda/run_on_gpu.sh [prebuilt-binary]
set -uo pipefail
out=${OUT:-ops-cuda-logs}
mkdir -p "$out"
# NVLink multicast stays off on shared GPU hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
torch_dir=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
nvidia_dir=$(dirname "$torch_dir")/nvidia
# The torch wheel's CUDA libraries (cudart, cublas, cufile, ...) live beside it in nvidia/*/lib.
export LD_LIBRARY_PATH="$torch_dir/lib:$(ls -d "$nvidia_dir"/*/lib | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

bin=${1:-}
if [[ -z "$bin" ]] || ! "$bin" --gtest_list_tests > "$out/list.log" 2>&1; then
  echo "building flame_ops_cuda_tests here"
  { cmake -S tests/worker/ops_cuda -B build/ops-gpu -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DFLAME_TORCH_DIR="$torch_dir" &&
    ninja -C build/ops-gpu -j16 flame_ops_cuda_tests; } > "$out/build.log" 2>&1 ||
    { tail -40 "$out/build.log"; exit 1; }
  bin=build/ops-gpu/flame_ops_cuda_tests
fi
nvidia-smi -L
CUDA_VISIBLE_DEVICES= "$bin" > "$out/no_gpu.log" 2>&1
echo "no GPU visible: rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/no_gpu.log"
"$bin" 2>&1 | tee "$out/gpu.log"
