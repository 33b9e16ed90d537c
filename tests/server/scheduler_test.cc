#include "server/scheduler.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(Scheduler, PlacesAJobOnAsManySlotsAsItHasRanks) {
  Scheduler scheduler(SlotPool{SlotKind::kGpu, 4});
  ASSERT_TRUE(scheduler.Enqueue("a", 1, 3).ok());
  const std::vector<Placement> placed = scheduler.PlaceReady();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "a");
  EXPECT_THAT(placed[0].slots, ElementsAre(0, 1, 2));
  EXPECT_EQ(scheduler.free_slots(), 1);
  EXPECT_FALSE(scheduler.IsQueued("a"));
  EXPECT_TRUE(scheduler.IsPlaced("a"));
}

TEST(Scheduler, PlacesInSequenceOrderNotEnqueueOrder) {
  Scheduler scheduler(SlotPool{SlotKind::kCpu, 1});
  ASSERT_TRUE(scheduler.Enqueue("late", 7, 1).ok());
  ASSERT_TRUE(scheduler.Enqueue("early", 3, 1).ok());  // e.g. a resumed job keeps its sequence
  const std::vector<Placement> placed = scheduler.PlaceReady();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "early");
}

TEST(Scheduler, AJobThatDoesNotFitBlocksYoungerJobs) {
  Scheduler scheduler(SlotPool{SlotKind::kCpu, 4});
  ASSERT_TRUE(scheduler.Enqueue("small", 1, 2).ok());
  ASSERT_EQ(scheduler.PlaceReady().size(), 1u);
  ASSERT_TRUE(scheduler.Enqueue("big", 2, 4).ok());
  ASSERT_TRUE(scheduler.Enqueue("tiny", 3, 1).ok());
  // Two slots are free and "tiny" would fit, but "big" is older: head-of-line FIFO.
  EXPECT_THAT(scheduler.PlaceReady(), IsEmpty());
  scheduler.Release("small");
  const std::vector<Placement> placed = scheduler.PlaceReady();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "big");
  EXPECT_TRUE(scheduler.IsQueued("tiny"));
}

TEST(Scheduler, PlacesSeveralJobsInOnePassWhileTheyFit) {
  Scheduler scheduler(SlotPool{SlotKind::kCpu, 3});
  ASSERT_TRUE(scheduler.Enqueue("a", 1, 1).ok());
  ASSERT_TRUE(scheduler.Enqueue("b", 2, 2).ok());
  ASSERT_TRUE(scheduler.Enqueue("c", 3, 1).ok());
  const std::vector<Placement> placed = scheduler.PlaceReady();
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_THAT(placed[0].slots, ElementsAre(0));
  EXPECT_THAT(placed[1].slots, ElementsAre(1, 2));
  EXPECT_TRUE(scheduler.IsQueued("c"));
}

TEST(Scheduler, ReleasedSlotsAreReused) {
  Scheduler scheduler(SlotPool{SlotKind::kGpu, 2});
  ASSERT_TRUE(scheduler.Enqueue("a", 1, 1).ok());
  ASSERT_TRUE(scheduler.Enqueue("b", 2, 1).ok());
  ASSERT_EQ(scheduler.PlaceReady().size(), 2u);
  scheduler.Release("a");
  ASSERT_TRUE(scheduler.Enqueue("c", 3, 1).ok());
  const std::vector<Placement> placed = scheduler.PlaceReady();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].slots, ElementsAre(0));
}

TEST(Scheduler, RefusesAJobBiggerThanThePoolWithAClearError) {
  Scheduler scheduler(SlotPool{SlotKind::kGpu, 2});
  const absl::Status status = scheduler.CheckFits(8);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("8"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("has 2"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("GPU"), absl::string_view::npos) << status;
  EXPECT_TRUE(scheduler.CheckFits(2).ok());
  EXPECT_FALSE(scheduler.CheckFits(0).ok());
}

TEST(Scheduler, AJobThatCanNeverFitDoesNotBlockTheQueue) {
  Scheduler scheduler(SlotPool{SlotKind::kCpu, 2});
  ASSERT_TRUE(scheduler.Enqueue("too-big", 1, 8).ok());  // queued when the host was larger
  ASSERT_TRUE(scheduler.Enqueue("small", 2, 1).ok());
  const std::vector<Placement> placed = scheduler.PlaceReady();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "small");
  EXPECT_TRUE(scheduler.IsQueued("too-big"));
}

TEST(Scheduler, ADequeuedJobIsNeverPlaced) {
  Scheduler scheduler(SlotPool{SlotKind::kCpu, 1});
  ASSERT_TRUE(scheduler.Enqueue("a", 1, 1).ok());
  EXPECT_TRUE(scheduler.Dequeue("a"));
  EXPECT_FALSE(scheduler.Dequeue("a"));
  EXPECT_THAT(scheduler.PlaceReady(), IsEmpty());
}

TEST(Scheduler, RefusesToQueueAJobTwice) {
  Scheduler scheduler(SlotPool{SlotKind::kCpu, 2});
  ASSERT_TRUE(scheduler.Enqueue("a", 1, 1).ok());
  EXPECT_EQ(scheduler.Enqueue("a", 1, 1).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(scheduler.PlaceReady().size(), 1u);
  EXPECT_EQ(scheduler.Enqueue("a", 1, 1).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Scheduler, AdoptedSlotsAreBusyUntilReleased) {
  Scheduler scheduler(SlotPool{SlotKind::kGpu, 2});
  scheduler.Adopt("survivor", {1});
  ASSERT_TRUE(scheduler.Enqueue("new", 1, 2).ok());
  EXPECT_THAT(scheduler.PlaceReady(), IsEmpty());
  EXPECT_THAT(scheduler.SlotsOf("survivor"), ElementsAre(1));
  scheduler.Release("survivor");
  EXPECT_EQ(scheduler.PlaceReady().size(), 1u);
}

TEST(Scheduler, AdoptingSlotsOutsideThePoolBlocksNothing) {
  Scheduler scheduler(SlotPool{SlotKind::kGpu, 1});
  scheduler.Adopt("old", {5});  // the host had more GPUs when the job started
  EXPECT_EQ(scheduler.free_slots(), 1);
  scheduler.Release("old");
  EXPECT_EQ(scheduler.free_slots(), 1);
}

}  // namespace
}  // namespace flame::server
