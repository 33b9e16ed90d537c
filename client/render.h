// How flamectl shows jobs to people: tables, durations, rates and the `watch` progress line.
// Pure functions of their arguments (the current time is one of them), unit-tested without a
// server. JSON output lives in json_output.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flame/v1/job.pb.h"

namespace flame::client {

// "RUNNING" for JOB_STATE_RUNNING.
std::string StateName(flame::v1::JobState state);

// SUCCEEDED, FAILED or CANCELLED: nothing more will happen unless the job is resumed.
bool IsTerminalState(flame::v1::JobState state);

// A terminal state or PAUSED: the job's workers are gone and `watch` stops.
bool IsStoppedState(flame::v1::JobState state);

// "45s", "3m05s", "2h03m", "3d04h"; "-" for a value that is not a finite duration.
std::string FormatDuration(double seconds);

// Three significant figures with a k/M/G suffix: "950", "1.23k", "45.6k", "1.20M".
std::string FormatRate(double value);

// The job's step target: the latest report's total, else the spec's training.steps.
int64_t TotalSteps(const flame::v1::Job& job);

// Seconds until the last step at the job's average pace so far; none before the first step.
std::optional<double> EstimateRemainingSeconds(const flame::v1::Progress& progress,
                                               int64_t total_steps);

// "[#######.............]" with `width` cells between the brackets.
std::string RenderProgressBar(int64_t step, int64_t total, int width);

// `flamectl list`: ID NAME STATE STEP LOSS TOKENS/S AGE, one row per job.
std::string RenderJobTable(const std::vector<flame::v1::Job>& jobs, int64_t now_ms);

// `flamectl status`: the job's facts as aligned `label  value` lines, then its attempts.
std::string RenderJobDetails(const flame::v1::Job& job, int64_t now_ms);

// One `watch` update: state, progress bar, step/total, loss, tokens/s, ETA (no newline).
std::string RenderWatchLine(const flame::v1::Job& job);

// One line after submit, cancel, pause or resume: "job <id> (<name>): <STATE>".
std::string RenderJobSummary(const flame::v1::Job& job);

}  // namespace flame::client
