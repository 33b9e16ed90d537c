// The bounded metric history kept in every Job record (Job.history).
//
// A job may log hundreds of thousands of steps, but its record is rewritten on every progress
// report, so the history must stay small. When it is full, every second point of its older half
// is dropped: recent steps keep full resolution, older ones get coarser, and the very first
// point (the loss at the start, which users compare against) is never dropped.
#pragma once

#include <cstddef>

#include "flame/v1/job.pb.h"
#include "google/protobuf/repeated_field.h"

namespace flame::server {

inline constexpr size_t kDefaultHistoryCapacity = 512;

// Appends `point` (steps must not go backwards; a point at an older or equal step replaces the
// tail from that step on, which is what a resumed attempt re-logging steps means), thinning the
// oldest half first when the history holds `capacity` points. `capacity` must be at least 4.
void AppendHistoryPoint(google::protobuf::RepeatedPtrField<flame::v1::MetricPoint>* history,
                        const flame::v1::MetricPoint& point, size_t capacity);

// The point a progress report contributes to the history.
flame::v1::MetricPoint HistoryPointFromProgress(const flame::v1::Progress& progress);

}  // namespace flame::server
