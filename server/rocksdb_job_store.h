// JobStore on RocksDB: one key per job, "job/<id>" -> serialized flame.v1.Job, plus
// "meta/last_sequence" (decimal) and "meta/schema" (the layout version, "1").
//
// Every Put is one WriteBatch written with WriteOptions.sync = true: when it returns, the
// change survives a power cut, which is the promise flamed makes before answering an RPC.
// RocksDB's lock file keeps a second flamed off the same data directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/job_store.h"

namespace rocksdb {
class DB;
}

namespace flame::server {

class RocksDbJobStore final : public JobStore {
 public:
  // Opens (creating if needed) the database in directory `path`.
  static absl::StatusOr<std::unique_ptr<RocksDbJobStore>> Open(const std::string& path);
  ~RocksDbJobStore() override;

  absl::StatusOr<StoredJobs> LoadAll() override;
  absl::Status Put(const flame::v1::Job& job) override;

  // Flushes the memtable to disk files (shutdown: the write-ahead log already holds every
  // change, this only makes the next start faster).
  absl::Status Flush();

 private:
  RocksDbJobStore(std::unique_ptr<rocksdb::DB> db, std::string path, int64_t last_sequence);

  const std::unique_ptr<rocksdb::DB> db_;
  const std::string path_;
  absl::Mutex mu_;  // orders Puts, so that the sequence counter only grows
  int64_t last_sequence_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flame::server
