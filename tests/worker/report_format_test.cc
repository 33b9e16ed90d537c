// The metric names and lines a rank shows, the dense peak table, and /proc memory.
#include "worker/metrics/report_format.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "worker/metrics/peak_flops.h"
#include "worker/metrics/process_memory.h"

namespace flame::worker {
namespace {

ProgressUpdate SomeUpdate() {
  ProgressUpdate p;
  p.step = 20;
  p.tokens = 1234567;
  p.loss = 5.25;
  p.max_loss = 5.5;
  p.lr = 3e-3;
  p.grad_norm = 1.25;
  p.tokens_per_second = 9876.4;
  p.tflops = 0.05;
  p.memory_gib = 0.5;
  p.memory_peak_gib = 0.75;
  p.step_seconds = 0.2;
  p.data_loading_seconds = 0.01;
  p.data_loading_share = 5;
  p.skipped_steps = 2;
  p.elapsed_seconds = 3725;
  return p;
}

TEST(Grouped, PutsCommasBetweenThousands) {
  EXPECT_EQ(Grouped(0), "0");
  EXPECT_EQ(Grouped(999), "999");
  EXPECT_EQ(Grouped(1234567), "1,234,567");
  EXPECT_EQ(Grouped(-1000), "-1,000");
}

TEST(FormatProgressLine, ShowsFlamesFactsInOneLine) {
  const std::string line = FormatProgressLine(SomeUpdate(), 65);
  for (const char* part :
       {"step:       20", "token:       1,234,567", "loss:  5.2500 (max  5.5000)", "lr: 3.0000e-03",
        "gnorm:  1.25", "memory:  0.50GiB (peak  0.75GiB)", "tps:   9,876", "tflops: 0.05 ",
        "mfu:   0.00%", "data:  5.0% (0.010s)", "skipped: 2", "[01:02:05<00:01:05]"}) {
    EXPECT_NE(line.find(part), std::string::npos) << "no \"" << part << "\" in\n" << line;
  }
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(FormatProgressLine(SomeUpdate(), -1).find("<--:--:--]"), std::string::npos);
}

TEST(FlameScalars, UseFlamesNamesAndAddTheEvalLossOnlyAtItsStep) {
  ProgressUpdate p = SomeUpdate();
  std::map<std::string, double> scalars;
  for (const auto& [name, value] : FlameScalars(p)) scalars[name] = value;
  EXPECT_EQ(scalars.at("loss_metrics/global_avg_loss"), 5.25);
  EXPECT_EQ(scalars.at("loss_metrics/global_max_loss"), 5.5);
  EXPECT_EQ(scalars.at("optimizer/lr"), 3e-3);
  EXPECT_EQ(scalars.at("optimizer/grad_norm"), 1.25);
  EXPECT_EQ(scalars.at("optimizer/skipped_step"), 2);
  EXPECT_EQ(scalars.at("throughput(tps)"), 9876.4);
  EXPECT_EQ(scalars.at("time_metrics/data_loading(%)"), 5);
  EXPECT_EQ(scalars.at("memory/max_reserved(GiB)"), 0.5);
  EXPECT_EQ(scalars.at("tokens_seen"), 1234567);
  EXPECT_EQ(scalars.count("loss_metrics/eval_loss"), 0u);
  p.eval_loss = 4.5;
  p.eval_step = 20;
  scalars.clear();
  for (const auto& [name, value] : FlameScalars(p)) scalars[name] = value;
  EXPECT_EQ(scalars.at("loss_metrics/eval_loss"), 4.5);
  EXPECT_EQ(FormatEvalLine(p, 8), "eval: step 20 loss 4.5000 (8 batches)");
  EXPECT_EQ(FormatEvalLine(p, 1), "eval: step 20 loss 4.5000 (1 batch)");
}

TEST(PeakBf16Flops, UsesDenseFiguresAndKnowsNoGuesses) {
  EXPECT_EQ(PeakBf16Flops("NVIDIA H200"), 989e12);
  EXPECT_EQ(PeakBf16Flops("NVIDIA H100 80GB HBM3"), 989e12);
  EXPECT_EQ(PeakBf16Flops("NVIDIA H100 PCIe"), 756e12);
  EXPECT_EQ(PeakBf16Flops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_EQ(PeakBf16Flops("NVIDIA B200"), 2.25e15);  // not the sparse 4.5e15
  EXPECT_FALSE(PeakBf16Flops("NVIDIA GeForce GTX 1080").has_value());
  EXPECT_FALSE(PeakBf16Flops("").has_value());
}

TEST(ReadProcessMemory, SeesMemoryThisProcessTouches) {
  const ProcessMemory before = ReadProcessMemory();
  EXPECT_GT(before.resident_gib, 0);
  std::vector<char> block(64 << 20, 1);  // 64 MiB, written, so resident
  const ProcessMemory after = ReadProcessMemory();
  EXPECT_GE(after.resident_gib, before.resident_gib + 0.05) << static_cast<int>(block[12345]);
  EXPECT_GE(after.peak_resident_gib, after.resident_gib);
}

}  // namespace
}  // namespace flame::worker
