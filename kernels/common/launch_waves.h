// How many waves a grid takes on this device, for launchers that choose between variants of a
// kernel by the grid's fit (blocks per multiprocessor from the occupancy calculator: registers
// and shared memory). Host-side; included by the .cu launchers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flame::kernels {

// *sms = the current device's multiprocessors.
inline cudaError_t MultiprocessorCount(int* sms) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
  return err;
}

// *slots = blocks per SM x SMs for `kernel` at `threads` threads and `smem` bytes of dynamic
// shared memory, whose limit this raises first (as a launch would need; the occupancy
// calculator counts a block above 48 KB as not fitting until it is raised); 0 where a block does
// not fit: more shared memory than the device allows a block, or no block per SM.
inline cudaError_t GridSlots(const void* kernel, int threads, size_t smem, int64_t* slots) {
  *slots = 0;
  int device = 0, smem_limit = 0, sms = 0;
  cudaError_t err;
  if ((err = cudaGetDevice(&device)) != cudaSuccess ||
      (err = cudaDeviceGetAttribute(&smem_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                    device)) != cudaSuccess ||
      (err = MultiprocessorCount(&sms)) != cudaSuccess) {
    return err;
  }
  if (smem > static_cast<size_t>(smem_limit)) return cudaSuccess;
  int per_sm = 0;
  if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem))) != cudaSuccess ||
      (err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem)) !=
          cudaSuccess) {
    return err;
  }
  *slots = int64_t{per_sm} * sms;
  return cudaSuccess;
}

// *waves = ceil(blocks / GridSlots); 0 where a block does not fit.
inline cudaError_t GridWaves(const void* kernel, int threads, size_t smem, int64_t blocks,
                             int64_t* waves) {
  *waves = 0;
  int64_t slots = 0;
  if (cudaError_t err = GridSlots(kernel, threads, smem, &slots); err != cudaSuccess) return err;
  if (slots > 0) *waves = (blocks + slots - 1) / slots;
  return cudaSuccess;
}

}  // namespace flame::kernels
