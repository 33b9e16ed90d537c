#!/usr/bin/env bash
# Builds a variant folder's chunk benchmark and test binaries on the CPU machine (nvcc for sm_90;
# no GPU needed) into DIR/bin/, stripped and xz-compressed, for compare_variants.sh to run on the
# GPU host without building there (~1 MB a binary, so several variants travel in one call).
#   tests/benchmarks/prebuild_variant.sh _var/new chunk_gla_test chunk_simple_gla_test
# DIR holds kernels/ and optionally tests/ (else the repository's); run from the repository root.
set -euo pipefail
dir=${1:?usage: prebuild_variant.sh DIR [test ...]}
shift
root=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tests=$root/tests
[ -d "$dir/tests" ] && tests=$root/$dir/tests
cp -r "$root/$dir/kernels" "$tests" "$work/"
launcher=()
command -v ccache > /dev/null &&
  launcher=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$work/kernels" -B "$work/b" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" > "$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/b" --target chunk_attention_benchmark "$@"
rm -rf "$dir/bin" && mkdir -p "$dir/bin"
for f in "$work/b/chunk_attention_benchmark" "${@/#/$work/b/tests/kernels/}"; do
  strip -o "$work/stripped" "$f"
  xz -T0 -c "$work/stripped" > "$dir/bin/$(basename "$f").xz"
done
ls -l "$dir/bin"
