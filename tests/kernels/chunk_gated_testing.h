// Test support for the gated chunk kernels (chunk_gla, chunk_simple_gla): random problems with
// bf16-rounded inputs, the fp32 reference, the GPU launchers run into poisoned buffers, and the
// relative RMS comparison ||out - ref|| / ||ref|| that names the worst element.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace flame::kernels::chunk_testing {

inline bool HasGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

inline float Bf16Round(float x) { return __bfloat162float(__float2bfloat16(x)); }

inline std::vector<float> Normal(size_t n, uint32_t seed, bool round_bf16) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> out(n);
  for (float& x : out) x = round_bf16 ? Bf16Round(dist(rng)) : dist(rng);
  return out;
}

// logsigmoid(N(0,1)) / normalizer: normalizer 10 is a weak decay, 0.01 a very strong one.
inline std::vector<float> LogSigmoidGate(size_t n, float normalizer, uint32_t seed) {
  std::vector<float> out = Normal(n, seed, false);
  for (float& x : out) x = -std::log1p(std::exp(-x)) / normalizer;
  return out;
}

struct Comparison {
  double rel_rms = 0;
  size_t non_finite = 0;
  size_t worst = 0;
  double worst_abs = 0;
};

inline Comparison Compare(const std::vector<float>& out, const std::vector<float>& ref) {
  Comparison c;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) {
      ++c.non_finite;
      continue;
    }
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
    if (std::fabs(d) > c.worst_abs) {
      c.worst_abs = std::fabs(d);
      c.worst = i;
    }
  }
  c.rel_rms = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

// Asserts rel_rms <= tol and that every element is finite (so also written: buffers start NaN).
inline void ExpectClose(const std::string& name, const std::vector<float>& out,
                        const std::vector<float>& ref, double tol) {
  ASSERT_EQ(out.size(), ref.size()) << name;
  const Comparison c = Compare(out, ref);
  EXPECT_EQ(c.non_finite, 0u) << name << ": non-finite or unwritten elements";
  EXPECT_LE(c.rel_rms, tol) << name << ": worst element " << c.worst << " got " << out[c.worst]
                            << " want " << ref[c.worst];
  std::printf("  %-4s rel_rms %.2e\n", name.c_str(), c.rel_rms);
}

// Device buffer, poisoned with NaN (all bits set) on creation.
template <typename T>
class Device {
 public:
  explicit Device(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, (n ? n : 1) * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
    if (ptr_) cudaMemset(ptr_, 0xff, (n ? n : 1) * sizeof(T));
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { cudaFree(ptr_); }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

inline Device<__nv_bfloat16>* NewBf16(const std::vector<float>& host) {
  auto* d = new Device<__nv_bfloat16>(host.size());
  std::vector<__nv_bfloat16> tmp(host.size());
  for (size_t i = 0; i < host.size(); ++i) tmp[i] = __float2bfloat16(host[i]);
  cudaMemcpy(d->get(), tmp.data(), tmp.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  return d;
}

template <typename T>
inline Device<T>* NewCopy(const std::vector<T>& host) {
  auto* d = new Device<T>(host.size());
  cudaMemcpy(d->get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

inline std::vector<float> ToHost(const Device<__nv_bfloat16>& d) {
  std::vector<__nv_bfloat16> tmp(d.size());
  cudaMemcpy(tmp.data(), d.get(), tmp.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
  std::vector<float> out(tmp.size());
  for (size_t i = 0; i < tmp.size(); ++i) out[i] = __bfloat162float(tmp[i]);
  return out;
}

inline std::vector<float> ToHost(const Device<float>& d) {
  std::vector<float> out(d.size());
  cudaMemcpy(out.data(), d.get(), out.size() * sizeof(float), cudaMemcpyDeviceToHost);
  return out;
}

}  // namespace flame::kernels::chunk_testing
