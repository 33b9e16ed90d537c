// Helpers for the small-op kernel tests (norm, cross_entropy, conv, l2norm, rotary, activations):
// bf16-rounded random inputs, device buffers that are poisoned before every kernel run, the
// relative-RMS comparison with the worst element named, and a central-difference gradient check
// for the CPU references.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace flame::kernels::testing {

inline bool HasCudaDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define FLAME_SKIP_WITHOUT_GPU()                                            \
  do {                                                                      \
    if (!::flame::kernels::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#define FLAME_ASSERT_CUDA(expr)                                             \
  do {                                                                      \
    const cudaError_t flame_err_ = (expr);                                  \
    ASSERT_EQ(flame_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(flame_err_); \
  } while (0)

inline float RoundBf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// Uniform values in [lo, hi), rounded to bf16 so the GPU and the reference see the same inputs.
inline std::vector<float> RandomBf16(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = RoundBf16(dist(rng));
  return v;
}

inline std::vector<float> RandomNormal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = RoundBf16(dist(rng));
  return v;
}

// A device allocation of n elements of T (bf16, float, int32, int64).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, (n ? n : 1) * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  // All bits set: NaN for bf16 and fp32, so an element the kernel never writes fails the check.
  cudaError_t Poison() { return cudaMemset(ptr_, 0xFF, n_ * sizeof(T)); }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

inline std::unique_ptr<DeviceBuffer<__nv_bfloat16>> ToDeviceBf16(const std::vector<float>& v) {
  auto buf = std::make_unique<DeviceBuffer<__nv_bfloat16>>(v.size());
  std::vector<__nv_bfloat16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16(v[i]);
  cudaMemcpy(buf->get(), h.data(), h.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  return buf;
}

template <typename T>
std::unique_ptr<DeviceBuffer<T>> ToDevice(const std::vector<T>& v) {
  auto buf = std::make_unique<DeviceBuffer<T>>(v.size());
  cudaMemcpy(buf->get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return buf;
}

inline std::vector<float> ToHost(const DeviceBuffer<__nv_bfloat16>& buf) {
  std::vector<__nv_bfloat16> h(buf.size());
  cudaMemcpy(h.data(), buf.get(), h.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = __bfloat162float(h[i]);
  return v;
}

inline std::vector<float> ToHost(const DeviceBuffer<float>& buf) {
  std::vector<float> v(buf.size());
  cudaMemcpy(v.data(), buf.get(), v.size() * sizeof(float), cudaMemcpyDeviceToHost);
  return v;
}

// ||got - ref|| / ||ref|| over all elements; every element of got must be finite (written).
inline ::testing::AssertionResult RelRmsWithin(const std::string& name,
                                               const std::vector<float>& got,
                                               const std::vector<float>& ref, double tol) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure() << name << ": size " << got.size() << " vs " << ref.size();
  }
  double err2 = 0.0, ref2 = 0.0, worst = -1.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      return ::testing::AssertionFailure()
             << name << "[" << i << "] = " << got[i] << " (unwritten or not finite), ref "
             << ref[i];
    }
    const double d = static_cast<double>(got[i]) - ref[i];
    err2 += d * d;
    ref2 += static_cast<double>(ref[i]) * ref[i];
    if (std::fabs(d) > worst) worst = std::fabs(d), worst_i = i;
  }
  const double rel = std::sqrt(err2) / std::max(std::sqrt(ref2), 1e-30);
  if (rel <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << name << ": relative RMS error " << rel << " > " << tol << "; worst element [" << worst_i
         << "] got " << got[worst_i] << " ref " << ref[worst_i];
}

// Central differences of a scalar function of `x` (perturbed in place), for checking the
// references' backward passes: d loss / d x[i] ~ (f(x + h e_i) - f(x - h e_i)) / 2h.
inline std::vector<float> FiniteDifferenceGradient(std::vector<float>& x,
                                                   const std::function<double()>& loss,
                                                   float step) {
  std::vector<float> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + step;
    const double up = loss();
    x[i] = saved - step;
    const double down = loss();
    x[i] = saved;
    grad[i] = static_cast<float>((up - down) / (2.0 * step));
  }
  return grad;
}

// sum_i a[i] * b[i] in double: the scalar "loss" whose gradient w.r.t. an output is b.
inline double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace flame::kernels::testing
