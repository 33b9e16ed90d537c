// Collectives between the ranks of one job.
//
// One interface, two implementations today:
//   LocalCommunicator   world size 1: every collective is the identity.
//   StoreCommunicator   CPU ranks: collectives through a c10d TCPStore hosted by rank 0 (the
//                       torch wheel gives C++ no Gloo, see DESIGN.md "Collectives"). For
//                       correctness on small models, not speed.
// The NCCL implementation (c10d ProcessGroupNCCL over the same store) comes with the GPU work.
//
// Every rank must call the same collectives in the same order. Failures (a peer that died, a
// store timeout) throw c10::Error, which the trainer's one exception boundary turns into a
// Status.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace flame::worker {

enum class ReduceOp { kSum, kAvg, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;

  // In place; `tensor` is a CPU floating-point tensor. All ranks end with bitwise identical
  // values (the reduction order is fixed: rank 0, 1, ...).
  virtual void AllReduce(torch::Tensor& tensor, ReduceOp op) = 0;
  // In place: every rank ends with root's values (same shape and dtype on every rank).
  virtual void Broadcast(torch::Tensor& tensor, int64_t root) = 0;
  // Every rank's bytes, indexed by rank.
  virtual std::vector<std::string> AllGather(const std::string& bytes) = 0;
  virtual void Barrier() = 0;
};

class LocalCommunicator final : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 1; }
  void AllReduce(torch::Tensor&, ReduceOp) override {}
  void Broadcast(torch::Tensor&, int64_t) override {}
  std::vector<std::string> AllGather(const std::string& bytes) override { return {bytes}; }
  void Barrier() override {}
};

struct StoreOptions {
  std::string host = "127.0.0.1";  // MASTER_ADDR
  uint16_t port = 0;               // MASTER_PORT; 0 lets rank 0 pick one (tests)
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

// Rank 0 hosts the store (it binds host:port); the others connect to it. Construction does not
// wait for the other ranks; the first collective does.
std::unique_ptr<Communicator> CreateStoreCommunicator(int64_t rank, int64_t world_size,
                                                      const StoreOptions& options);

// The port a StoreCommunicator of rank 0 bound (useful with port 0); 0 for other communicators.
uint16_t StorePort(const Communicator& communicator);

}  // namespace flame::worker
