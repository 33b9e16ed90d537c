#include "client/suggest.h"

#include "gtest/gtest.h"

namespace flame::client {
namespace {

TEST(EditDistance, CountsInsertionsDeletionsSubstitutionsAndSwaps) {
  EXPECT_EQ(EditDistance("steps", "steps"), 0u);
  EXPECT_EQ(EditDistance("stpes", "steps"), 1u);  // neighbours swapped
  EXPECT_EQ(EditDistance("step", "steps"), 1u);
  EXPECT_EQ(EditDistance("stepz", "steps"), 1u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
}

TEST(ClosestMatch, SuggestsANearNameAndNothingForAFarOne) {
  const std::vector<std::string> names = {"training.steps", "training.seq_len", "optimizer.lr"};
  EXPECT_EQ(ClosestMatch("training.stpes", names), "training.steps");
  EXPECT_EQ(ClosestMatch("training.seqlen", names), "training.seq_len");
  EXPECT_FALSE(ClosestMatch("model.zebra", names).has_value());
}

TEST(ClosestMatch, AShortNameNeedsACloseMatch) {
  EXPECT_EQ(ClosestMatch("jb", {"job"}), "job");
  EXPECT_FALSE(ClosestMatch("ab", {"job"}).has_value());
}

}  // namespace
}  // namespace flame::client
