// The job life cycle as a table of legal transitions over flame.v1.JobState.
//
//   QUEUED ─▶ STARTING ─▶ RUNNING ─▶ SUCCEEDED | FAILED | CANCELLED
//     │          │           ├─▶ PAUSING ─▶ PAUSED
//     │          ├───────────┼─▶ CANCELLING ─▶ CANCELLED
//     │          └───────────┴─▶ RESTARTING ─▶ STARTING      (a failed attempt within budget)
//     └─▶ CANCELLED                 CANCELLED | PAUSED | FAILED ─▶ QUEUED   (resume)
//
// Every change of Job.state in flamed goes through CheckTransition, so an impossible sequence
// (a paused job "succeeding", a finished job being cancelled) is refused in one place. Pure
// logic: no gRPC, no RocksDB.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "flame/v1/job.pb.h"

namespace flame::server {

// OK when `from -> to` is a legal transition; FAILED_PRECONDITION naming both states otherwise.
absl::Status CheckTransition(flame::v1::JobState from, flame::v1::JobState to);

// SUCCEEDED, FAILED, CANCELLED: no workers run and none will without a user's resume.
bool IsTerminal(flame::v1::JobState state);

// Terminal or PAUSED: nothing runs until a user acts. Watches and log follows end here.
bool IsSettled(flame::v1::JobState state);

// STARTING, RUNNING, PAUSING, CANCELLING, RESTARTING: the job holds slots and has (or is about
// to have) worker processes.
bool HoldsResources(flame::v1::JobState state);

// CANCELLED, PAUSED, FAILED: ResumeJob may queue the job again.
bool IsResumable(flame::v1::JobState state);

// "RUNNING", "CANCELLING", ...: the enum name without its JOB_STATE_ prefix, for messages.
std::string StateName(flame::v1::JobState state);

// "running", "cancelling", ...: the Prometheus label value and flamectl's display form.
std::string StateLabel(flame::v1::JobState state);

}  // namespace flame::server
