// test_graph_pool.cpp — the caching allocator's graph pools (PyTorch's private memory
// pool of a CUDA-graph capture): a capture never takes blocks cached by eager work, the
// pool's blocks serve nobody else after the capture (a replay writes into them),
// empty_cache keeps their segments until the pool is released, the stats and the
// snapshot show them, and meta reproduces the host allocator's decisions under capture.
// ctest tier: unit
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_export.h"

namespace oomlab {
namespace {

constexpr size_t MiB = 1024 * 1024;

CachingAllocator make_meta() { return CachingAllocator(meta_device(), make_meta_raw_memory()); }

TEST(GraphPool, CaptureNeverTakesBlocksCachedByEagerWork) {
  auto a = make_meta();
  void* eager = a.allocate(4 * MiB);
  a.free(eager);                                   // cached in the default pool
  EXPECT_EQ(a.stat("num_device_alloc"), 1);
  const uint64_t pool = a.begin_graph_pool();
  void* captured = a.allocate(4 * MiB);
  EXPECT_NE(captured, eager);
  EXPECT_EQ(a.stat("num_device_alloc"), 2);        // a segment of the graph's own
  EXPECT_EQ(a.stat("graph_pools_reserved_bytes"), int64_t(20 * MiB));
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), int64_t(40 * MiB));
  a.free(captured);
  a.end_graph_pool();
  a.release_graph_pool(pool);
}

TEST(GraphPool, BlocksFreedDuringCaptureAreReusedByTheCapture) {
  auto a = make_meta();
  a.begin_graph_pool();
  void* x = a.allocate(3 * MiB);
  a.free(x);
  void* y = a.allocate(3 * MiB);   // the graph's own cached block: same address, as on replay
  EXPECT_EQ(y, x);
  EXPECT_EQ(a.stat("num_device_alloc"), 1);
  a.free(y);
  a.end_graph_pool();
}

TEST(GraphPool, AfterCaptureThePoolServesNobodyElseUntilReleased) {
  auto a = make_meta();
  const uint64_t pool = a.begin_graph_pool();
  void* grad = a.allocate(2 * MiB);      // outlives the capture (a static output)
  void* act = a.allocate(2 * MiB);
  a.free(act);                           // free inside the graph's segment
  a.end_graph_pool();
  a.free(grad);                          // freed after the capture: back to the graph's pool
  EXPECT_EQ(a.stat("num_graph_pools"), 1);
  void* eager = a.allocate(2 * MiB);
  EXPECT_NE(eager, grad);
  EXPECT_NE(eager, act);
  EXPECT_EQ(a.stat("num_device_alloc"), 2);
  a.free(eager);
  a.release_graph_pool(pool);
  EXPECT_EQ(a.stat("num_graph_pools"), 0);
  EXPECT_EQ(a.stat("graph_pools_reserved_bytes"), 0);
  void* reused = a.allocate(2 * MiB);    // released: the former graph segment is fair game
  EXPECT_EQ(a.stat("num_device_alloc"), 2);
  a.free(reused);
}

TEST(GraphPool, EmptyCacheKeepsALivePoolsSegments) {
  auto a = make_meta();
  const uint64_t pool = a.begin_graph_pool();
  a.free(a.allocate(12 * MiB));
  a.end_graph_pool();
  a.free(a.allocate(1000));               // an eager small segment, free afterwards
  a.empty_cache();
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), int64_t(12 * MiB));   // only the graph's
  EXPECT_EQ(a.stat("graph_pools_reserved_bytes"), int64_t(12 * MiB));
  a.release_graph_pool(pool);
  a.empty_cache();
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), 0);
}

TEST(GraphPool, CapturesDoNotNestAndReleasingTwiceIsHarmless) {
  auto a = make_meta();
  const uint64_t pool = a.begin_graph_pool();
  EXPECT_THROW(a.begin_graph_pool(), ValueError);
  a.end_graph_pool();
  const uint64_t second = a.begin_graph_pool();
  EXPECT_NE(second, pool);
  a.end_graph_pool();
  a.release_graph_pool(pool);
  a.release_graph_pool(pool);
  EXPECT_EQ(a.stat("num_graph_pools"), 1);
  a.release_graph_pool(second);
  EXPECT_EQ(a.stat("num_graph_pools"), 0);
}

TEST(GraphPool, SnapshotNamesTheSegmentsPool) {
  auto a = make_meta();
  void* eager = a.allocate(1000);
  const uint64_t pool = a.begin_graph_pool();
  void* captured = a.allocate(1000);
  a.end_graph_pool();
  const auto snap = memory_snapshot_json(a);
  ASSERT_EQ(snap["segments"].size(), 2u);
  EXPECT_EQ(snap["segments"][0]["segment_pool_id"][1], 0);
  EXPECT_EQ(snap["segments"][1]["segment_pool_id"][1], pool);
  a.free(eager);
  a.free(captured);
}

// The same capture sequence on host and meta memory: same decisions, same stats.
TEST(GraphPool, MetaReproducesTheHostUnderCapture) {
  CachingAllocator host(cpu_device(), make_host_raw_memory());
  auto meta = make_meta();
  auto run = [](CachingAllocator& a) {
    std::vector<void*> keep;
    void* w = a.allocate(5 * MiB);
    a.free(w);
    const uint64_t pool = a.begin_graph_pool();
    for (size_t n : {300u, 7u * 1024 * 1024, 40000u, 11u * 1024 * 1024}) keep.push_back(a.allocate(n));
    a.free(keep[1]);
    keep.push_back(a.allocate(6 * MiB));
    a.end_graph_pool();
    a.free(keep[0]);
    keep.push_back(a.allocate(300));
    for (size_t i = 2; i < keep.size(); ++i) a.free(keep[i]);
    a.release_graph_pool(pool);
    a.empty_cache();
    return a.stats();
  };
  EXPECT_EQ(run(host), run(meta));
}

}  // namespace
}  // namespace oomlab
