// The store-backed communicator with two and three ranks as threads on loopback (port 0).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <thread>
#include <vector>

#include "worker/dist/communicator.h"

namespace flame::worker {
namespace {

// Runs body(rank, communicator) on `world` threads; rank 0 binds a free port first.
void RunRanks(int64_t world, const std::function<void(int64_t, Communicator&)>& body) {
  StoreOptions options;
  options.timeout = std::chrono::seconds(30);
  std::unique_ptr<Communicator> rank0 = CreateStoreCommunicator(0, world, options);
  options.port = StorePort(*rank0);
  ASSERT_NE(options.port, 0);
  std::vector<std::thread> threads;
  for (int64_t rank = 1; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Communicator> peer = CreateStoreCommunicator(rank, world, options);
      body(rank, *peer);
    });
  }
  body(0, *rank0);
  for (std::thread& t : threads) t.join();
}

TEST(StoreCommunicator, AllReduceGivesEveryRankTheSameSumAverageAndMax) {
  constexpr int64_t kWorld = 3;
  std::vector<torch::Tensor> sums(kWorld), averages(kWorld), maxima(kWorld);
  RunRanks(kWorld, [&](int64_t rank, Communicator& comm) {
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.world_size(), kWorld);
    // Values whose float32 sum depends on the order of additions.
    const torch::Tensor mine =
        torch::tensor({1e8f, 1.0f, -3.5f, 0.1f}) * (rank + 1) + static_cast<float>(rank) * 1e-3f;
    sums[rank] = mine.clone();
    comm.AllReduce(sums[rank], ReduceOp::kSum);
    averages[rank] = mine.clone();
    comm.AllReduce(averages[rank], ReduceOp::kAvg);
    maxima[rank] = torch::tensor({static_cast<double>(rank), -static_cast<double>(rank)});
    comm.AllReduce(maxima[rank], ReduceOp::kMax);
  });
  for (int64_t rank = 0; rank < kWorld; ++rank) {
    EXPECT_TRUE(torch::equal(sums[rank], sums[0])) << "rank " << rank << " differs bitwise";
    EXPECT_TRUE(torch::equal(averages[rank], averages[0]));
    EXPECT_TRUE(torch::equal(maxima[rank], torch::tensor({2.0, 0.0})));
  }
  EXPECT_NEAR(sums[0][1].item<float>(), 6.0f + 0.003f, 1e-4);
  EXPECT_NEAR(sums[0][2].item<float>(), -21.0f + 0.003f, 1e-4);
  EXPECT_NEAR(averages[0][2].item<float>(), -7.0f + 0.001f, 1e-4);
}

TEST(StoreCommunicator, BroadcastsAndGathersAcrossManyRounds) {
  // Hundreds of collectives reuse nothing: stale keys of earlier rounds would mix values up.
  RunRanks(2, [&](int64_t rank, Communicator& comm) {
    for (int round = 0; round < 200; ++round) {
      torch::Tensor value = torch::full({3}, static_cast<double>(rank == 1 ? round : -1));
      comm.Broadcast(value, /*root=*/1);
      ASSERT_TRUE(torch::equal(value, torch::full({3}, static_cast<double>(round))));
      const std::vector<std::string> all =
          comm.AllGather("rank" + std::to_string(rank) + "/" + std::to_string(round));
      ASSERT_EQ(all.size(), 2u);
      EXPECT_EQ(all[0], "rank0/" + std::to_string(round));
      EXPECT_EQ(all[1], "rank1/" + std::to_string(round));
    }
    comm.Barrier();
  });
}

TEST(StoreCommunicator, RefusesTensorsOfDifferentSizes) {
  std::vector<bool> threw(2, false);
  RunRanks(2, [&](int64_t rank, Communicator& comm) {
    torch::Tensor value = torch::zeros({rank == 0 ? 2 : 3});
    try {
      comm.AllReduce(value, ReduceOp::kSum);
    } catch (const c10::Error&) {
      threw[static_cast<size_t>(rank)] = true;
    }
  });
  EXPECT_TRUE(threw[0]);
  EXPECT_TRUE(threw[1]);
}

}  // namespace
}  // namespace flame::worker
