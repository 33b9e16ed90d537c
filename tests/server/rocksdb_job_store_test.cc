#include "server/rocksdb_job_store.h"

#include <memory>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "tests/server/test_util.h"

namespace flame::server {
namespace {

using google::protobuf::util::MessageDifferencer;
using testing::TempDir;

flame::v1::Job SampleJob(const std::string& id, int64_t sequence) {
  flame::v1::Job job;
  job.set_id(id);
  job.set_name("sample");
  job.set_state(flame::v1::JOB_STATE_RUNNING);
  job.set_sequence(sequence);
  job.mutable_spec()->mutable_training()->set_steps(1000);
  job.mutable_progress()->set_step(40);
  job.mutable_progress()->set_loss(3.25);
  flame::v1::Attempt* attempt = job.add_attempts();
  attempt->set_number(1);
  flame::v1::RankProcess* rank = attempt->add_ranks();
  rank->set_pid(4242);
  rank->set_slot(1);
  rank->set_log_path("/tmp/x/rank-0.log");
  flame::v1::CheckpointRecord* checkpoint = job.add_checkpoints();
  checkpoint->set_step(20);
  checkpoint->set_path("/tmp/x/step-20");
  return job;
}

TEST(RocksDbJobStore, AFreshStoreIsEmpty) {
  TempDir dir;
  auto store = RocksDbJobStore::Open(dir.Join("db"));
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<StoredJobs> stored = (*store)->LoadAll();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->jobs.empty());
  EXPECT_EQ(stored->last_sequence, 0);
}

TEST(RocksDbJobStore, JobsReadBackIdenticalAfterReopening) {
  TempDir dir;
  const flame::v1::Job first = SampleJob("j-00000001", 1);
  flame::v1::Job second = SampleJob("j-00000002", 2);
  {
    auto store = RocksDbJobStore::Open(dir.Join("db"));
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Put(second).ok());
    ASSERT_TRUE((*store)->Put(first).ok());
    second.set_state(flame::v1::JOB_STATE_SUCCEEDED);  // a later write replaces the record
    ASSERT_TRUE((*store)->Put(second).ok());
  }
  auto reopened = RocksDbJobStore::Open(dir.Join("db"));
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<StoredJobs> stored = (*reopened)->LoadAll();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->jobs.size(), 2u);
  EXPECT_TRUE(MessageDifferencer::Equals(stored->jobs[0], first));  // sequence order
  EXPECT_TRUE(MessageDifferencer::Equals(stored->jobs[1], second));
  EXPECT_EQ(stored->last_sequence, 2);
}

TEST(RocksDbJobStore, TheSequenceCounterOnlyGrows) {
  TempDir dir;
  {
    auto store = RocksDbJobStore::Open(dir.Join("db"));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Put(SampleJob("j-a", 5)).ok());
    ASSERT_TRUE((*store)->Put(SampleJob("j-b", 3)).ok());
  }
  auto store = RocksDbJobStore::Open(dir.Join("db"));
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->LoadAll()->last_sequence, 5);
}

TEST(RocksDbJobStore, ASecondOpenOfTheSameDirectoryIsRefused) {
  TempDir dir;
  auto first = RocksDbJobStore::Open(dir.Join("db"));
  ASSERT_TRUE(first.ok());
  auto second = RocksDbJobStore::Open(dir.Join("db"));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("another flamed"), absl::string_view::npos)
      << second.status();
}

TEST(RocksDbJobStore, ACorruptRecordStopsLoadingWithItsKey) {
  TempDir dir;
  {
    // Write a record that is not a Job straight into the database.
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir.Join("db"), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "job/j-bad", "\xff\xff\xff").ok());
  }
  auto store = RocksDbJobStore::Open(dir.Join("db"));
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<StoredJobs> stored = (*store)->LoadAll();
  ASSERT_FALSE(stored.ok());
  EXPECT_EQ(stored.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(stored.status().message().find("job/j-bad"), absl::string_view::npos);
}

TEST(RocksDbJobStore, RefusesAJobWithoutAnId) {
  TempDir dir;
  auto store = RocksDbJobStore::Open(dir.Join("db"));
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Put(flame::v1::Job()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flame::server
