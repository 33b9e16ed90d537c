// Helpers shared by the server tests: temporary directories, a valid job spec whose files
// exist, an in-memory job store that can be told to fail, and a launcher that starts nothing.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "flame/v1/job_spec.pb.h"
#include "gtest/gtest.h"
#include "server/job_store.h"
#include "server/launcher.h"

namespace flame::server::testing {

// A fresh directory under $TMPDIR, removed with everything in it when the object goes away.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "flame-server-test-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A spec that passes ValidateJobSpec: its config, tokenizer and dataset exist under `dir`.
// (The files are placeholders; flamed only checks that they exist.)
inline flame::v1::JobSpec ValidSpec(const std::string& dir, int ranks = 1) {
  EXPECT_TRUE(WriteFileAtomically(dir + "/config.json", "{}").ok());
  EXPECT_TRUE(WriteFileAtomically(dir + "/tokenizer.model", "sp").ok());
  EXPECT_TRUE(WriteFileAtomically(dir + "/data.jsonl", "{\"text\": \"hello\"}\n").ok());
  flame::v1::JobSpec spec;
  spec.set_name("tiny-gla");
  spec.mutable_model()->set_config(dir + "/config.json");
  spec.mutable_model()->set_tokenizer_path(dir + "/tokenizer.model");
  spec.mutable_training()->set_dataset(dir + "/data.jsonl");
  spec.mutable_training()->set_steps(100);
  spec.mutable_resources()->set_ranks(ranks);
  return spec;
}

// JobStore in memory; `fail` makes every Put fail (a full disk).
class MemoryJobStore final : public JobStore {
 public:
  absl::StatusOr<StoredJobs> LoadAll() override {
    StoredJobs stored;
    stored.last_sequence = last_sequence_;
    for (const auto& [id, job] : jobs_) stored.jobs.push_back(job);
    std::sort(stored.jobs.begin(), stored.jobs.end(),
              [](const auto& a, const auto& b) { return a.sequence() < b.sequence(); });
    return stored;
  }
  absl::Status Put(const flame::v1::Job& job) override {
    ++puts;
    if (fail) return absl::UnavailableError("disk full (injected)");
    jobs_[job.id()] = job;
    last_sequence_ = std::max(last_sequence_, job.sequence());
    return absl::OkStatus();
  }
  const flame::v1::Job* Stored(const std::string& id) const {
    auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : &it->second;
  }
  size_t size() const { return jobs_.size(); }

  bool fail = false;
  int puts = 0;

 private:
  std::map<std::string, flame::v1::Job> jobs_;
  int64_t last_sequence_ = 0;
};

// Launcher that starts nothing: processes are entries in a table the test controls.
class FakeLauncher final : public Launcher {
 public:
  absl::StatusOr<LaunchResult> Launch(const LaunchRequest& request) override {
    if (!launch_error.ok()) return launch_error;
    launches.push_back(request);
    LaunchResult result{{}, "127.0.0.1", 29500 + static_cast<int>(launches.size())};
    for (int rank = 0; rank < static_cast<int>(request.slots.size()); ++rank) {
      const int64_t pid = next_pid_++;
      processes_[pid] = ProcessState{ProcessState::Kind::kRunning, 0};
      result.ranks.push_back(
          LaunchedRank{rank, pid, absl::StrCat(request.log_dir, "/rank-", rank, ".log")});
    }
    return result;
  }
  ProcessState Poll(int64_t pid, const std::string& job_id, int attempt) override {
    auto it = processes_.find(pid);
    if (it == processes_.end()) return ProcessState{ProcessState::Kind::kExited, -1};
    return it->second;
  }
  void Signal(int64_t pid, const std::string& job_id, int attempt, int signal) override {
    signals.emplace_back(pid, signal);
    if (obey_signals) Exit(pid, 128 + signal);
  }

  void Exit(int64_t pid, int code) {
    processes_[pid] = ProcessState{ProcessState::Kind::kExited, code};
  }
  // A process that a restarted flamed finds alive (or, with alive = false, gone).
  void SetAlive(int64_t pid, bool alive) {
    processes_[pid] = alive ? ProcessState{ProcessState::Kind::kRunning, 0}
                            : ProcessState{ProcessState::Kind::kExited, -1};
  }

  absl::Status launch_error = absl::OkStatus();
  bool obey_signals = true;  // a signalled process exits at once
  std::vector<LaunchRequest> launches;
  std::vector<std::pair<int64_t, int>> signals;

 private:
  int64_t next_pid_ = 1000;
  std::map<int64_t, ProcessState> processes_;
};

}  // namespace flame::server::testing
