// Collectives over a c10d TCPStore.
//
// Each collective gets a sequence number (all ranks call collectives in the same order, so the
// numbers agree) and works in three moves:
//   1. every rank sets "c/<seq>/<rank>" to its bytes;
//   2. every rank waits for all W keys and fetches them in one multiGet;
//   3. every rank increments "c/<seq>/done"; the rank that brings it to W has seen the last
//      reader finish and deletes the collective's keys, so the store does not grow.
// Reductions add the W buffers in rank order on every rank: the same additions in the same
// order, hence bitwise identical results everywhere.
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "worker/dist/communicator.h"

namespace flame::worker {
namespace {

constexpr char kCheckoutKey[] = "checkout";
constexpr std::chrono::seconds kCheckoutWait{10};

std::vector<uint8_t> ToBytes(const void* data, size_t size) {
  const auto* begin = static_cast<const uint8_t*>(data);
  return std::vector<uint8_t>(begin, begin + size);
}

class StoreCommunicator final : public Communicator {
 public:
  StoreCommunicator(int64_t rank, int64_t world_size, const StoreOptions& options)
      : rank_(rank), world_size_(world_size) {
    c10d::TCPStoreOptions store_options;
    store_options.port = options.port;
    store_options.isServer = rank == 0;
    store_options.numWorkers = static_cast<size_t>(world_size);
    store_options.waitWorkers = false;  // the first collective is the rendezvous
    store_options.timeout = options.timeout;
    store_ = c10::make_intrusive<c10d::TCPStore>(options.host, store_options);
  }

  // Rank 0's process hosts the store, so it must be the last to leave: the other ranks check
  // out as their very last store operation, and rank 0 waits (briefly) for all of them before
  // the server goes away. Without this, a fast rank 0 could exit while a peer still waits for
  // the reply to its last collective.
  ~StoreCommunicator() override {
    try {
      if (rank_ != 0) {
        store_->add(kCheckoutKey, 1);
        return;
      }
      const auto deadline = std::chrono::steady_clock::now() + kCheckoutWait;
      while (store_->add(kCheckoutKey, 0) < world_size_ - 1 &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } catch (const std::exception&) {
      // A peer that died cannot check out; there is nothing left to protect.
    }
  }

  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return world_size_; }
  uint16_t port() const { return store_->getPort(); }

  void AllReduce(torch::Tensor& tensor, ReduceOp op) override {
    TORCH_CHECK(tensor.device().is_cpu() && tensor.is_floating_point(),
                "StoreCommunicator reduces CPU floating-point tensors, got ", tensor.options());
    const torch::Tensor mine = tensor.contiguous();
    const size_t bytes = static_cast<size_t>(mine.numel() * mine.element_size());
    const std::vector<std::vector<uint8_t>> all = Exchange(ToBytes(mine.data_ptr(), bytes));
    torch::Tensor result;
    for (const std::vector<uint8_t>& buffer : all) {  // rank order
      TORCH_CHECK(buffer.size() == bytes, "AllReduce: ranks disagree on the tensor size (",
                  buffer.size(), " vs ", bytes, " bytes)");
      const torch::Tensor peer =
          torch::from_blob(const_cast<uint8_t*>(buffer.data()), mine.sizes(), mine.options());
      if (!result.defined()) {
        result = peer.clone();
      } else if (op == ReduceOp::kMax) {
        result = torch::maximum(result, peer);
      } else {
        result.add_(peer);
      }
    }
    if (op == ReduceOp::kAvg) result.div_(static_cast<double>(world_size_));
    tensor.copy_(result);
  }

  void Broadcast(torch::Tensor& tensor, int64_t root) override {
    TORCH_CHECK(root >= 0 && root < world_size_, "Broadcast: root ", root, " out of range");
    const torch::Tensor mine = tensor.contiguous();
    const size_t bytes = static_cast<size_t>(mine.numel() * mine.element_size());
    // Only the root's buffer travels; the others contribute an empty value.
    const std::vector<std::vector<uint8_t>> all =
        Exchange(rank_ == root ? ToBytes(mine.data_ptr(), bytes) : std::vector<uint8_t>());
    const std::vector<uint8_t>& source = all[static_cast<size_t>(root)];
    TORCH_CHECK(source.size() == bytes, "Broadcast: the root sent ", source.size(),
                " bytes, this rank expects ", bytes);
    if (rank_ != root) {
      tensor.copy_(
          torch::from_blob(const_cast<uint8_t*>(source.data()), mine.sizes(), mine.options()));
    }
  }

  std::vector<std::string> AllGather(const std::string& bytes) override {
    std::vector<std::string> result;
    for (const std::vector<uint8_t>& buffer : Exchange(ToBytes(bytes.data(), bytes.size()))) {
      result.emplace_back(buffer.begin(), buffer.end());
    }
    return result;
  }

  void Barrier() override { Exchange({}); }

 private:
  // Steps 1-3 of the file comment; returns every rank's value in rank order.
  std::vector<std::vector<uint8_t>> Exchange(const std::vector<uint8_t>& mine) {
    const std::string prefix = "c/" + std::to_string(sequence_++) + "/";
    std::vector<std::string> keys;
    for (int64_t r = 0; r < world_size_; ++r) keys.push_back(prefix + std::to_string(r));
    store_->set(keys[static_cast<size_t>(rank_)], mine);
    store_->wait(keys);
    std::vector<std::vector<uint8_t>> values = store_->multiGet(keys);
    if (store_->add(prefix + "done", 1) == world_size_) {
      for (const std::string& key : keys) store_->deleteKey(key);
      store_->deleteKey(prefix + "done");
    }
    return values;
  }

  int64_t rank_;
  int64_t world_size_;
  int64_t sequence_ = 0;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace

std::unique_ptr<Communicator> CreateStoreCommunicator(int64_t rank, int64_t world_size,
                                                      const StoreOptions& options) {
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank ", rank,
              " outside world size ", world_size);
  return std::make_unique<StoreCommunicator>(rank, world_size, options);
}

uint16_t StorePort(const Communicator& communicator) {
  const auto* store = dynamic_cast<const StoreCommunicator*>(&communicator);
  return store == nullptr ? 0 : store->port();
}

}  // namespace flame::worker
