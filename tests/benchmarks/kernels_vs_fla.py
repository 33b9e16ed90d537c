#!/usr/bin/env python3
"""Our chunk attention kernels beside fla's Triton kernels and PyTorch's causal SDPA, on one GPU.

Ops: chunk_simple_gla, chunk_gla, chunk_delta_rule, chunk_gated_delta_rule, at fla's shapes
(B, T, H, D) below, forward and forward+backward. Our side is tests/benchmarks'
chunk_attention_benchmark binary (CUDA events, median); fla and SDPA are timed here.

fla autotunes every Triton kernel at its first call per shape group, and on a fresh machine the
Triton compiles behind that take minutes per op (over 5 minutes for chunk_gla's first shape). So
the run is split in two, all under one TRITON_CACHE_DIR:

  1. `warm-all` starts background workers per (fla op, shape group) -- a group is the shapes
     that share fla's autotune key (H, K, V) -- that only *compile*: the autotuner's benchmark
     is replaced by a single launch, and FLA_CACHE_RESULTS=0 keeps those dummy timings out of the
     cache. The workers run side by side while our kernels build. A worker compiles one config
     after another, so where the cores outnumber the (op, group) pairs each pair gets several
     workers (shards), shard s compiling the s-th of every n configs the autotuner tries. The
     cores are shared out by each op's compile work (COMPILE_WEIGHT): on the 16-core H200 host,
     FLA_OPS=chunk_gla gave five workers per group, all done in 180-230 s; all four ops get
     one each there (chunk_gla two or three), too few to finish chunk_gla. A GPU holds at most
     WORKERS_PER_GPU workers, dealt round the GPUs of the host: on nvidia-h200-x2, 31 workers on
     one H200 ran out of its memory (each holds 1-11 GB), failing some of chunk_gla's and the
     delta rules' warm-ups; the 15 of a FLA_OPS=chunk_gla run on nvidia-h200 fit beside the
     timed runs.
  2. `run` times ours, then SDPA at every shape, then each (op, group) whose worker has finished:
     the workers still compiling are paused (SIGSTOP) while anything is timed, so the GPU and
     CPU are quiet; fla then autotunes for real (every config timed with do_bench, warmup 5 ms,
     rep 20 ms -- shorter than Triton's 25/100 so that the autotune fits the run; the configs and
     the choice rule are fla's) and each shape is called once more before timing. What is not
     finished by --deadline (seconds since the epoch) or within --op-budget-s per (op, group) is
     printed as not measured, with the reason.

    python3 tests/benchmarks/kernels_vs_fla.py warm-all --state-dir /tmp/fla-warm
    python3 tests/benchmarks/kernels_vs_fla.py run --binary build/k/chunk_attention_benchmark \
        --state-dir /tmp/fla-warm --deadline $(( $(date +%s) + 300 ))
    python3 tests/benchmarks/kernels_vs_fla.py table LOG   # the table of an earlier run's lines
    python3 tests/benchmarks/kernels_vs_fla.py profile --op chunk_delta_rule --shape 3 \
        --state-dir /tmp/fla-warm --deadline $(( $(date +%s) + 400 ))  # fla's kernels, one by one

Inputs, as in fla's benchmarks: bf16 N(0,1) q, k, v, dO; chunk_gla g = logsigmoid(x).clamp(-5)
[B,T,H,K]; chunk_simple_gla g = logsigmoid(x) [B,T,H]; delta rule: q and k L2-normalised per
row, beta = sigmoid(x) (bf16 for fla, fp32 for ours), and for the gated op g = logsigmoid(x)
[B,T,H] fp32 -- no in-kernel l2norm, sigmoid or gate on either side.
On Hopper with Triton 3.4-3.7.0 fla refuses its gated backward (fla issue #640, a Triton
miscompile); the guard is lifted here to *time* it, so fla's gradients are not used for anything.

Roofline columns (forward+backward): achieved bytes/s over 4.3 TB/s (the H200's measured copy
bandwidth) and achieved FLOP/s over 790 TFLOP/s (its measured bf16 matrix rate), for the work the
binary counts (see chunk_attention_benchmark.cc); fla's column uses the same counted work.
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time

BANDWIDTH = 4.3e12
TENSOR_RATE = 790e12
SHAPES = [(4, 2048, 16, 128), (8, 2048, 16, 128), (2, 16384, 16, 128), (1, 8192, 96, 128),
          (8, 4096, 8, 256)]
# Shapes that share fla's autotune key (H, K, V): compiled by the same warm-up workers.
GROUPS = [[0, 1, 2], [3], [4]]
OPS = ["chunk_simple_gla", "chunk_gla", "chunk_delta_rule", "chunk_gated_delta_rule"]
# FLA_OPS (comma-separated) narrows the run to those ops, ours and fla's (its warm-up workers
# and timing; SDPA is timed as always). With fewer ops each (op, shape group) gets more compile
# workers: FLA_OPS=chunk_gla gives chunk_gla's compiles, the slowest, the whole machine.
FLA_OPS = [op for op in os.environ.get("FLA_OPS", ",".join(OPS)).split(",") if op]

# Relative compile work of one (op, shape group) warm-up, for sharing the cores out: chunk_gla's
# took 890-1100 core-seconds per group on the H200 host (5 workers, 177-233 s), the others'
# 300-470 s with one worker each (12 workers on 16 cores).
COMPILE_WEIGHT = {"chunk_gla": 3.0}

# Warm-up workers per GPU: the 15 of a FLA_OPS=chunk_gla run on one H200 fit beside the timed
# runs; 31 on one ran out of its 140 GB. (16 is the nvidia-h200 kind's core count.)
WORKERS_PER_GPU = 16

torch = None  # imported where needed, so that `table` also works where torch is absent
F = None


def emit(**record):
    print(json.dumps(record), flush=True)


def import_torch():
    global torch, F
    import torch as torch_module
    import torch.nn.functional as functional
    torch, F = torch_module, functional


def patch_autotuner(compile_only, shard=0, shards=1):
    """Replaces the benchmark of Triton's autotuner: one launch (compile only; this shard's configs
    of `shards`), or a short bench."""
    import triton
    import triton.runtime.autotuner as autotuner
    import triton.testing

    if compile_only:
        calls = [0]

        def bench(kernel_call, quantiles=None, **_):
            # The autotuner tries configs in the same order in every shard: this shard compiles
            # (launches) every shards-th, and the others lose the dummy race (inf), so the config
            # it goes on with is one it compiled.
            mine = calls[0] % shards == shard
            calls[0] += 1
            if mine:
                kernel_call()
            t = 1.0 if mine else float("inf")
            return [t, t, t] if quantiles else t
    else:
        def bench(kernel_call, quantiles=None, **_):
            return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)
    # Triton >= 3.2 looks the benchmarker up through Autotuner.do_bench.
    # (a setter that ignores the value, for versions whose __init__ assigns it).
    autotuner.Autotuner.do_bench = property(lambda self: bench, lambda self, value: None)


def load_fla():
    import fla.ops.common.chunk_o as chunk_o
    if hasattr(chunk_o, "TRITON_ABOVE_3_4_0"):
        chunk_o.TRITON_ABOVE_3_4_0 = False  # timing only, see the module docstring
    from fla.ops.delta_rule import chunk_delta_rule
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.gla import chunk_gla
    from fla.ops.simple_gla import chunk_simple_gla
    return {"chunk_gla": chunk_gla, "chunk_simple_gla": chunk_simple_gla,
            "chunk_delta_rule": chunk_delta_rule, "chunk_gated_delta_rule": chunk_gated_delta_rule}


def make_case(fla_ops, op, B, T, H, D):
    """Inputs (leaves with grad) and a function that runs fla's op forward, returning o."""
    dev, dt = "cuda", torch.bfloat16

    def leaf(x):
        return x.detach().requires_grad_(True)

    q, k, v = (torch.randn(B, T, H, D, device=dev, dtype=dt) for _ in range(3))
    leaves = {"v": leaf(v)}
    if "delta" in op:
        leaves["q"] = leaf(F.normalize(q.float(), dim=-1).to(dt))
        leaves["k"] = leaf(F.normalize(k.float(), dim=-1).to(dt))
        leaves["beta"] = leaf(torch.randn(B, T, H, device=dev).sigmoid().to(dt))
    else:
        leaves["q"], leaves["k"] = leaf(q), leaf(k)
    if op == "chunk_gla":
        leaves["g"] = leaf(F.logsigmoid(torch.randn(B, T, H, D, device=dev)).clamp_min(-5))
    elif op in ("chunk_simple_gla", "chunk_gated_delta_rule"):
        leaves["g"] = leaf(F.logsigmoid(torch.randn(B, T, H, device=dev)))
    fn = fla_ops[op]
    L = leaves
    if op == "chunk_delta_rule":
        call = lambda: fn(L["q"], L["k"], L["v"], L["beta"])[0]
    elif op == "chunk_gated_delta_rule":
        call = lambda: fn(L["q"], L["k"], L["v"], L["g"], L["beta"])[0]
    else:
        call = lambda: fn(L["q"], L["k"], L["v"], g=L["g"])[0]
    return leaves, call


def fwd_bwd(leaves, call, do):
    for x in leaves.values():
        x.grad = None  # no gradient accumulation kernels in the timed region
    call().backward(do)


# ---------------------------------------------------------------------------------------------
# Warm-up workers


def warm_one(args):
    """Compiles fla's op for the shapes of one group (no real autotuning, nothing timed)."""
    os.environ["FLA_CACHE_RESULTS"] = "0"  # before fla is imported: keep dummy timings out
    start = time.time()
    state = os.path.join(args.state_dir, f"{args.op}.{args.group}.{args.shard}")
    with open(state + ".pid", "w") as f:
        f.write(str(os.getpid()))
    try:
        import_torch()
        patch_autotuner(compile_only=True, shard=args.shard, shards=args.shards)
        fla_ops = load_fla()
        for i in GROUPS[args.group]:
            leaves, call = make_case(fla_ops, args.op, *SHAPES[i])
            do = torch.randn_like(leaves["v"])
            fwd_bwd(leaves, call, do)
            torch.cuda.synchronize()
            del leaves, call, do
            torch.cuda.empty_cache()
        with open(state + ".done", "w") as f:
            f.write(json.dumps({"seconds": round(time.time() - start, 1)}))
    except Exception as ex:
        with open(state + ".failed", "w") as f:
            f.write(f"{type(ex).__name__}: {str(ex)[:300]}")
        raise
    return 0


def share_cores(pairs, cores):
    """Compile workers per (op, group): at least one each, the cores shared out by weight
    (largest remainders first), so that the slowest warm-ups get the most."""
    weight = {pair: COMPILE_WEIGHT.get(pair[0], 1.0) for pair in pairs}
    total = sum(weight.values())
    exact = {pair: max(1.0, cores * w / total) for pair, w in weight.items()}
    shards = {pair: int(x) for pair, x in exact.items()}
    spare = cores - sum(shards.values())
    for pair in sorted(pairs, key=lambda p: exact[p] - shards[p], reverse=True)[:max(spare, 0)]:
        shards[pair] += 1
    return shards


def gpu_count():
    """GPUs on this host (nvidia-smi -L; no torch import), 1 where that cannot tell; 1 as well
    where CUDA_VISIBLE_DEVICES already chooses, so that a caller's choice stands."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return 1
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 1
    return max(1, sum(line.startswith("GPU ") for line in out.splitlines()))


def warm_all(args):
    os.makedirs(args.state_dir, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    unknown = sorted(set(FLA_OPS) - set(OPS))
    if unknown:
        sys.exit(f"FLA_OPS: unknown ops {unknown}; the ops are {OPS}")
    pairs = [(op, g) for op in FLA_OPS for g in range(len(GROUPS))]
    # The workers dealt round the GPUs (a worker's memory stays taken while it is paused).
    gpus = gpu_count()
    worker_gpus = list(range(gpus)) if gpus > 1 else [None]
    shards = share_cores(pairs, min(os.cpu_count() or 1, WORKERS_PER_GPU * gpus))
    for (op, g), n in shards.items():
        with open(os.path.join(args.state_dir, f"{op}.{g}.shards"), "w") as f:
            f.write(str(n))
    started = 0
    for op, g in pairs:
        for shard in range(shards[(op, g)]):
            log = open(os.path.join(args.state_dir, f"{op}.{g}.{shard}.log"), "w")
            gpu = worker_gpus[started % len(worker_gpus)]
            started += 1
            worker_env = env if gpu is None else dict(env, CUDA_VISIBLE_DEVICES=str(gpu))
            # Lower priority than the kernel build and the timed runs; own session, so that
            # pausing and ending them touches nothing else.
            subprocess.Popen(["nice", "-n", "10", sys.executable, os.path.abspath(__file__),
                              "warm", "--op", op, "--group", str(g), "--shard", str(shard),
                              "--shards", str(shards[(op, g)]), "--state-dir", args.state_dir],
                             stdout=log, stderr=subprocess.STDOUT, env=worker_env,
                             start_new_session=True)
    where = "" if gpus == 1 else f", on GPUs {worker_gpus}"
    print(f"{len(pairs)} (op, shape group) pairs on {os.cpu_count()} cores{where}; "
          "compile workers: " + ", ".join(f"{op}.{g} {n}" for (op, g), n in shards.items()))
    return 0


class Workers:
    """The warm-up workers of a state dir: their progress, and pausing them while we time."""

    def __init__(self, state_dir):
        self.state_dir = state_dir

    def status(self, op, g):
        """done when every shard is; failed when one failed; else running."""
        try:
            shards = int(open(os.path.join(self.state_dir, f"{op}.{g}.shards")).read())
        except (OSError, ValueError):
            return "failed: no warm-up workers were started for it (warm-all)"
        states = [self._shard_status(os.path.join(self.state_dir, f"{op}.{g}.{s}"))
                  for s in range(shards)]
        failed = [x for x in states if x.startswith("failed")]
        if failed:
            return failed[0]
        return "done" if all(x == "done" for x in states) else "running"

    def _shard_status(self, base):
        if os.path.exists(base + ".done"):
            return "done"
        if os.path.exists(base + ".failed"):
            return "failed: " + open(base + ".failed").read()
        pid = self._pid(base)
        if pid is None or not self._alive(pid):
            return "failed: warm-up worker not running"
        return "running"

    def _pid(self, base):
        try:
            return int(open(base + ".pid").read())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _alive(pid):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False

    def signal_running(self, sig):
        for path in glob.glob(os.path.join(self.state_dir, "*.pid")):
            base = path[:-4]
            pid = self._pid(base)
            if pid and not os.path.exists(base + ".done") and self._alive(pid):
                try:  # the worker's whole group: it leads its own session, ptxas included
                    os.killpg(pid, sig)
                except OSError:
                    pass

    def pause(self):
        self.signal_running(signal.SIGSTOP)
        time.sleep(0.5)  # let kernels they had queued drain

    def resume(self):
        self.signal_running(signal.SIGCONT)

    def end(self):
        self.signal_running(signal.SIGCONT)
        self.signal_running(signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# Timing


class Deadline(Exception):
    pass


def on_alarm(signum, frame):
    raise Deadline()


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


def ours(binary, timeout_s):
    try:
        out = subprocess.run([binary, ",".join(FLA_OPS)], capture_output=True, text=True,
                             timeout=timeout_s)
        stdout, rc, stderr = out.stdout, out.returncode, out.stderr
    except subprocess.TimeoutExpired as ex:  # keep the cases it finished
        stdout, rc, stderr = ex.stdout or "", "timeout", f"over {timeout_s:.0f} s"
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
    for line in stdout.splitlines():
        if line.startswith("{") and line.endswith("}"):
            print(line, flush=True)
    if rc != 0:
        emit(kind="flame_binary_error", rc=rc, stderr=str(stderr)[-500:])


def time_sdpa(B, T, H, D):
    dev, dt = "cuda", torch.bfloat16
    q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, T, D, device=dev, dtype=dt)
    leaves = {"q": q, "k": k, "v": v}
    call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    try:
        fwd = median_ms(call)
        fwdbwd = median_ms(lambda: fwd_bwd(leaves, call, do))
        emit(kind="reference", op="sdpa_causal", B=B, T=T, H=H, D=D, fwd_ms=round(fwd, 4),
             fwdbwd_ms=round(fwdbwd, 4))
    except Exception as ex:
        emit(kind="reference", op="sdpa_causal", B=B, T=T, H=H, D=D, error=str(ex)[:300])
    del q, k, v, do, leaves
    torch.cuda.empty_cache()


def time_fla(fla_ops, op, B, T, H, D):
    start = time.time()
    leaves, call = make_case(fla_ops, op, B, T, H, D)
    do = torch.randn_like(leaves["v"])
    fwd_bwd(leaves, call, do)  # the shape's warm-up: autotunes over the compiled configs
    torch.cuda.synchronize()
    warm_s = time.time() - start
    fwd = median_ms(call)
    fwdbwd = median_ms(lambda: fwd_bwd(leaves, call, do))
    emit(kind="reference", op="fla_" + op, B=B, T=T, H=H, D=D, fwd_ms=round(fwd, 4),
         fwdbwd_ms=round(fwdbwd, 4), first_call_s=round(warm_s, 1))


def run(args):
    import_torch()
    emit(kind="env", torch=torch.__version__, gpu=torch.cuda.get_device_name(),
         triton=__import__("triton").__version__)
    workers = Workers(args.state_dir)
    workers.pause()
    ours(args.binary, max(10.0, args.deadline - time.time() - 60))
    for shape in SHAPES:
        time_sdpa(*shape)
    workers.resume()

    patch_autotuner(compile_only=False)
    try:
        fla_ops = load_fla()
    except Exception as ex:
        emit(kind="fla_status", op="*", group=-1, status=f"import failed: {str(ex)[:300]}")
        fla_ops = None
    pending = [(op, g) for op in FLA_OPS for g in range(len(GROUPS))] if fla_ops else []
    signal.signal(signal.SIGALRM, on_alarm)
    while pending and time.time() < args.deadline:
        ready = [(op, g) for op, g in pending if workers.status(op, g) != "running"]
        if not ready:
            time.sleep(1)
            continue
        op, g = ready[0]
        pending.remove((op, g))
        status = workers.status(op, g)
        if status != "done":
            emit(kind="fla_status", op=op, group=g, status=status)
            continue
        workers.pause()
        left = int(min(args.op_budget_s, args.deadline - time.time()))
        signal.alarm(max(left, 1))
        try:
            for i in GROUPS[g]:
                time_fla(fla_ops, op, *SHAPES[i])
            emit(kind="fla_status", op=op, group=g, status="timed")
        except Deadline:
            emit(kind="fla_status", op=op, group=g,
                 status=f"time budget ({left} s) ran out while autotuning or timing")
        except Exception as ex:
            emit(kind="fla_status", op=op, group=g, status=f"error: {str(ex)[:300]}")
        finally:
            signal.alarm(0)
            torch.cuda.empty_cache()
            workers.resume()
    for op, g in pending:
        emit(kind="fla_status", op=op, group=g,
             status="not timed: its compile warm-up had not finished by the run's deadline")
    workers.end()
    return 0


def profile(args):
    """fla's kernels for one op and shape: each kernel's CUDA time per forward+backward call
    (torch.profiler over --iters calls), after the real autotune, once the (op, shape group)'s
    warm-up workers are done. For comparing stage by stage with ours (compare_variants.sh's
    PROFILE_SHAPE, or ncu_profile.sh)."""
    import_torch()
    workers = Workers(args.state_dir)
    g = next(i for i, group in enumerate(GROUPS) if args.shape in group)
    while workers.status(args.op, g) == "running" and time.time() < args.deadline:
        time.sleep(1)
    status = workers.status(args.op, g)
    workers.end()
    if status != "done":
        emit(kind="fla_profile", op=args.op, shape=SHAPES[args.shape], status=status)
        return 1
    patch_autotuner(compile_only=False)
    fla_ops = load_fla()
    leaves, call = make_case(fla_ops, args.op, *SHAPES[args.shape])
    do = torch.randn_like(leaves["v"])
    for _ in range(3):  # autotune, then warm
        fwd_bwd(leaves, call, do)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity
    with torch.profiler.profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.iters):
            fwd_bwd(leaves, call, do)
        torch.cuda.synchronize()
    kernels = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = e.self_cuda_time_total
        if us > 0:
            kernels.append((us / args.iters, e.count / args.iters, e.key))
    kernels.sort(reverse=True)
    total = sum(k[0] for k in kernels)
    print(f"fla {args.op} at {SHAPES[args.shape]}: {total:.1f} us of kernels per forward+backward")
    for us, count, name in kernels:
        print(f"  {us:9.1f} us  x{count:4.1f}  {name[:110]}")
    return 0


# ---------------------------------------------------------------------------------------------
# The table


def read_log(path):
    flame, refs, notes = {}, {}, {}
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            shape = (rec.get("B"), rec.get("T"), rec.get("H"), rec.get("D"))
            if rec.get("kind") == "flame_kernel":
                flame[(rec["op"],) + shape] = rec
            elif rec.get("kind") == "reference" and "fwd_ms" in rec:
                refs[(rec["op"],) + shape] = (rec["fwd_ms"], rec["fwdbwd_ms"])
            elif rec.get("kind") == "fla_status" and rec["status"] != "timed":
                for i in (GROUPS[rec["group"]] if rec["group"] >= 0 else range(len(SHAPES))):
                    notes[(rec["op"],) + SHAPES[i]] = rec["status"]
    return flame, refs, notes


def table(flame, refs, notes):
    head = ("shape B,T,H,D", "op", "ours fwd", "ours f+b", "fla fwd", "fla f+b", "fla/ours fwd",
            "fla/ours f+b", "ours %BW", "ours %TC", "fla %TC", "sdpa fwd", "sdpa f+b")
    rows, footnotes = [head], {}  # reason -> shapes
    for shape in SHAPES:
        sdpa = refs.get(("sdpa_causal",) + shape)
        for op in OPS:
            rec = flame.get((op,) + shape)
            fla = refs.get(("fla_" + op,) + shape)
            if rec is None or "error" in rec:
                why = rec["error"] if rec else "not run"
                ours_cells = ["n/a"] * 2
                ratio_cells = ["-"] * 2
                roof = ["-"] * 3
                footnotes.setdefault(f"ours {op}: {why}", []).append(shape)
            else:
                ours_cells = [f"{rec['fwd_ms']:.3f}", f"{rec['fwdbwd_ms']:.3f}"]
                ratio_cells = ([f"{fla[0] / rec['fwd_ms']:.2f}x", f"{fla[1] / rec['fwdbwd_ms']:.2f}x"]
                               if fla else ["-"] * 2)
                t = rec["fwdbwd_ms"] * 1e-3
                roof = [f"{100 * rec['fwdbwd_bytes'] / t / BANDWIDTH:.1f}%",
                        f"{100 * rec['fwdbwd_flops'] / t / TENSOR_RATE:.1f}%",
                        f"{100 * rec['fwdbwd_flops'] / (fla[1] * 1e-3) / TENSOR_RATE:.1f}%"
                        if fla else "-"]
            if fla is None:
                note = notes.get((op,) + shape, "not timed")
                footnotes.setdefault(f"fla {op}: {note}", []).append(shape)
            rows.append((",".join(map(str, shape)), op, *ours_cells,
                         f"{fla[0]:.3f}" if fla else "n/m", f"{fla[1]:.3f}" if fla else "n/m",
                         *ratio_cells, *roof,
                         f"{sdpa[0]:.3f}" if sdpa else "-", f"{sdpa[1]:.3f}" if sdpa else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    print("\ntimes in ms (median, CUDA events); fla/ours > 1 means ours is faster; "
          "%BW and %TC are forward+backward")
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    if footnotes:
        print("\nnot measured (n/a: ours, n/m: fla):")
        for why, shapes in footnotes.items():
            print(f"  {why} -- at {' '.join(','.join(map(str, s)) for s in shapes)}")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("warm-all")
    p.add_argument("--state-dir", required=True)
    p = sub.add_parser("warm")
    p.add_argument("--op", required=True, choices=OPS)
    p.add_argument("--group", type=int, required=True)
    p.add_argument("--shard", type=int, default=0)
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--state-dir", required=True)
    p = sub.add_parser("run")
    p.add_argument("--binary", required=True, help="chunk_attention_benchmark")
    p.add_argument("--state-dir", required=True, help="the warm-all workers' folder")
    p.add_argument("--deadline", type=float, required=True, help="seconds since the epoch")
    p.add_argument("--op-budget-s", type=float, default=90,
                   help="most seconds for timing one (op, shape group) of fla")
    p = sub.add_parser("profile")
    p.add_argument("--op", required=True, choices=OPS)
    p.add_argument("--shape", type=int, required=True, help="index into SHAPES")
    p.add_argument("--state-dir", required=True, help="the warm-all workers' folder")
    p.add_argument("--deadline", type=float, required=True, help="seconds since the epoch")
    p.add_argument("--iters", type=int, default=10)
    p = sub.add_parser("table")
    p.add_argument("log")
    args = parser.parse_args()
    if args.mode == "warm-all":
        return warm_all(args)
    if args.mode == "warm":
        return warm_one(args)
    if args.mode == "run":
        return run(args)
    if args.mode == "profile":
        return profile(args)
    table(*read_log(args.log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
