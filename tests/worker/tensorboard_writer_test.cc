// Event files decoded by an independent reader (tests/worker/event_file_decoder.h): framing,
// both CRCs of every record, and the Event fields.
#include "worker/metrics/tensorboard_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/worker/event_file_decoder.h"
#include "tests/worker/test_util.h"

namespace flame::worker {
namespace {

using testing::DecodedFile;
using testing::DecodeEventFile;
using testing::TempDir;

TEST(EventFileDecoder, Crc32cMatchesTheStandardCheckValue) {
  EXPECT_EQ(testing::BitwiseCrc32c("123456789"), 0xE3069283u);  // CRC-32C's catalogue check
}

TEST(EventFileWriter, WritesAVersionEventThenScalarEventsThatDecode) {
  TempDir dir;
  const std::string folder = dir.path() + "/tb/run";
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Create(folder);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->path().rfind(folder + "/events.out.tfevents.", 0), 0u) << (*writer)->path();
  ASSERT_TRUE((*writer)
                  ->WriteScalars(1, 1700000000.25,
                                 {{"loss_metrics/global_avg_loss", 7.625}, {"optimizer/lr", 3e-4}})
                  .ok());
  ASSERT_TRUE((*writer)->WriteScalars(300, 1700000010.5, {{"mfu(%)", 0}}).ok());

  // Flushed after every event: readable while the writer is still open.
  const DecodedFile file = DecodeEventFile((*writer)->path());
  ASSERT_EQ(file.error, "");
  ASSERT_EQ(file.events.size(), 3u);
  EXPECT_EQ(file.events[0].file_version, "brain.Event:2");
  EXPECT_GT(file.events[0].wall_time, 1.6e9);
  EXPECT_TRUE(file.events[0].scalars.empty());
  EXPECT_EQ(file.events[1].step, 1);
  EXPECT_DOUBLE_EQ(file.events[1].wall_time, 1700000000.25);
  EXPECT_FLOAT_EQ(file.events[1].scalars.at("loss_metrics/global_avg_loss"), 7.625f);
  EXPECT_FLOAT_EQ(file.events[1].scalars.at("optimizer/lr"), 3e-4f);
  EXPECT_EQ(file.events[2].step, 300);
  EXPECT_EQ(file.events[2].scalars.count("mfu(%)"), 1u);
}

TEST(EventFileWriter, TheDecoderCatchesACorruptedByte) {
  // Guards the test's own decoder: it must not accept anything.
  TempDir dir;
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Create(dir.path());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WriteScalars(5, 1.0, {{"tflops", 1.5}}).ok());
  const std::string path = (*writer)->path();
  writer->reset();
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(-6, std::ios::end);  // inside the last event's data
  file.put('\x7f');
  file.close();
  EXPECT_EQ(DecodeEventFile(path).error, "bad data CRC");
}

TEST(EventFileWriter, ACreateFailureNamesThePath) {
  TempDir dir;
  const std::string blocker = dir.path() + "/file";
  std::ofstream(blocker) << "x";
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::Create(blocker + "/tb");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(blocker), std::string::npos) << writer.status();
}

TEST(TensorBoardRunFolder, FollowsFlamesLayout) {
  // 2024-03-05 06:07:08 UTC.
  EXPECT_EQ(TensorBoardRunFolder("/dump", "tb", 1709618828, 0, false), "/dump/tb/20240305-0607");
  EXPECT_EQ(TensorBoardRunFolder("/dump", "tb", 1709618828, 3, true),
            "/dump/tb/20240305-0607/rank_3");
}

}  // namespace
}  // namespace flame::worker
