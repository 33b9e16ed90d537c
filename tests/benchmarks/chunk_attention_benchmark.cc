// Times our chunk_simple_gla and chunk_gla launchers at fla's benchmark shapes, forward and
// forward+backward, and prints one JSON line per (op, shape). A binary, not a test: run it on the
// GPU host (tests/benchmarks/kernels_vs_fla.py puts it beside fla and SDPA).
//
// Timing: CUDA events around each repetition, 5 warm-ups, median of 20.
// Counted work, per token and head, C = 64 (the chunk), every C x C block counted in full:
//   bytes  each input read once, each output written once (bf16 q,k,v,o,do,dq,dk,dv; fp32 g, dg)
//   flops  forward 2C(K+V) + 4KV (scores, A V, Q h, state update);
//          backward 6CK + 4CV + 10KV (scores, dO V^T, intra dq/dk, A^T dO, state recompute,
//          dh, inter dq/dk/dv) -- the matrix products of the chunked algorithm, not a minimum.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/gla/chunk_gla.h"
#include "kernels/simple_gla/chunk_simple_gla.h"

namespace flame::kernels {
namespace {

#define BENCH_CHECK(expr)                                                               \
  do {                                                                                  \
    const cudaError_t err_ = (expr);                                                    \
    if (err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

struct Shape {
  int B, T, H, D;
};

template <typename T>
T* Alloc(size_t n) {
  T* p = nullptr;
  BENCH_CHECK(cudaMalloc(&p, n * sizeof(T)));
  return p;
}

void FillBf16(__nv_bfloat16* dst, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<__nv_bfloat16> host(n);
  for (auto& x : host) x = __float2bfloat16(dist(rng));
  BENCH_CHECK(cudaMemcpy(dst, host.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
}

// logsigmoid(N(0,1)), clamped at -5 for GLA as fla's benchmark does.
void FillGate(float* dst, size_t n, uint32_t seed, bool clamp) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> host(n);
  for (auto& x : host) {
    x = -std::log1p(std::exp(-dist(rng)));
    if (clamp) x = std::max(x, -5.0f);
  }
  BENCH_CHECK(cudaMemcpy(dst, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

template <typename Fn>
double MedianMs(Fn fn, int reps) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < EnvInt("FLAME_BENCH_WARMUP", 5); ++i) fn();
  BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    BENCH_CHECK(cudaEventRecord(start));
    fn();
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

void Run(const std::string& op, const Shape& s, int reps) {
  const bool gla = op == "chunk_gla";
  const size_t rows = static_cast<size_t>(s.B) * s.T * s.H, n = rows * s.D;
  const size_t ng = gla ? n : rows;
  auto* q = Alloc<__nv_bfloat16>(n);
  auto* k = Alloc<__nv_bfloat16>(n);
  auto* v = Alloc<__nv_bfloat16>(n);
  auto* d_o = Alloc<__nv_bfloat16>(n);
  auto* o = Alloc<__nv_bfloat16>(n);
  auto* dq = Alloc<__nv_bfloat16>(n);
  auto* dk = Alloc<__nv_bfloat16>(n);
  auto* dv = Alloc<__nv_bfloat16>(n);
  auto* g = Alloc<float>(ng);
  auto* dg = Alloc<float>(ng);
  FillBf16(q, n, 1);
  FillBf16(k, n, 2);
  FillBf16(v, n, 3);
  FillBf16(d_o, n, 4);
  FillGate(g, ng, 5, gla);

  ChunkGatedParams p;
  p.batch = s.B;
  p.seq_len = s.T;
  p.heads = s.H;
  p.k_dim = p.v_dim = s.D;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  p.q = q;
  p.k = k;
  p.v = v;
  p.qk_strides = p.v_strides = ContiguousStrides(s.T, s.H, s.D);
  p.g = g;
  p.g_strides = ContiguousStrides(s.T, s.H, gla ? s.D : 1);
  p.o = o;
  p.d_o = d_o;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.dg = dg;
  const size_t ws_bytes = gla ? std::max(GlaChunkWorkspaceBytes(p, true), GlaChunkWorkspaceBytes(p, false))
                              : std::max(SimpleGlaChunkWorkspaceBytes(p, true),
                                         SimpleGlaChunkWorkspaceBytes(p, false));
  p.workspace = Alloc<unsigned char>(ws_bytes);

  auto forward = [&] { BENCH_CHECK(gla ? GlaChunkForward(p, nullptr) : SimpleGlaChunkForward(p, nullptr)); };
  auto backward = [&] { BENCH_CHECK(gla ? GlaChunkBackward(p, nullptr) : SimpleGlaChunkBackward(p, nullptr)); };
  const double fwd = MedianMs(forward, reps);
  const double fwdbwd = MedianMs([&] { forward(); backward(); }, reps);
  BENCH_CHECK(cudaDeviceSynchronize());

  const double C = 64, K = s.D, V = s.D, th = static_cast<double>(rows);
  const double g_bytes = gla ? 4.0 * K : 4.0;
  const double fwd_bytes = th * (2 * (2 * K + V) + g_bytes + 2 * V);
  const double bwd_bytes = th * (2 * (2 * K + 2 * V) + g_bytes + 2 * (2 * K + V) + g_bytes);
  const double fwd_flops = th * (2 * C * (K + V) + 4 * K * V);
  const double bwd_flops = th * (6 * C * K + 4 * C * V + 10 * K * V);
  std::printf(
      "{\"kind\": \"flame_kernel\", \"op\": \"%s\", \"B\": %d, \"T\": %d, \"H\": %d, \"D\": %d, "
      "\"fwd_ms\": %.4f, \"fwdbwd_ms\": %.4f, \"fwd_bytes\": %.0f, \"fwdbwd_bytes\": %.0f, "
      "\"fwd_flops\": %.0f, \"fwdbwd_flops\": %.0f, \"workspace_bytes\": %zu}\n",
      op.c_str(), s.B, s.T, s.H, s.D, fwd, fwdbwd, fwd_bytes, fwd_bytes + bwd_bytes, fwd_flops,
      fwd_flops + bwd_flops, ws_bytes);
  std::fflush(stdout);
  for (void* ptr : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v),
                    static_cast<void*>(d_o), static_cast<void*>(o), static_cast<void*>(dq),
                    static_cast<void*>(dk), static_cast<void*>(dv), static_cast<void*>(g),
                    static_cast<void*>(dg), p.workspace}) {
    cudaFree(ptr);
  }
}

}  // namespace
}  // namespace flame::kernels

// Usage: chunk_attention_benchmark [op [shape index]]; FLAME_BENCH_REPS (20) and
// FLAME_BENCH_WARMUP (5) set the repetitions (a profiler run wants 1 and 0).
int main(int argc, char** argv) {
  using flame::kernels::Shape;
  std::vector<Shape> shapes = {{4, 2048, 16, 128}, {8, 2048, 16, 128}, {2, 16384, 16, 128},
                               {1, 8192, 96, 128}, {8, 4096, 8, 256}};
  const int reps = flame::kernels::EnvInt("FLAME_BENCH_REPS", 20);
  std::vector<std::string> ops = {"chunk_simple_gla", "chunk_gla"};
  if (argc > 1) ops = {argv[1]};
  if (argc > 2) shapes = {shapes.at(std::atoi(argv[2]))};
  for (const Shape& s : shapes) {
    for (const std::string& op : ops) flame::kernels::Run(op, s, reps);
  }
  return 0;
}
