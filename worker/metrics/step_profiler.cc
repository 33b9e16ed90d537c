#include "worker/metrics/step_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace flame::worker {
namespace {

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

}  // namespace

StepProfiler::StepProfiler(const ProfilingConfig& config, const std::string& dump_folder,
                           int64_t rank, torch::Device device)
    : config_(config), dump_folder_(dump_folder), rank_(rank), device_(device) {}

StepProfiler::~StepProfiler() {
  // A step that threw leaves the profiler on: turn it off, dropping the partial trace.
  if (recording_) {
    step_event_.reset();
    kineto::disableProfiler();
  }
}

std::string StepProfiler::TracePath(int64_t step) const {
  return absl::StrCat(dump_folder_, "/", config_.save_traces_folder, "/iteration_", step, "/rank",
                      rank_, "_trace.json");
}

void StepProfiler::BeforeStep(int64_t step) {
  if (!config_.enable_profiling || step % config_.profile_freq != 0 || recording_) return;
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (device_.is_cuda()) activities.insert(ActivityType::CUDA);
  const ProfilerConfig profiler_config(ProfilerState::KINETO, /*report_input_shapes=*/true);
  kineto::prepareProfiler(profiler_config, activities);
  kineto::enableProfiler(profiler_config, activities);
  recording_ = true;
  // One enclosing event per traced step, as torch.profiler's schedule adds.
  step_name_ = absl::StrCat("ProfilerStep#", step);
  step_event_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (step_event_->isActive()) {
    step_event_->before(step_name_, c10::ArrayRef<const c10::IValue>{});
  }
}

absl::Status StepProfiler::AfterStep(int64_t step) {
  if (!recording_) return absl::OkStatus();
  step_event_.reset();  // ends the step's event
  recording_ = false;
  std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  const std::string path = TracePath(step);
  FLAME_RETURN_IF_ERROR(MakeDirectories(path.substr(0, path.rfind('/'))));
  if (result == nullptr) return absl::InternalError("the profiler returned no result");
  result->save(path);
  if (!PathExists(path)) {
    return absl::UnavailableError(absl::StrCat("the profiler did not write ", path));
  }
  if (rank_ == 0) {
    FLAME_LOG(INFO) << "step " << step << ": wrote the profiler trace " << path;
  }
  return absl::OkStatus();
}

}  // namespace flame::worker
