#include "client/render.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace flame::client {
namespace {

using flame::v1::Job;
using flame::v1::Progress;

constexpr int kWatchBarWidth = 24;

// Columns separated by two spaces, each as wide as its widest cell; the last is not padded so
// that lines carry no trailing blanks.
std::string RenderTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string text;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&text, row[i]);
      if (i + 1 < row.size()) text.append(widths[i] - row[i].size() + 2, ' ');
    }
    text.push_back('\n');
  }
  return text;
}

std::string FormatLoss(const Progress& progress) {
  if (progress.step() <= 0) return "-";
  return absl::StrFormat("%.4f", progress.loss());
}

std::string FormatStep(const Job& job) {
  const int64_t total = TotalSteps(job);
  if (total <= 0) return absl::StrCat(job.progress().step());
  return absl::StrCat(job.progress().step(), "/", total);
}

std::string FormatTokensPerSecond(const Progress& progress) {
  if (progress.step() <= 0) return "-";
  return FormatRate(progress.tokens_per_second());
}

// MFU needs the accelerator's peak FLOPS; CPU ranks have none and report 0.
std::string FormatMfu(const Progress& progress) {
  const std::string tflops = absl::StrFormat("%.3g TFLOPS per device", progress.tflops());
  if (progress.mfu() <= 0) return absl::StrCat("- (no peak FLOPS for this device; ", tflops, ")");
  return absl::StrFormat("%.2f%% (%s)", progress.mfu(), tflops);
}

std::string FormatMemory(const Progress& progress) {
  std::string text =
      absl::StrFormat("%.2f GiB (peak %.2f GiB", progress.memory_gib(), progress.memory_peak_gib());
  if (progress.memory_active_gib() > 0) {
    absl::StrAppend(&text, absl::StrFormat(", active %.2f GiB", progress.memory_active_gib()));
  }
  return absl::StrCat(text, ")");
}

std::string FormatAge(int64_t since_ms, int64_t now_ms) {
  if (since_ms <= 0) return "-";
  return FormatDuration(static_cast<double>(now_ms - since_ms) / 1000.0);
}

std::string FormatPercent(int64_t step, int64_t total) {
  if (total <= 0) return "";
  const int64_t clamped = std::clamp<int64_t>(step, 0, total);
  return absl::StrCat(clamped * 100 / total, "%");
}

std::string DescribeOutcome(const flame::v1::Attempt& attempt) {
  switch (attempt.outcome()) {
    case flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED:
      return "running";
    case flame::v1::ATTEMPT_OUTCOME_SUCCEEDED:
      return "succeeded";
    case flame::v1::ATTEMPT_OUTCOME_FAILED:
      return "failed";
    case flame::v1::ATTEMPT_OUTCOME_CANCELLED:
      return "cancelled";
    case flame::v1::ATTEMPT_OUTCOME_PAUSED:
      return "paused";
    case flame::v1::ATTEMPT_OUTCOME_LOST:
      return "lost";
    default:
      return "unknown";
  }
}

std::vector<std::vector<std::string>> AttemptRows(const Job& job) {
  std::vector<std::vector<std::string>> rows = {{"  ATTEMPT", "FROM STEP", "OUTCOME", "MESSAGE"}};
  for (const flame::v1::Attempt& attempt : job.attempts()) {
    rows.push_back({absl::StrCat("  #", attempt.number()), absl::StrCat(attempt.start_step()),
                    DescribeOutcome(attempt), attempt.message()});
  }
  return rows;
}

}  // namespace

std::string StateName(flame::v1::JobState state) {
  std::string name = flame::v1::JobState_Name(state);
  if (name.empty()) return absl::StrCat("STATE_", static_cast<int>(state));
  constexpr absl::string_view kPrefix = "JOB_STATE_";
  return absl::StartsWith(name, kPrefix) ? name.substr(kPrefix.size()) : name;
}

bool IsTerminalState(flame::v1::JobState state) {
  return state == flame::v1::JOB_STATE_SUCCEEDED || state == flame::v1::JOB_STATE_FAILED ||
         state == flame::v1::JOB_STATE_CANCELLED;
}

bool IsStoppedState(flame::v1::JobState state) {
  return IsTerminalState(state) || state == flame::v1::JOB_STATE_PAUSED;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  // Whole seconds, rounded: a duration of 59.6 s reads as "1m00s", not "59s".
  const int64_t total = std::max<int64_t>(0, std::llround(seconds));
  const int64_t days = total / 86400, hours = total / 3600 % 24;
  const int64_t minutes = total / 60 % 60, secs = total % 60;
  if (total < 60) return absl::StrCat(secs, "s");
  if (total < 3600) return absl::StrFormat("%dm%02ds", minutes, secs);
  if (total < 86400) return absl::StrFormat("%dh%02dm", hours, minutes);
  return absl::StrFormat("%dd%02dh", days, hours);
}

std::string FormatRate(double value) {
  if (!std::isfinite(value)) return "-";
  constexpr struct {
    double scale;
    const char* suffix;
  } kUnits[] = {{1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& unit : kUnits) {
    // 999.6k would print as "1000k": such values move up to the next unit.
    if (std::fabs(value) >= unit.scale * 0.9995) {
      const double scaled = value / unit.scale;
      const int decimals = std::fabs(scaled) >= 99.95 ? 0 : std::fabs(scaled) >= 9.995 ? 1 : 2;
      return absl::StrFormat("%.*f%s", decimals, scaled, unit.suffix);
    }
  }
  return absl::StrFormat("%.0f", value);
}

int64_t TotalSteps(const Job& job) {
  if (job.progress().total_steps() > 0) return job.progress().total_steps();
  return job.spec().training().steps();
}

std::optional<double> EstimateRemainingSeconds(const Progress& progress, int64_t total_steps) {
  // elapsed_seconds counts training time over all attempts, not time spent queued or paused, so
  // its average per step is a fair pace even for a resumed job.
  if (progress.step() <= 0 || progress.elapsed_seconds() <= 0) return std::nullopt;
  const int64_t remaining = std::max<int64_t>(0, total_steps - progress.step());
  return progress.elapsed_seconds() / static_cast<double>(progress.step()) *
         static_cast<double>(remaining);
}

std::string RenderProgressBar(int64_t step, int64_t total, int width) {
  int filled = 0;
  if (total > 0) {
    const int64_t clamped = std::clamp<int64_t>(step, 0, total);
    filled = static_cast<int>(clamped * width / total);
  }
  return absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '.'), "]");
}

std::string RenderJobTable(const std::vector<Job>& jobs, int64_t now_ms) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "STATE", "STEP", "LOSS", "TOKENS/S", "AGE"}};
  for (const Job& job : jobs) {
    rows.push_back({job.id(), job.name().empty() ? "-" : job.name(), StateName(job.state()),
                    FormatStep(job), FormatLoss(job.progress()),
                    FormatTokensPerSecond(job.progress()),
                    FormatAge(job.create_time_ms(), now_ms)});
  }
  return RenderTable(rows);
}

std::string RenderJobDetails(const Job& job, int64_t now_ms) {
  const Progress& progress = job.progress();
  const int64_t total = TotalSteps(job);
  std::vector<std::vector<std::string>> rows = {
      {"id", job.id()},
      {"name", job.name().empty() ? "-" : job.name()},
      {"state", StateName(job.state())},
  };
  if (!job.message().empty()) rows.push_back({"message", job.message()});
  rows.push_back(
      {"step", absl::StrCat(FormatStep(job), " ", FormatPercent(progress.step(), total))});
  if (progress.step() > 0) {
    rows.push_back({"loss", absl::StrFormat("%s (max over ranks %.4f)", FormatLoss(progress),
                                            progress.max_loss())});
    if (progress.eval_step() > 0) {
      rows.push_back({"eval loss", absl::StrFormat("%.4f at step %d", progress.eval_loss(),
                                                   progress.eval_step())});
    }
    rows.push_back({"lr", absl::StrFormat("%.3g", progress.lr())});
    rows.push_back({"grad norm", absl::StrFormat("%.3g", progress.grad_norm())});
    if (progress.skipped_steps() > 0) {
      rows.push_back(
          {"skipped", absl::StrCat(progress.skipped_steps(), " updates (NaN/Inf gradient norm)")});
    }
    rows.push_back({"tokens/s", absl::StrCat(FormatTokensPerSecond(progress), " per device")});
    rows.push_back({"tokens", FormatRate(static_cast<double>(progress.tokens()))});
    rows.push_back({"mfu", FormatMfu(progress)});
    rows.push_back({"memory", FormatMemory(progress)});
    rows.push_back({"data wait", absl::StrFormat("%.1f%% of the step time (%.3fs per step)",
                                                 progress.data_loading_share(),
                                                 progress.data_loading_seconds())});
    rows.push_back({"elapsed", FormatDuration(progress.elapsed_seconds())});
  }
  if (!IsStoppedState(job.state())) {
    if (std::optional<double> eta = EstimateRemainingSeconds(progress, total)) {
      rows.push_back({"eta", FormatDuration(*eta)});
    }
  }
  rows.push_back({"age", FormatAge(job.create_time_ms(), now_ms)});
  if (job.checkpoints_size() > 0) {
    const auto& newest = job.checkpoints(job.checkpoints_size() - 1);
    rows.push_back({"checkpoint", absl::StrCat("step ", newest.step(), " ", newest.path())});
  }
  if (!job.job_dir().empty()) rows.push_back({"job dir", job.job_dir()});
  std::string text = RenderTable(rows);
  if (job.attempts_size() > 0) absl::StrAppend(&text, "attempts\n", RenderTable(AttemptRows(job)));
  return text;
}

std::string RenderWatchLine(const Job& job) {
  const Progress& progress = job.progress();
  const int64_t total = TotalSteps(job);
  std::vector<std::string> parts = {StateName(job.state())};
  if (total > 0) {
    parts.push_back(RenderProgressBar(progress.step(), total, kWatchBarWidth));
    parts.push_back(absl::StrCat(progress.step(), "/", total));
    parts.push_back(FormatPercent(progress.step(), total));
  }
  if (progress.step() > 0) {
    parts.push_back(absl::StrCat("loss ", FormatLoss(progress)));
    if (progress.eval_step() > 0) {
      parts.push_back(absl::StrFormat("eval %.4f", progress.eval_loss()));
    }
    parts.push_back(absl::StrCat(FormatRate(progress.tokens_per_second()), " tok/s"));
  }
  if (!IsStoppedState(job.state())) {
    if (std::optional<double> eta = EstimateRemainingSeconds(progress, total)) {
      parts.push_back(absl::StrCat("ETA ", FormatDuration(*eta)));
    }
  } else if (!job.message().empty()) {
    parts.push_back(absl::StrCat("(", job.message(), ")"));
  }
  return absl::StrJoin(parts, "  ");
}

std::string RenderJobSummary(const Job& job) {
  std::string text = absl::StrCat("job ", job.id());
  if (!job.name().empty()) absl::StrAppend(&text, " (", job.name(), ")");
  absl::StrAppend(&text, ": ", StateName(job.state()));
  if (!job.message().empty()) absl::StrAppend(&text, " - ", job.message());
  return text;
}

}  // namespace flame::client
