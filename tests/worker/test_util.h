// Helpers shared by the worker tests: temporary folders and a small training config on the demo
// corpus (built by the demo_data target; FLAME_DEMO_DATA_DIR and FLAME_SOURCE_DIR come from
// tests/worker/CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/config/train_config.h"

namespace flame::worker::testing {

// A fresh folder under the test temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "flame-worker-XXXXXX";
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed";
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string DemoData(const std::string& name) {
  return absl::StrCat(FLAME_DEMO_DATA_DIR, "/", name);
}

inline std::string SourcePath(const std::string& relative) {
  return absl::StrCat(FLAME_SOURCE_DIR, "/", relative);
}

// The tiny GLA of configs/models/gla_tiny.json on the fortunes corpus, small enough that a step
// takes tens of milliseconds on one core.
inline TrainConfig DemoTrainConfig(const std::string& dump_folder) {
  TrainConfig config;
  config.dump_folder = dump_folder;
  config.model_config = SourcePath("configs/models/gla_tiny.json");
  config.tokenizer_path = DemoData("fortunes.model");
  config.optimizer.lr = 3e-3;
  config.optimizer.eps = 1e-15;
  config.lr_scheduler.warmup_steps = 4;
  config.lr_scheduler.decay_type = "cosine";
  config.lr_scheduler.lr_min = 0.1;
  config.training.batch_size = 4;
  config.training.seq_len = 64;
  config.training.steps = 8;
  config.training.dataset = {DemoData("fortunes.jsonl")};
  config.checkpoint.interval = 4;
  config.metrics.log_freq = 2;
  return config;
}

}  // namespace flame::worker::testing
