#include "server/rocksdb_job_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/write_batch.h"

namespace flame::server {
namespace {

constexpr char kJobPrefix[] = "job/";
constexpr char kLastSequenceKey[] = "meta/last_sequence";
constexpr char kSchemaKey[] = "meta/schema";
constexpr char kSchemaVersion[] = "1";

absl::Status FromRocksDb(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", status.ToString());
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsBusy() || status.IsTryAgain()) return absl::UnavailableError(message);
  if (status.IsIOError() && absl::StrContains(status.ToString(), "lock")) {
    return absl::FailedPreconditionError(
        absl::StrCat(message, " (is another flamed using this --data_dir?)"));
  }
  return absl::InternalError(message);
}

rocksdb::WriteOptions SyncedWrite() {
  rocksdb::WriteOptions options;
  options.sync = true;  // durable before the RPC that caused the write answers
  return options;
}

absl::StatusOr<int64_t> ReadLastSequence(rocksdb::DB* db) {
  std::string value;
  rocksdb::Status status = db->Get(rocksdb::ReadOptions(), kLastSequenceKey, &value);
  if (status.IsNotFound()) return 0;
  FLAME_RETURN_IF_ERROR(FromRocksDb(status, "read the sequence counter"));
  int64_t sequence = 0;
  if (!absl::SimpleAtoi(value, &sequence) || sequence < 0) {
    return absl::DataLossError(absl::StrCat("job store: ", kLastSequenceKey, " holds \"", value,
                                            "\", not a sequence number"));
  }
  return sequence;
}

// A new database gets the schema marker; an existing one must carry the version we read.
absl::Status CheckSchema(rocksdb::DB* db, const std::string& path) {
  std::string value;
  rocksdb::Status status = db->Get(rocksdb::ReadOptions(), kSchemaKey, &value);
  if (status.IsNotFound()) {
    return FromRocksDb(db->Put(SyncedWrite(), kSchemaKey, kSchemaVersion), "write the schema");
  }
  FLAME_RETURN_IF_ERROR(FromRocksDb(status, "read the schema"));
  if (value != kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("job store ", path, " has schema version ",
                                                      value, "; this flamed reads version ",
                                                      kSchemaVersion));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RocksDbJobStore>> RocksDbJobStore::Open(const std::string& path) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  // Job records are small and few; keep the footprint modest.
  options.max_open_files = 256;
  options.keep_log_file_num = 4;
  rocksdb::DB* raw = nullptr;
  FLAME_RETURN_IF_ERROR(
      FromRocksDb(rocksdb::DB::Open(options, path, &raw), absl::StrCat("open job store ", path)));
  std::unique_ptr<rocksdb::DB> db(raw);
  FLAME_RETURN_IF_ERROR(CheckSchema(db.get(), path));
  FLAME_ASSIGN_OR_RETURN(const int64_t last_sequence, ReadLastSequence(db.get()));
  return std::unique_ptr<RocksDbJobStore>(new RocksDbJobStore(std::move(db), path, last_sequence));
}

RocksDbJobStore::RocksDbJobStore(std::unique_ptr<rocksdb::DB> db, std::string path,
                                 int64_t last_sequence)
    : db_(std::move(db)), path_(std::move(path)), last_sequence_(last_sequence) {}

RocksDbJobStore::~RocksDbJobStore() {
  // Close explicitly so that a failure to close is at least visible in a debugger; the
  // unique_ptr then deletes the handle.
  if (db_ != nullptr) db_->Close().PermitUncheckedError();
}

absl::StatusOr<StoredJobs> RocksDbJobStore::LoadAll() {
  StoredJobs stored;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(kJobPrefix); it->Valid() && it->key().starts_with(kJobPrefix); it->Next()) {
    const std::string key = it->key().ToString();
    flame::v1::Job job;
    // A record we cannot read stops the start: skipping it would make a job vanish.
    if (!job.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(
          absl::StrCat("job store ", path_, ": record ", key, " is not a valid flame.v1.Job"));
    }
    if (absl::StrCat(kJobPrefix, job.id()) != key) {
      return absl::DataLossError(
          absl::StrCat("job store ", path_, ": record ", key, " holds job \"", job.id(), "\""));
    }
    stored.jobs.push_back(std::move(job));
  }
  FLAME_RETURN_IF_ERROR(FromRocksDb(it->status(), "scan the job store"));
  std::sort(
      stored.jobs.begin(), stored.jobs.end(),
      [](const flame::v1::Job& a, const flame::v1::Job& b) { return a.sequence() < b.sequence(); });
  absl::MutexLock lock(&mu_);
  stored.last_sequence = last_sequence_;
  for (const flame::v1::Job& job : stored.jobs) {
    stored.last_sequence = std::max(stored.last_sequence, job.sequence());
  }
  return stored;
}

absl::Status RocksDbJobStore::Put(const flame::v1::Job& job) {
  if (job.id().empty()) return absl::InvalidArgumentError("job store: a job needs an id");
  std::string value;
  if (!job.SerializeToString(&value)) {
    return absl::InternalError(absl::StrCat("job store: cannot serialize job ", job.id()));
  }
  absl::MutexLock lock(&mu_);
  rocksdb::WriteBatch batch;
  rocksdb::Status status = batch.Put(absl::StrCat(kJobPrefix, job.id()), value);
  const int64_t last_sequence = std::max(last_sequence_, job.sequence());
  if (status.ok() && last_sequence != last_sequence_) {
    status = batch.Put(kLastSequenceKey, absl::StrCat(last_sequence));
  }
  if (status.ok()) status = db_->Write(SyncedWrite(), &batch);
  FLAME_RETURN_IF_ERROR(FromRocksDb(status, absl::StrCat("store job ", job.id())));
  last_sequence_ = last_sequence;
  return absl::OkStatus();
}

absl::Status RocksDbJobStore::Flush() {
  return FromRocksDb(db_->Flush(rocksdb::FlushOptions()), "flush the job store");
}

}  // namespace flame::server
