#!/usr/bin/env bash
# Static SASS instruction mix of the chunk kernels, on any machine with nvcc (no GPU): counts per
# kernel of the opcodes that matter when tuning them -- tensor-core ops (HMMA), shared loads
# (LDS, LDSM = ldmatrix), generic loads and stores (LD, ST: a shared tile the compiler could not
# prove shared, each with 64-bit address math), async copies (LDGSTS), barriers and the integer
# address arithmetic (IMAD, LEA, IADD3). Cheaper than a device call for checking what a change
# did to a kernel's code; it says nothing about time.
#   tests/benchmarks/sass_mix.sh [build-dir] [kernel-name-regex]
# build-dir holds a standalone kernels/ build (default build/kstd:
#   cmake -S kernels -B build/kstd -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 && ninja -C build/kstd).
# Needs cuobjdump; the CUDA toolkit's Debian install here lacks it, PyPI has it:
#   pip download --no-deps nvidia-cuda-cuobjdump==13.2.51 && python3 -m zipfile -e <wheel> dir
set -euo pipefail
build=${1:-build/kstd}
pattern=${2:-.}
command -v cuobjdump > /dev/null || { echo "cuobjdump not found (see the header)" >&2; exit 1; }
for obj in "$build"/CMakeFiles/flame_kernels.dir/{delta_rule,gla,simple_gla}/*.cu.o; do
  [ -f "$obj" ] || continue
  cuobjdump -sass "$obj" | awk -v pat="$pattern" '
    /Function :/ { flush(); name = $NF; on = name ~ pat; next }
    on && /^ +\/\*[0-9a-f]+\*\/ / {
      for (i = 2; i <= NF; ++i) if ($i ~ /^[A-Z][A-Z0-9_]*(\.|$)/ && $i !~ /^(R|P|UR|UP)[0-9Z]/) break
      split($i, op, "."); n[op[1]]++; total++
    }
    function flush(  k, line) {
      if (total == 0) return
      line = sprintf("%6d  HMMA %d  LDS %d  LDSM %d  LD %d  ST %d  LDGSTS %d  BAR %d  IMAD %d  LEA %d  IADD3 %d",
                     total, n["HMMA"], n["LDS"], n["LDSM"], n["LD"], n["ST"], n["LDGSTS"], n["BAR"],
                     n["IMAD"], n["LEA"], n["IADD3"])
      print line "  " name
      delete n; total = 0
    }
    END { flush() }'
done
