// Chrome traces of single training steps with LibTorch's Kineto profiler (profiling.*).
//
// flame's schedule: with profile_freq F, steps F, 2F, 3F, ... are traced, each into
//   <dump_folder>/<save_traces_folder>/iteration_<step>/rank<r>_trace.json
// (chrome://tracing or Perfetto read it). The profiler runs only during a traced step, so the
// other steps pay nothing. CPU ops are recorded on every device; CUDA kernels too on a CUDA device.
#pragma once

#include <ATen/record_function.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "worker/config/train_config.h"

namespace flame::worker {

class StepProfiler {
 public:
  StepProfiler(const ProfilingConfig& config, const std::string& dump_folder, int64_t rank,
               torch::Device device);
  ~StepProfiler();

  // Starts recording if `step` is one to trace. Call right before the step.
  void BeforeStep(int64_t step);
  // Stops recording and writes the trace, if BeforeStep started one. Call right after the step.
  absl::Status AfterStep(int64_t step);

  // Where the trace of `step` goes.
  std::string TracePath(int64_t step) const;

 private:
  ProfilingConfig config_;
  std::string dump_folder_;
  int64_t rank_;
  torch::Device device_;
  bool recording_ = false;
  std::string step_name_;  // "ProfilerStep#N", the step's own event
  std::unique_ptr<at::RecordFunction> step_event_;
};

}  // namespace flame::worker
