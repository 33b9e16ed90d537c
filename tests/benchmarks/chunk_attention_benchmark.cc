// Times our chunk attention launchers -- chunk_simple_gla, chunk_gla, chunk_delta_rule and
// chunk_gated_delta_rule -- at fla's benchmark shapes, forward and forward+backward, and prints
// one JSON line per (op, shape). A binary, not a test: run it on the GPU host
// (tests/benchmarks/kernels_vs_fla.py puts it beside fla and SDPA).
//
// Timing: CUDA events around each repetition, median. 5 warm-ups and 20 repetitions, fewer for a
// slow case: the repetitions are cut so that one measurement takes about FLAME_BENCH_BUDGET_MS
// (default 1500; at least 3 repetitions), so that a slow kernel under development cannot stall
// the whole run.
// Inputs follow fla's own benchmarks: bf16 N(0,1) q, k, v, dO; GLA gates logsigmoid(N(0,1))
// (clamped at -5 for chunk_gla); delta rule: q and k L2-normalised per row, beta = sigmoid(N(0,1)),
// and for the gated op a per-head log decay g = logsigmoid(N(0,1)), passed as g itself (no
// in-kernel gate, l2norm or sigmoid, so that both sides run the same op).
//
// Counted work, per token and head, C = 64 (the chunk), every C x C block counted in full:
//   bytes  each input read once, each output written once (bf16 q,k,v,o,do,dq,dk,dv; fp32 gates,
//          beta and their gradients)
//   GLA flops          forward 2C(K+V) + 4KV (scores, A V, Q h, state update);
//                      backward 6CK + 4CV + 10KV (scores, dO V^T, intra dq/dk, A^T dO, state
//                      recompute, dh, inter dq/dk/dv)
//   delta-rule flops   forward 6CK + 4CV + 6KV + 2C^2/3: K K^T, the triangular inverse (C^3/3
//                      multiply-adds a chunk), W = T(bK), U = T(bV), W S, K^T Ut, Q S, Q K^T, M Ut;
//                      backward 16CK + 10CV + 16KV + 4C^2: W, U and the states recomputed, dv
//                      local (K Q^T, its product with dO), dh (Q^T dO, W^T dv, K dh), dq/dk/dw
//                      (dO h^T, dO Ut^T, its products with K and Q, Ut dh^T, dv h^T), and the
//                      WY backward (dW (bK)^T, dU (bV)^T, T^T dT T^T, dA K twice, T^T dW, T^T dU)
// -- the matrix products of the chunked algorithms as fla organises them, not a minimum; the
// gated delta rule's decays are elementwise and not counted.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/delta_rule/chunk_delta_rule.h"
#include "kernels/gated_delta_rule/chunk_gated_delta_rule.h"
#include "kernels/gla/chunk_gla.h"
#include "kernels/simple_gla/chunk_simple_gla.h"

namespace flame::kernels {
namespace {

#define BENCH_CHECK(expr)                                                                          \
  do {                                                                                             \
    const cudaError_t err_ = (expr);                                                               \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

struct Shape {
  int B, T, H, D;
};

// What one op needs from the harness: its launchers, and its counted work per token and head.
struct Timed {
  std::function<cudaError_t()> forward, backward;
  double fwd_bytes, bwd_bytes, fwd_flops, bwd_flops;  // per token and head
  size_t workspace_bytes;
};

// Device buffers of one case, freed together.
class Buffers {
 public:
  ~Buffers() {
    for (void* p : owned_) cudaFree(p);
  }
  template <typename T>
  T* Alloc(size_t n) {
    void* p = nullptr;
    BENCH_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    owned_.push_back(p);
    return static_cast<T*>(p);
  }

 private:
  std::vector<void*> owned_;
};

template <typename T>
void Upload(T* dst, const std::vector<T>& host) {
  BENCH_CHECK(cudaMemcpy(dst, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// f(begin, end) over [0, n) in one piece per hardware thread. (The inputs of the largest shape
// are 100 M values a tensor. Drawn on one thread, an op's run over the five shapes took ~53 s on
// the H200 host for ~4 s of timing at FLAME_BENCH_BUDGET_MS=400.)
template <typename F>
void ParallelRanges(size_t n, F f) {
  const size_t threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t step = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (size_t begin = 0; begin < n; begin += step) {
    pool.emplace_back(f, begin, std::min(n, begin + step));
  }
  for (auto& t : pool) t.join();
}

// N(0,1) value number i (< 2^40) of stream `seed`: splitmix64 of the pair, two uniforms,
// Box-Muller. A function of (seed, i) alone, so any thread can draw any part of a tensor.
float Normal(uint32_t seed, uint64_t i) {
  uint64_t z = (uint64_t{seed} << 40) + i + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u1 = (static_cast<float>(z >> 40) + 0.5f) / 16777216.0f;  // (0, 1), 24 bits
  const float u2 = static_cast<float>(z & 0xffffff) / 16777216.0f;      // [0, 1)
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
}

// N(0,1) rows of width `dim`, each scaled to unit L2 norm when `l2norm` (the delta rule's q, k).
void FillBf16(__nv_bfloat16* dst, size_t n, int dim, uint32_t seed, bool l2norm = false) {
  std::vector<__nv_bfloat16> host(n);
  ParallelRanges(n / dim, [&](size_t row_begin, size_t row_end) {
    std::vector<float> x(dim);
    for (size_t r = row_begin; r < row_end; ++r) {
      double ss = 0;
      for (int i = 0; i < dim; ++i) {
        x[i] = Normal(seed, r * dim + i);
        ss += double{x[i]} * x[i];
      }
      const float f = l2norm ? static_cast<float>(1.0 / std::sqrt(ss + 1e-6)) : 1.0f;
      for (int i = 0; i < dim; ++i) host[r * dim + i] = __float2bfloat16(x[i] * f);
    }
  });
  Upload(dst, host);
}

// logsigmoid(N(0,1)) (a log decay, clamped at -5 for GLA as fla's benchmark does), or
// sigmoid(N(0,1)) (beta in (0,1)).
enum class Dist { kLogSigmoid, kLogSigmoidClamped, kSigmoid };

void FillF32(float* dst, size_t n, uint32_t seed, Dist dist_kind) {
  std::vector<float> host(n);
  ParallelRanges(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const float z = Normal(seed, i);
      float& x = host[i];
      if (dist_kind == Dist::kSigmoid) {
        x = 1.0f / (1.0f + std::exp(-z));
      } else {
        x = -std::log1p(std::exp(-z));
        if (dist_kind == Dist::kLogSigmoidClamped) x = std::max(x, -5.0f);
      }
    }
  });
  Upload(dst, host);
}

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

// Median time of `fn` in ms, or a negative value when a launcher returns an error.
double MedianMs(const std::function<cudaError_t()>& fn, int max_reps, cudaError_t* err) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  // One untimed call first: it reports an unsupported shape, and its time sizes the run.
  BENCH_CHECK(cudaEventRecord(start));
  if ((*err = fn()) != cudaSuccess) return -1;
  BENCH_CHECK(cudaEventRecord(stop));
  BENCH_CHECK(cudaEventSynchronize(stop));
  float first = 0;
  BENCH_CHECK(cudaEventElapsedTime(&first, start, stop));
  const double budget = EnvInt("FLAME_BENCH_BUDGET_MS", 1500);
  const int reps =
      std::min(max_reps, std::max(3, static_cast<int>(budget / std::max(first, 1e-3f))));
  const int warmup = first > 50 ? 1 : EnvInt("FLAME_BENCH_WARMUP", 5);
  for (int i = 0; i < warmup; ++i) BENCH_CHECK(fn());
  BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    BENCH_CHECK(cudaEventRecord(start));
    BENCH_CHECK(fn());
    BENCH_CHECK(cudaEventRecord(stop));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Timed MakeGated(const std::string& op, const Shape& s, Buffers& buf) {
  const bool gla = op == "chunk_gla";
  const size_t rows = static_cast<size_t>(s.B) * s.T * s.H, n = rows * s.D;
  const size_t ng = gla ? n : rows;
  ChunkGatedParams p;
  p.batch = s.B;
  p.seq_len = s.T;
  p.heads = s.H;
  p.k_dim = p.v_dim = s.D;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  auto* q = buf.Alloc<__nv_bfloat16>(n);
  auto* k = buf.Alloc<__nv_bfloat16>(n);
  auto* v = buf.Alloc<__nv_bfloat16>(n);
  auto* d_o = buf.Alloc<__nv_bfloat16>(n);
  auto* g = buf.Alloc<float>(ng);
  FillBf16(q, n, s.D, 1);
  FillBf16(k, n, s.D, 2);
  FillBf16(v, n, s.D, 3);
  FillBf16(d_o, n, s.D, 4);
  FillF32(g, ng, 5, gla ? Dist::kLogSigmoidClamped : Dist::kLogSigmoid);
  p.q = q;
  p.k = k;
  p.v = v;
  p.d_o = d_o;
  p.g = g;
  p.qk_strides = p.v_strides = ContiguousStrides(s.T, s.H, s.D);
  p.g_strides = ContiguousStrides(s.T, s.H, gla ? s.D : 1);
  p.o = buf.Alloc<__nv_bfloat16>(n);
  p.dq = buf.Alloc<__nv_bfloat16>(n);
  p.dk = buf.Alloc<__nv_bfloat16>(n);
  p.dv = buf.Alloc<__nv_bfloat16>(n);
  p.dg = buf.Alloc<float>(ng);
  // The scores, and the per-chunk states unless FLAME_BENCH_RECOMPUTE_STATES=1, kept from the
  // forward for the backward as the worker keeps them: counted with the workspace.
  const size_t scores = gla ? GlaChunkScoresBytes(p) : SimpleGlaChunkScoresBytes(p);
  p.intra_scores = buf.Alloc<__nv_bfloat16>(scores / sizeof(__nv_bfloat16));
  const size_t kept = EnvInt("FLAME_BENCH_RECOMPUTE_STATES", 0) != 0
                          ? 0
                          : (gla ? GlaChunkStatesBytes(p) : SimpleGlaChunkStatesBytes(p));
  if (kept > 0) p.chunk_states = buf.Alloc<__nv_bfloat16>(kept / sizeof(__nv_bfloat16));
  const size_t ws =
      gla ? std::max(GlaChunkWorkspaceBytes(p, true), GlaChunkWorkspaceBytes(p, false))
          : std::max(SimpleGlaChunkWorkspaceBytes(p, true), SimpleGlaChunkWorkspaceBytes(p, false));
  p.workspace = buf.Alloc<unsigned char>(ws);

  const double C = kGatedChunkSize, K = s.D, V = s.D, gb = gla ? 4.0 * K : 4.0;
  Timed t;
  t.forward = [p, gla] {
    return gla ? GlaChunkForward(p, nullptr) : SimpleGlaChunkForward(p, nullptr);
  };
  t.backward = [p, gla] {
    return gla ? GlaChunkBackward(p, nullptr) : SimpleGlaChunkBackward(p, nullptr);
  };
  t.fwd_bytes = 2 * (2 * K + V) + gb + 2 * V;
  t.bwd_bytes = 2 * (2 * K + 2 * V) + gb + 2 * (2 * K + V) + gb;
  t.fwd_flops = 2 * C * (K + V) + 4 * K * V;
  t.bwd_flops = 6 * C * K + 4 * C * V + 10 * K * V;
  t.workspace_bytes = ws + scores + kept;
  return t;
}

Timed MakeDelta(const std::string& op, const Shape& s, Buffers& buf) {
  const bool gated = op == "chunk_gated_delta_rule";
  const size_t rows = static_cast<size_t>(s.B) * s.T * s.H, n = rows * s.D;
  ChunkDeltaParams p;
  p.batch = s.B;
  p.seq_len = s.T;
  p.heads = s.H;
  p.k_dim = p.v_dim = s.D;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  auto* q = buf.Alloc<__nv_bfloat16>(n);
  auto* k = buf.Alloc<__nv_bfloat16>(n);
  auto* v = buf.Alloc<__nv_bfloat16>(n);
  auto* d_o = buf.Alloc<__nv_bfloat16>(n);
  auto* beta = buf.Alloc<float>(rows);
  FillBf16(q, n, s.D, 1, /*l2norm=*/true);
  FillBf16(k, n, s.D, 2, /*l2norm=*/true);
  FillBf16(v, n, s.D, 3);
  FillBf16(d_o, n, s.D, 4);
  FillF32(beta, rows, 6, Dist::kSigmoid);
  p.q = q;
  p.k = k;
  p.v = v;
  p.d_o = d_o;
  p.beta = beta;
  p.qk_strides = p.v_strides = ContiguousStrides(s.T, s.H, s.D);
  p.scalar_strides = ContiguousStrides(s.T, s.H, 1);
  if (gated) {
    auto* a = buf.Alloc<float>(rows);
    FillF32(a, rows, 5, Dist::kLogSigmoid);
    p.a = a;  // the log decay g itself: gate_in_kernel stays off
    p.da = buf.Alloc<float>(rows);
  }
  p.o = buf.Alloc<__nv_bfloat16>(n);
  p.dq = buf.Alloc<__nv_bfloat16>(n);
  p.dk = buf.Alloc<__nv_bfloat16>(n);
  p.dv = buf.Alloc<__nv_bfloat16>(n);
  p.dbeta = buf.Alloc<float>(rows);
  // The per-chunk states kept from the forward for the backward, as for the gated ops.
  const size_t kept = EnvInt("FLAME_BENCH_RECOMPUTE_STATES", 0) != 0 ? 0
                      : gated ? GatedDeltaRuleChunkStatesBytes(p)
                              : DeltaRuleChunkStatesBytes(p);
  if (kept > 0) p.chunk_states = buf.Alloc<unsigned char>(kept);
  const size_t ws = gated ? std::max(GatedDeltaRuleChunkWorkspaceBytes(p, true),
                                     GatedDeltaRuleChunkWorkspaceBytes(p, false))
                          : std::max(DeltaRuleChunkWorkspaceBytes(p, true),
                                     DeltaRuleChunkWorkspaceBytes(p, false));
  p.workspace = buf.Alloc<unsigned char>(ws);

  const double C = kDeltaChunkSize, K = s.D, V = s.D, gb = gated ? 4.0 : 0.0;
  Timed t;
  t.forward = [p, gated] {
    return gated ? GatedDeltaRuleChunkForward(p, nullptr) : DeltaRuleChunkForward(p, nullptr);
  };
  t.backward = [p, gated] {
    return gated ? GatedDeltaRuleChunkBackward(p, nullptr) : DeltaRuleChunkBackward(p, nullptr);
  };
  t.fwd_bytes = 2 * (2 * K + V) + 4 + gb + 2 * V;
  t.bwd_bytes = 2 * (2 * K + 2 * V) + 4 + gb + 2 * (2 * K + V) + 4 + gb;
  t.fwd_flops = 6 * C * K + 4 * C * V + 6 * K * V + 2 * C * C / 3;
  t.bwd_flops = 16 * C * K + 10 * C * V + 16 * K * V + 4 * C * C;
  t.workspace_bytes = ws + kept;
  return t;
}

void Run(const std::string& op, const Shape& s, int reps) {
  std::printf(
      "{\"kind\": \"flame_kernel\", \"op\": \"%s\", \"B\": %d, \"T\": %d, \"H\": %d, "
      "\"D\": %d, ",
      op.c_str(), s.B, s.T, s.H, s.D);
  // K <= 256 for the delta rule; a shape a launcher refuses is reported, not fatal.
  if (op.find("delta") != std::string::npos && s.D > kDeltaMaxKDim) {
    std::printf("\"error\": \"unsupported: K = %d > %d\"}\n", s.D, kDeltaMaxKDim);
    std::fflush(stdout);
    return;
  }
  Buffers buf;
  const Timed t =
      op.find("delta") != std::string::npos ? MakeDelta(op, s, buf) : MakeGated(op, s, buf);
  cudaError_t err = cudaSuccess;
  const double fwd = MedianMs(t.forward, reps, &err);
  double fwdbwd = -1;
  if (err == cudaSuccess) {
    fwdbwd = MedianMs(
        [&t]() -> cudaError_t {
          const cudaError_t e = t.forward();
          return e != cudaSuccess ? e : t.backward();
        },
        reps, &err);
  }
  BENCH_CHECK(cudaDeviceSynchronize());
  if (err != cudaSuccess) {
    std::printf("\"error\": \"launcher: %s\"}\n", cudaGetErrorString(err));
    std::fflush(stdout);
    return;
  }
  const double th = static_cast<double>(s.B) * s.T * s.H;
  std::printf(
      "\"fwd_ms\": %.4f, \"fwdbwd_ms\": %.4f, \"fwd_bytes\": %.0f, \"fwdbwd_bytes\": %.0f, "
      "\"fwd_flops\": %.0f, \"fwdbwd_flops\": %.0f, \"workspace_bytes\": %zu}\n",
      fwd, fwdbwd, th * t.fwd_bytes, th * (t.fwd_bytes + t.bwd_bytes), th * t.fwd_flops,
      th * (t.fwd_flops + t.bwd_flops), t.workspace_bytes);
  std::fflush(stdout);
}

}  // namespace
}  // namespace flame::kernels

// Usage: chunk_attention_benchmark [op[,op...] [shape]], shape an index into fla's five or B,T,H,D
// (K = V = D) for one of its own; FLAME_BENCH_REPS (20),
// FLAME_BENCH_WARMUP (5) and FLAME_BENCH_BUDGET_MS (1500) set the repetitions (a profiler run
// wants 1, 0 and 0); FLAME_BENCH_RECOMPUTE_STATES=1 times every op's backward recomputing the
// per-chunk states instead of reading the forward's.
int main(int argc, char** argv) {
  using flame::kernels::Shape;
  std::vector<Shape> shapes = {{4, 2048, 16, 128},
                               {8, 2048, 16, 128},
                               {2, 16384, 16, 128},
                               {1, 8192, 96, 128},
                               {8, 4096, 8, 256}};
  const int reps = flame::kernels::EnvInt("FLAME_BENCH_REPS", 20);
  std::vector<std::string> ops = {"chunk_simple_gla", "chunk_gla", "chunk_delta_rule",
                                  "chunk_gated_delta_rule"};
  if (argc > 1) {
    ops.clear();
    std::string list = argv[1];
    for (size_t pos = 0; pos != std::string::npos;) {
      const size_t comma = list.find(',', pos);
      ops.push_back(list.substr(pos, comma == std::string::npos ? comma : comma - pos));
      pos = comma == std::string::npos ? comma : comma + 1;
    }
  }
  if (argc > 2) {
    Shape s{};
    if (std::sscanf(argv[2], "%d,%d,%d,%d", &s.B, &s.T, &s.H, &s.D) == 4) {
      if (s.B <= 0 || s.T <= 0 || s.H <= 0 || s.D <= 0 || s.D > 256 || s.D % 64 != 0) {
        std::fprintf(stderr, "shape %s: B, T, H > 0 and D of 64, 128, 192 or 256 wanted\n",
                     argv[2]);
        return 2;
      }
      shapes = {s};
    } else {
      char* end = nullptr;
      const long index = std::strtol(argv[2], &end, 10);
      if (end == argv[2] || *end != '\0' || index < 0 ||
          index >= static_cast<long>(shapes.size())) {
        std::fprintf(stderr, "shape %s: an index below %zu or B,T,H,D wanted\n", argv[2],
                     shapes.size());
        return 2;
      }
      shapes = {shapes[index]};
    }
  }
  for (const Shape& s : shapes) {
    for (const std::string& op : ops) flame::kernels::Run(op, s, reps);
  }
  return 0;
}
