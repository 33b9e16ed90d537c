// Small-op kernel benchmark: times each fused op forward and backward at training shapes and
// prints the achieved bandwidth against a measured device-to-device copy (these ops are memory
// bound), and TFLOP/s for the fused linear cross-entropy (matmul bound).
//
//   small_ops_benchmark [reps]        (default 30 timed launches per op, median reported)
//
// Bytes counted are the fewest each op must move: every input read once, every output written
// once (partial-sum scratch and the second read of long cross-entropy rows are not counted).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/activations/swiglu.h"
#include "kernels/conv/short_conv.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/cross_entropy/linear_cross_entropy.h"
#include "kernels/l2norm/l2norm.h"
#include "kernels/norm/rms_norm.h"
#include "kernels/rotary/rotary.h"

namespace flame::kernels {
namespace {

using bf16 = __nv_bfloat16;

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

// Device memory that lives until the end of the run (the benchmark frees nothing early).
template <typename T>
T* Alloc(size_t n) {
  void* p = nullptr;
  Check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}

// Random bf16 in [lo, hi): a 4 MB host pattern tiled over the buffer (never zeros).
bf16* RandomBf16(size_t n, float lo, float hi, uint32_t seed) {
  bf16* d = Alloc<bf16>(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<bf16> pattern(std::min<size_t>(n, size_t{1} << 21));
  for (auto& v : pattern) v = __float2bfloat16(dist(rng));
  for (size_t off = 0; off < n; off += pattern.size()) {
    const size_t len = std::min(pattern.size(), n - off);
    Check(cudaMemcpy(d + off, pattern.data(), len * sizeof(bf16), cudaMemcpyHostToDevice), "fill");
  }
  return d;
}

int g_reps = 30;

// Median time in ms of `reps` launches of f, after warm-up launches.
double TimeMs(const std::function<cudaError_t()>& f) {
  for (int i = 0; i < 3; ++i) Check(f(), "warm-up launch");
  Check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms(g_reps);
  for (int i = 0; i < g_reps; ++i) {
    cudaEventRecord(start);
    Check(f(), "launch");
    cudaEventRecord(stop);
    Check(cudaEventSynchronize(stop), "run");
    cudaEventElapsedTime(&ms[i], start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(ms.begin(), ms.begin() + g_reps / 2, ms.end());
  return ms[g_reps / 2];
}

double g_copy_gbps = 0;

void Row(const std::string& op, const std::string& shape, double fwd_ms, double fwd_bytes,
         double bwd_ms, double bwd_bytes) {
  const double fwd_gbps = fwd_bytes / fwd_ms / 1e6, bwd_gbps = bwd_bytes / bwd_ms / 1e6;
  std::printf("%-22s %-22s %8.3f %8.0f %5.0f%% | %8.3f %8.0f %5.0f%%\n", op.c_str(), shape.c_str(),
              fwd_ms, fwd_gbps, 100 * fwd_gbps / g_copy_gbps, bwd_ms, bwd_gbps,
              100 * bwd_gbps / g_copy_gbps);
}

std::string Shape(int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); }

void MeasureCopy() {
  const size_t bytes = size_t{2} << 30;
  char* a = Alloc<char>(bytes);
  char* b = Alloc<char>(bytes);
  Check(cudaMemset(a, 1, bytes), "memset");
  const double ms = TimeMs([&] { return cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
  g_copy_gbps = 2.0 * bytes / ms / 1e6;
  std::printf("device-to-device copy: %.0f GB/s (read + write), the bandwidth ceiling below\n\n",
              g_copy_gbps);
  cudaFree(a);
  cudaFree(b);
}

void BenchRmsNorm(int64_t rows, int dim, bool residual, bool gate, const char* name) {
  const size_t n = size_t(rows) * dim;
  bf16 *x = RandomBf16(n, -2, 2, 1), *res = RandomBf16(n, -2, 2, 2), *w = RandomBf16(dim, 0.5, 1.5, 3);
  bf16 *g = RandomBf16(n, -3, 3, 4), *dy = RandomBf16(n, -1, 1, 5), *dres = RandomBf16(n, -1, 1, 6);
  bf16 *y = Alloc<bf16>(n), *h = Alloc<bf16>(n), *dx = Alloc<bf16>(n), *dg = Alloc<bf16>(n);
  float *rstd = Alloc<float>(rows), *dw = Alloc<float>(dim);
  float* ws = Alloc<float>(RmsNormBackwardWorkspaceBytes(rows, dim) / sizeof(float));
  RmsNormForwardParams f;
  f.x = x, f.residual = residual ? res : nullptr, f.weight = w, f.gate = gate ? g : nullptr;
  f.y = y, f.residual_out = residual ? h : nullptr, f.rstd = rstd, f.rows = rows, f.dim = dim;
  RmsNormBackwardParams b;
  b.h = residual ? h : x, b.weight = w, b.gate = f.gate, b.rstd = rstd, b.dy = dy;
  b.dresidual_out = residual ? dres : nullptr, b.dx = dx, b.dgate = gate ? dg : nullptr;
  b.dweight = dw, b.workspace = ws, b.rows = rows, b.dim = dim;
  const double fwd = TimeMs([&] { return RmsNormForward(f, nullptr); });
  const double bwd = TimeMs([&] { return RmsNormBackward(b, nullptr); });
  const double t = 2.0 * n;  // bytes of one bf16 tensor
  Row(name, Shape(rows, dim), fwd, t * (2 + (residual ? 2 : 0) + (gate ? 1 : 0)), bwd,
      t * (3 + (residual ? 1 : 0) + (gate ? 2 : 0)));
}

void BenchCrossEntropy(int64_t rows, int vocab) {
  bf16* logits = RandomBf16(size_t(rows) * vocab, -4, 4, 7);
  std::vector<int64_t> labels(rows);
  std::mt19937 rng(8);
  for (auto& l : labels) l = rng() % vocab;
  labels[0] = kIgnoreIndex;
  int64_t* d_labels = Alloc<int64_t>(rows);
  Check(cudaMemcpy(d_labels, labels.data(), rows * 8, cudaMemcpyHostToDevice), "labels");
  float* loss = Alloc<float>(1);
  char* ws = Alloc<char>(CrossEntropyWorkspaceBytes(rows));
  CrossEntropyParams p;
  p.logits = logits, p.labels = d_labels, p.loss = loss, p.workspace = ws, p.rows = rows;
  p.vocab = vocab;
  // Forward and backward are one kernel here (the gradient is written in place).
  const double ms = TimeMs([&] { return CrossEntropyForwardBackward(p, nullptr); });
  Row("cross_entropy (fwd+bwd)", Shape(rows, vocab), ms, 4.0 * rows * vocab, ms,
      4.0 * rows * vocab);
}

void BenchLinearCrossEntropy(int64_t rows, int dim, int vocab, cublasHandle_t handle) {
  bf16 *hidden = RandomBf16(size_t(rows) * dim, -1, 1, 9), *weight = RandomBf16(size_t(vocab) * dim, -0.05, 0.05, 10);
  std::vector<int64_t> labels(rows);
  std::mt19937 rng(11);
  for (auto& l : labels) l = rng() % vocab;
  int64_t* d_labels = Alloc<int64_t>(rows);
  Check(cudaMemcpy(d_labels, labels.data(), rows * 8, cudaMemcpyHostToDevice), "labels");
  LinearCrossEntropyParams p;
  p.hidden = hidden, p.weight = weight, p.labels = d_labels, p.loss = Alloc<float>(1);
  p.dhidden = Alloc<bf16>(size_t(rows) * dim), p.dweight = Alloc<float>(size_t(vocab) * dim);
  p.cublas = handle, p.rows = rows, p.dim = dim, p.vocab = vocab;
  const int chunk = LinearCrossEntropyDefaultChunk(rows, dim, vocab);
  p.workspace = Alloc<char>(LinearCrossEntropyWorkspaceBytes(rows, vocab, chunk));
  const double ms = TimeMs([&] { return LinearCrossEntropyForwardBackward(p, nullptr); });
  const double flop = 6.0 * rows * dim * vocab;
  std::printf("%-22s %-22s %8.3f ms  %6.0f TFLOP/s (3 matmuls, chunk %d rows)\n",
              "linear_cross_entropy", (Shape(rows, dim) + "x" + std::to_string(vocab)).c_str(), ms,
              flop / ms / 1e9, chunk);
}

void BenchShortConv(int64_t tokens, int dim, int width) {
  const size_t n = size_t(tokens) * dim;
  bf16 *x = RandomBf16(n, -2, 2, 12), *dy = RandomBf16(n, -1, 1, 13);
  bf16* w = RandomBf16(size_t(dim) * width, -0.5, 0.5, 14);
  ShortConvForwardParams f;
  f.x = x, f.weight = w, f.y = Alloc<bf16>(n), f.tokens = tokens, f.dim = dim;
  f.kernel_size = width, f.seq_len = 2048;
  ShortConvBackwardParams b;
  b.x = x, b.weight = w, b.dy = dy, b.dx = Alloc<bf16>(n), b.dweight = Alloc<float>(dim * width);
  b.workspace = Alloc<float>(ShortConvBackwardWorkspaceBytes(tokens, dim, width) / 4);
  b.tokens = tokens, b.dim = dim, b.kernel_size = width, b.seq_len = 2048;
  const double fwd = TimeMs([&] { return ShortConvForward(f, nullptr); });
  const double bwd = TimeMs([&] { return ShortConvBackward(b, nullptr); });
  Row("short_conv W=4 silu", Shape(tokens, dim), fwd, 4.0 * n, bwd, 6.0 * n);
}

void BenchL2Norm(int64_t rows, int dim) {
  const size_t n = size_t(rows) * dim;
  bf16 *x = RandomBf16(n, -2, 2, 15), *dy = RandomBf16(n, -1, 1, 16);
  L2NormForwardParams f;
  f.x = x, f.y = Alloc<bf16>(n), f.rows = rows, f.dim = dim;
  L2NormBackwardParams b;
  b.x = x, b.dy = dy, b.dx = Alloc<bf16>(n), b.rows = rows, b.dim = dim;
  const double fwd = TimeMs([&] { return L2NormForward(f, nullptr); });
  const double bwd = TimeMs([&] { return L2NormBackward(b, nullptr); });
  Row("l2norm", Shape(rows, dim), fwd, 4.0 * n, bwd, 6.0 * n);
}

void BenchRotary(int64_t tokens, int heads, int dim) {
  const size_t n = size_t(tokens) * heads * dim;
  RotaryParams p;
  p.x = RandomBf16(n, -2, 2, 17), p.y = Alloc<bf16>(n), p.tokens = tokens, p.heads = heads;
  p.head_dim = dim, p.seq_len = 2048;
  const double fwd = TimeMs([&] { return RotaryForward(p, nullptr); });
  const double bwd = TimeMs([&] { return RotaryBackward(p, nullptr); });
  Row("rotary", Shape(tokens, heads * dim), fwd, 4.0 * n, bwd, 4.0 * n);
}

void BenchSwiGlu(int64_t rows, int dim) {
  const size_t n = size_t(rows) * dim;
  SwiGluForwardParams f;
  f.gate = RandomBf16(n, -4, 4, 18), f.up = RandomBf16(n, -2, 2, 19), f.y = Alloc<bf16>(n);
  f.rows = rows, f.dim = dim;
  SwiGluBackwardParams b;
  b.gate = f.gate, b.up = f.up, b.dy = RandomBf16(n, -1, 1, 20), b.dgate = Alloc<bf16>(n);
  b.dup = Alloc<bf16>(n), b.rows = rows, b.dim = dim;
  const double fwd = TimeMs([&] { return SwiGluForward(f, nullptr); });
  const double bwd = TimeMs([&] { return SwiGluBackward(b, nullptr); });
  Row("swiglu", Shape(rows, dim), fwd, 6.0 * n, bwd, 10.0 * n);
}

}  // namespace
}  // namespace flame::kernels

int main(int argc, char** argv) {
  using namespace flame::kernels;
  if (argc > 1) g_reps = std::max(3, std::atoi(argv[1]));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: nothing to time\n");
    return 0;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs, median of %d launches\n", prop.name, prop.multiProcessorCount, g_reps);
  MeasureCopy();
  std::printf("%-22s %-22s %8s %8s %6s | %8s %8s %6s\n", "op", "shape", "fwd ms", "GB/s", "copy",
              "bwd ms", "GB/s", "copy");
  const int64_t n = 16384;  // rows: e.g. 8 x 2048 tokens
  BenchRmsNorm(n, 1024, true, false, "rmsnorm+residual");
  BenchRmsNorm(n, 2048, true, false, "rmsnorm+residual");
  BenchRmsNorm(n, 2048, false, false, "rmsnorm");
  BenchRmsNorm(n * 16, 128, false, true, "rmsnorm gated (head)");
  BenchRmsNorm(n * 4, 512, false, true, "rmsnorm gated (head)");
  BenchCrossEntropy(n, 32000);
  BenchShortConv(n, 2048, 4);
  BenchShortConv(n, 4096, 4);
  BenchL2Norm(n * 16, 128);
  BenchL2Norm(n * 6, 256);
  BenchRotary(n, 16, 128);
  BenchSwiGlu(n, 2816);
  BenchSwiGlu(n, 5632);
  cublasHandle_t handle;
  if (cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS) {
    BenchLinearCrossEntropy(n, 1024, 32000, handle);
    BenchLinearCrossEntropy(n, 2048, 32000, handle);
    cublasDestroy(handle);
  }
  return 0;
}
