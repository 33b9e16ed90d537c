// What this host offers to run workers on.
#pragma once

#include "server/scheduler.h"

namespace flame::server {

// NVIDIA GPUs visible as /dev/nvidia0, /dev/nvidia1, ...
int CountNvidiaGpus();

// The slot pool: GPUs when there are any, else CPU slots. A negative `gpus` means "detect"; a
// non-positive `cpu_slots` means "one per online CPU".
SlotPool DetectSlotPool(int gpus, int cpu_slots);

}  // namespace flame::server
