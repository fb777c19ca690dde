// test_largest_batch.cpp — `estimate --device-memory`'s largest batch (experiments/cli/
// largest_batch.h): the answer fits and one more sample does not (checked by direct exact
// meta steps under the same cap), for a model whose peak is near-linear in the batch and for
// a cap below one sample (0); the search stays a handful of steps.
// ctest tier: models
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "experiments/plan/largest_batch.h"

using namespace oomlab;

namespace {
bool fits(const RunSpec& spec, int64_t batch, uint64_t cap) {
  try {
    estimate_memory(spec, batch, "adamw", cap);
    return true;
  } catch (const OutOfMemoryError&) {
    return false;
  }
}
}  // namespace

TEST(LargestBatch, FitsAndOneMoreDoesNot) {
  RunSpec spec = RunSpec::for_model("resnet20");
  for (uint64_t cap : {uint64_t(48) << 20, uint64_t(200) << 20}) {
    const LargestBatch lb = largest_batch_under(spec, "adamw", cap);
    ASSERT_GT(lb.batch, 1) << cap;
    EXPECT_TRUE(fits(spec, lb.batch, cap)) << cap;
    EXPECT_FALSE(fits(spec, lb.batch + 1, cap)) << cap;
    EXPECT_LE(lb.peak_reserved_bytes, int64_t(cap));
    EXPECT_LE(lb.probes, 20);
  }
  EXPECT_EQ(largest_batch_under(spec, "adamw", uint64_t(1) << 20).batch, 0);   // not even one sample in 1 MiB
}
