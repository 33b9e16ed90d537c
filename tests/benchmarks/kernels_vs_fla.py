#!/usr/bin/env python3
"""Our gated chunk kernels beside fla's Triton kernels and PyTorch's causal SDPA, on one GPU.

Runs tests/benchmarks' chunk_attention_benchmark binary (our launchers, timed with CUDA events),
then times fla's chunk_simple_gla / chunk_gla and torch SDPA (is_causal) at the same shapes in the
same process, and prints one JSON line per measurement and a side-by-side table.

    python3 tests/benchmarks/kernels_vs_fla.py --binary build/k/chunk_attention_benchmark

fla comes from the flash-linear-attention / fla-core wheels on PYTHONPATH. fla autotunes each
Triton kernel on its first call per shape, so every case is warmed up before it is timed.
On Hopper with Triton 3.4-3.7.0 fla refuses its gated backward (fla issue #640, a Triton
miscompile); the guard is lifted here to *time* it, so fla's gradients are not used for anything.

Roofline columns (ours, forward+backward): achieved bytes/s over 4.3 TB/s (the H200's measured
copy bandwidth) and achieved FLOP/s over 790 TFLOP/s (its measured bf16 matrix rate). The binary
counts the bytes as every input read once and every output written once, and the FLOPs as the
matrix products of the chunked algorithm (see chunk_attention_benchmark.cc).
"""
import argparse
import json
import os
import signal
import subprocess
import sys

torch = None  # imported in main(), so that --from-log also works where torch is absent
F = None

BANDWIDTH = 4.3e12
TENSOR_RATE = 790e12
SHAPES = [(4, 2048, 16, 128), (8, 2048, 16, 128), (2, 16384, 16, 128), (1, 8192, 96, 128),
          (8, 4096, 8, 256)]
OPS = ["chunk_simple_gla", "chunk_gla"]


def emit(**record):
    print(json.dumps(record), flush=True)


def median_ms(fn, warm=5, reps=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def ours(binary):
    out = subprocess.run([binary], capture_output=True, text=True, check=True).stdout
    results = {}
    for line in out.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            results[(rec["op"], rec["B"], rec["T"], rec["H"], rec["D"])] = rec
            print(line, flush=True)
    return results


def load_fla():
    try:
        import fla.ops.common.chunk_o as chunk_o
        if hasattr(chunk_o, "TRITON_ABOVE_3_4_0"):
            chunk_o.TRITON_ABOVE_3_4_0 = False  # timing only, see the module docstring
        from fla.ops.gla import chunk_gla
        from fla.ops.simple_gla import chunk_simple_gla
        return {"chunk_gla": chunk_gla, "chunk_simple_gla": chunk_simple_gla}
    except Exception as ex:  # report and carry on with SDPA alone
        emit(kind="fla_import_error", error=str(ex)[:300])
        return {}


def time_reference(fla_ops, B, T, H, D, results):
    """Times fla and SDPA at one shape into results[name] = (fwd_ms, fwdbwd_ms)."""
    dev, dt = "cuda", torch.bfloat16
    q, k, v = (torch.randn(B, T, H, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    do = torch.randn(B, T, H, D, device=dev, dtype=dt)
    gk = F.logsigmoid(torch.randn(B, T, H, D, device=dev)).clamp_min(-5).requires_grad_(True)
    gs = F.logsigmoid(torch.randn(B, T, H, device=dev)).requires_grad_(True)
    cases = {
        "sdpa_causal": lambda: F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2),
    }
    if "chunk_gla" in fla_ops:
        cases["fla_chunk_gla"] = lambda: fla_ops["chunk_gla"](q, k, v, g=gk)[0]
    if "chunk_simple_gla" in fla_ops:
        cases["fla_chunk_simple_gla"] = lambda: fla_ops["chunk_simple_gla"](q, k, v, g=gs)[0]
    for name, fn in cases.items():
        try:
            fwd = median_ms(fn)
            fwdbwd = median_ms(lambda: fn().backward(do))
            results[name] = (fwd, fwdbwd)
            emit(kind="reference", op=name, B=B, T=T, H=H, D=D, fwd_ms=round(fwd, 4),
                 fwdbwd_ms=round(fwdbwd, 4))
        except Exception as ex:
            emit(kind="reference", op=name, B=B, T=T, H=H, D=D, error=str(ex)[:300])
    del q, k, v, do, gk, gs
    torch.cuda.empty_cache()


def table(flame, refs):
    head = ("shape B,T,H,D", "op", "ours fwd", "ours f+b", "fla fwd", "fla f+b", "fla/ours f+b",
            "ours %BW", "ours %TC", "sdpa f+b")
    rows = [head]
    for shape in SHAPES:
        ref = refs.get(shape, {})
        for op in OPS:
            rec = flame.get((op,) + shape)
            fla = ref.get("fla_" + op)
            sdpa = ref.get("sdpa_causal")
            if rec is None:
                continue
            t = rec["fwdbwd_ms"] * 1e-3
            rows.append((
                ",".join(map(str, shape)), op, f"{rec['fwd_ms']:.3f}", f"{rec['fwdbwd_ms']:.3f}",
                f"{fla[0]:.3f}" if fla else "-", f"{fla[1]:.3f}" if fla else "-",
                f"{fla[1] / rec['fwdbwd_ms']:.2f}x" if fla else "-",
                f"{100 * rec['fwdbwd_bytes'] / t / BANDWIDTH:.1f}%",
                f"{100 * rec['fwdbwd_flops'] / t / TENSOR_RATE:.1f}%",
                f"{sdpa[1]:.3f}" if sdpa else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    print("\ntimes in ms (median of 20, CUDA events); %BW and %TC are ours, forward+backward")
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def from_log(path):
    """Rebuilds the table from the JSON lines of an earlier run (e.g. one cut short)."""
    flame, refs = {}, {}
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            shape = (rec.get("B"), rec.get("T"), rec.get("H"), rec.get("D"))
            if rec.get("kind") == "flame_kernel":
                flame[(rec["op"],) + shape] = rec
            elif rec.get("kind") == "reference" and "fwd_ms" in rec:
                refs.setdefault(shape, {})[rec["op"]] = (rec["fwd_ms"], rec["fwdbwd_ms"])
    return flame, refs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", help="chunk_attention_benchmark")
    parser.add_argument("--skip-fla", action="store_true")
    parser.add_argument("--from-log", help="print the table of an earlier run's output and exit")
    args = parser.parse_args()
    if args.from_log:
        table(*from_log(args.from_log))
        return 0
    global torch, F
    import torch
    import torch.nn.functional as F
    emit(kind="env", torch=torch.__version__, gpu=torch.cuda.get_device_name(),
         triton=__import__("triton").__version__)
    flame = ours(args.binary)
    fla_ops = {} if args.skip_fla else load_fla()
    refs = {}

    # fla's first call per shape autotunes for minutes: when a time limit ends the run, print
    # what was measured so far.
    def print_partial(signum, frame):
        table(flame, refs)
        sys.exit(1)

    signal.signal(signal.SIGTERM, print_partial)
    for shape in SHAPES:
        refs[shape] = {}
        time_reference(fla_ops, *shape, refs[shape])
    table(flame, refs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
