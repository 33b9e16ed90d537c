#include "worker/metrics/device_monitor.h"

#include <algorithm>

#include "worker/metrics/process_memory.h"

#ifdef FLAME_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace flame::worker {
namespace {

[[maybe_unused]] constexpr double kBytesPerGib = 1024.0 * 1024.0 * 1024.0;

}  // namespace

std::string DeviceMonitor::AcceleratorName() const {
#ifdef FLAME_WITH_CUDA
  if (device_.is_cuda()) {
    const c10::DeviceIndex index = device_.has_index() ? device_.index() : 0;
    return at::cuda::getDeviceProperties(index)->name;
  }
#endif
  return "";
}

MemorySample DeviceMonitor::Sample() {
  MemorySample sample;
#ifdef FLAME_WITH_CUDA
  if (device_.is_cuda()) {
    namespace allocator = c10::cuda::CUDACachingAllocator;
    const c10::DeviceIndex index = device_.has_index() ? device_.index() : 0;
    const auto stats = allocator::getDeviceStats(index);
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    sample.reserved_gib = static_cast<double>(stats.reserved_bytes[all].peak) / kBytesPerGib;
    sample.active_gib = static_cast<double>(stats.active_bytes[all].peak) / kBytesPerGib;
    allocator::resetPeakStats(index);
    largest_reserved_gib_ = std::max(largest_reserved_gib_, sample.reserved_gib);
    sample.peak_gib = largest_reserved_gib_;
    return sample;
  }
#endif
  const ProcessMemory memory = ReadProcessMemory();
  sample.reserved_gib = memory.resident_gib;
  sample.peak_gib = memory.peak_resident_gib;
  return sample;
}

}  // namespace flame::worker
