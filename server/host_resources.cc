#include "server/host_resources.h"

#include <glob.h>

#include <thread>

namespace flame::server {

int CountNvidiaGpus() {
  glob_t matches;
  if (::glob("/dev/nvidia[0-9]*", 0, nullptr, &matches) != 0) return 0;
  const int count = static_cast<int>(matches.gl_pathc);
  ::globfree(&matches);
  return count;
}

SlotPool DetectSlotPool(int gpus, int cpu_slots) {
  const int gpu_count = gpus < 0 ? CountNvidiaGpus() : gpus;
  if (gpu_count > 0) return SlotPool{SlotKind::kGpu, gpu_count};
  const int cpus =
      cpu_slots > 0 ? cpu_slots : static_cast<int>(std::thread::hardware_concurrency());
  return SlotPool{SlotKind::kCpu, cpus > 0 ? cpus : 1};
}

}  // namespace flame::server
