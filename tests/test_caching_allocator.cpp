// test_caching_allocator.cpp — the caching allocator's policy, stats, OOM path, trace,
// exports and determinism. Contracts checked: PyTorch's rounding/pool/split/merge rules,
// stats balance (allocated == sum of live blocks, even after an OOM), retry-then-throw
// with counters, meta == host for the same alloc/free sequence, snapshot/trace shapes.
// Allocators here are local objects over meta/host/mock raw memory (no global state),
// except the allocator_for tests, which reset the registry.
// ctest tier: unit
#include <gtest/gtest.h>

#include <cstdlib>

#include <random>
#include <thread>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_export.h"

namespace oomlab {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

CachingAllocator make_meta() { return CachingAllocator(meta_device(), make_meta_raw_memory()); }

// Meta-like raw memory that fails on demand (the injected "cudaMalloc failure").
struct FlakyRaw : RawMemory {
  int fail_next = 0;      // fail this many upcoming allocs
  uint64_t next = 0x100000;
  void* alloc(size_t n) override {
    if (fail_next > 0) { --fail_next; return nullptr; }
    uint64_t p = next; next += n; return reinterpret_cast<void*>(p);
  }
  void free(void*, size_t) override {}
  const char* name() const override { return "flaky"; }
};

int64_t live_bytes(const CachingAllocator& a) {
  int64_t sum = 0;
  for (const auto& s : a.segments())
    for (const auto& b : s.blocks) sum += b.allocated ? int64_t(b.size) : 0;
  return sum;
}
int64_t segment_bytes(const CachingAllocator& a) {
  int64_t sum = 0;
  for (const auto& s : a.segments()) sum += int64_t(s.total_size);
  return sum;
}

TEST(CachingAllocator, RoundsTo512AndCountsRequested) {
  auto a = make_meta();
  EXPECT_EQ(a.allocate(0), nullptr);
  void* p = a.allocate(1);
  void* q = a.allocate(513);
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), 512 + 1024);
  EXPECT_EQ(a.stat("requested_bytes.all.current"), 1 + 513);
  EXPECT_EQ(reinterpret_cast<uint64_t>(p) % 512, 0u);
  EXPECT_EQ(reinterpret_cast<uint64_t>(q) - reinterpret_cast<uint64_t>(p), 512u);
  a.free(p); a.free(q); a.free(nullptr);
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), 0);
  EXPECT_EQ(a.stat("requested_bytes.all.current"), 0);
}

TEST(CachingAllocator, PoolSegmentSizes) {
  auto a = make_meta();
  a.allocate(1000);                       // small: 2 MiB segment
  EXPECT_EQ(a.stat("reserved_bytes.small_pool.current"), int64_t(2 * MiB));
  a.allocate(1 * MiB);                    // exactly 1 MiB is still small: fits the same segment
  EXPECT_EQ(a.stat("segment.small_pool.current"), 1);
  a.allocate(10 * MiB);                   // >= 10 MiB: own segment, rounded to 2 MiB
  EXPECT_EQ(a.stat("reserved_bytes.large_pool.current"), int64_t(10 * MiB));
  a.allocate(11 * MiB);
  EXPECT_EQ(a.stat("reserved_bytes.large_pool.current"), int64_t(22 * MiB));
  a.allocate(1 * MiB + 1);                // 1-10 MiB: 20 MiB segment
  EXPECT_EQ(a.stat("reserved_bytes.large_pool.current"), int64_t(42 * MiB));
  a.allocate(10 * MiB);                   // a cached 18.5 MiB remainder fits: no new segment
  EXPECT_EQ(a.stat("reserved_bytes.large_pool.current"), int64_t(42 * MiB));
  EXPECT_EQ(a.stat("segment.all.current"), 4);
  EXPECT_EQ(a.stat("num_device_alloc"), 4);
}

TEST(CachingAllocator, LargeRemainderUpTo1MiBIsNotSplit) {
  auto a = make_meta();
  void* p = a.allocate(19 * MiB + 512 * KiB);   // 20 MiB segment, 512 KiB remainder kept
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), int64_t(20 * MiB));
  EXPECT_EQ(a.stat("requested_bytes.all.current"), int64_t(19 * MiB + 512 * KiB));
  ASSERT_EQ(a.segments().size(), 1u);
  EXPECT_EQ(a.segments()[0].blocks.size(), 1u);
  a.free(p);
  void* q = a.allocate(2 * MiB);                // reuses the cached 20 MiB block, split (18 > 1)
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.segments()[0].blocks.size(), 2u);
  EXPECT_EQ(a.stat("inactive_split_bytes.large_pool.current"), int64_t(18 * MiB));
}

TEST(CachingAllocator, SplitAndMergeWithinOneSegment) {
  auto a = make_meta();
  void* x = a.allocate(512 * KiB);
  void* y = a.allocate(512 * KiB);
  void* z = a.allocate(512 * KiB);
  ASSERT_EQ(a.segments().size(), 1u);
  EXPECT_EQ(a.segments()[0].blocks.size(), 4u);    // x y z + free tail
  EXPECT_EQ(a.stat("inactive_split.all.current"), 1);
  a.free(y);                                        // hole in the middle
  EXPECT_EQ(a.stat("inactive_split.all.current"), 2);
  EXPECT_EQ(a.stat("inactive_split_bytes.all.current"), int64_t(1 * MiB));
  a.free(x);                                        // merges with y
  EXPECT_EQ(a.segments()[0].blocks.size(), 3u);
  EXPECT_EQ(a.stat("inactive_split.all.current"), 2);
  a.free(z);                                        // merges with x+y and the tail
  auto segs = a.segments();
  ASSERT_EQ(segs[0].blocks.size(), 1u);
  EXPECT_FALSE(segs[0].blocks[0].allocated);
  EXPECT_EQ(segs[0].blocks[0].size, 2 * MiB);
  EXPECT_EQ(a.stat("inactive_split.all.current"), 0);
  EXPECT_EQ(a.stat("inactive_split_bytes.all.current"), 0);
  EXPECT_EQ(a.stat("inactive_split.all.peak"), 2);
}

TEST(CachingAllocator, BestFitPicksSmallestFittingBlock) {
  auto a = make_meta();
  void* p1 = a.allocate(100 * KiB);
  void* big = a.allocate(300 * KiB);
  void* p2 = a.allocate(100 * KiB);
  void* mid = a.allocate(200 * KiB);
  void* p3 = a.allocate(100 * KiB);
  a.free(big);
  a.free(mid);
  EXPECT_EQ(a.allocate(150 * KiB), mid);   // 200 KiB hole beats 300 KiB hole and the tail
  EXPECT_EQ(a.allocate(250 * KiB), big);
  (void)p1; (void)p2; (void)p3;
  EXPECT_EQ(a.stat("segment.all.current"), 1);
}

TEST(CachingAllocator, EmptyCacheReleasesOnlyFullyFreeSegments) {
  auto a = make_meta();
  void* s1 = a.allocate(4 * KiB);          // small segment, stays live
  void* l1 = a.allocate(2 * MiB);          // 20 MiB segment A
  void* l2 = a.allocate(24 * MiB);         // 24 MiB segment B (A's 18 MiB tail is too small)
  a.free(l2);
  a.empty_cache();                         // B free -> released; A still has l1
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), int64_t(2 * MiB + 20 * MiB));
  EXPECT_EQ(a.stat("num_device_free"), 1);
  a.free(l1);
  a.free(s1);
  a.empty_cache();
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), 0);
  EXPECT_EQ(a.stat("segment.all.current"), 0);
  EXPECT_TRUE(a.segments().empty());
}

TEST(CachingAllocator, StatsKeysAndBalance) {
  auto a = make_meta();
  auto s0 = a.stats();
  EXPECT_EQ(s0.size(), 10u * 3 * 4 + 7);
  for (const char* k : {"allocation", "segment", "active", "inactive_split", "allocated_bytes",
                        "reserved_bytes", "active_bytes", "inactive_split_bytes",
                        "requested_bytes", "workspace_bytes"})
    for (const char* p : {"all", "small_pool", "large_pool"})
      for (const char* s : {"current", "peak", "allocated", "freed"})
        EXPECT_EQ(s0.count(std::string(k) + "." + p + "." + s), 1u) << k << p << s;
  for (const char* k : {"num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free", "num_invalid_frees",
                        "num_graph_pools", "graph_pools_reserved_bytes"})
    EXPECT_EQ(s0.at(k), 0);
  EXPECT_THROW(a.stat("allocated_bytes.all.bogus"), ValueError);

  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(1000);
  a.free(p);
  void* r = a.allocate(5 * MiB);
  auto s = a.stats();
  EXPECT_EQ(s["allocation.all.current"], 2);
  EXPECT_EQ(s["allocation.all.allocated"], 3);
  EXPECT_EQ(s["allocation.all.freed"], 1);
  EXPECT_EQ(s["allocation.all.peak"], 2);
  EXPECT_EQ(s["allocated_bytes.all.peak"], int64_t(5 * MiB + 1024));
  EXPECT_EQ(s["allocated_bytes.large_pool.current"], int64_t(5 * MiB));
  EXPECT_EQ(s["allocated_bytes.small_pool.current"], 1024);
  EXPECT_EQ(s["allocated_bytes.all.current"],
            s["allocated_bytes.all.allocated"] - s["allocated_bytes.all.freed"]);
  EXPECT_EQ(s["active_bytes.all.current"], s["allocated_bytes.all.current"]);
  EXPECT_EQ(s["allocated_bytes.all.current"], live_bytes(a));
  EXPECT_EQ(s["reserved_bytes.all.current"], segment_bytes(a));
  a.free(q); a.free(r);
  s = a.stats();
  EXPECT_EQ(s["allocation.all.allocated"], s["allocation.all.freed"]);
  EXPECT_EQ(s["allocated_bytes.all.allocated"], s["allocated_bytes.all.freed"]);
  EXPECT_EQ(s["requested_bytes.all.current"], 0);
}

TEST(CachingAllocator, ResetPeakAndAccumulatedStats) {
  auto a = make_meta();
  void* p = a.allocate(8 * MiB);
  void* q = a.allocate(4 * MiB);
  a.free(p);
  EXPECT_EQ(a.stat("allocated_bytes.all.peak"), int64_t(12 * MiB));
  a.reset_peak_stats();
  EXPECT_EQ(a.stat("allocated_bytes.all.peak"), int64_t(4 * MiB));
  EXPECT_EQ(a.stat("reserved_bytes.all.peak"), a.stat("reserved_bytes.all.current"));
  a.reset_accumulated_stats();
  EXPECT_EQ(a.stat("allocated_bytes.all.allocated"), 0);
  EXPECT_EQ(a.stat("allocation.all.freed"), 0);
  EXPECT_EQ(a.stat("num_device_alloc"), 0);
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), int64_t(4 * MiB));  // current untouched
  a.free(q);
}

// A small request fails for its segment (2 MiB from the small pool), not for its own size:
// the message says both, or "576 bytes" beside "1.00 KiB free" reads as a contradiction.
TEST(CachingAllocator, AnOomNamesTheSegmentARequestNeeded) {
  auto a = make_meta();
  a.set_capacity(1024);
  try {
    a.allocate(576);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tried to allocate 576 bytes, which needs a new 2.00 MiB segment (capacity 1.00 KiB;"),
              std::string::npos)
        << msg;
  }
}

TEST(CachingAllocator, CapacityOomMessageCountersAndRecovery) {
  auto a = make_meta();
  a.set_capacity(64 * MiB);
  EXPECT_EQ(a.capacity(), 64 * MiB);
  a.record_history(true);
  void* keep = a.allocate(40 * MiB);
  try {
    a.allocate(100 * MiB);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("meta:0 out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("100.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("capacity 64.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("40.00 MiB allocated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reserved by oomlab"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("segment"), std::string::npos) << msg;   // the segment is the request
  }
  EXPECT_EQ(a.stat("num_alloc_retries"), 1);
  EXPECT_EQ(a.stat("num_ooms"), 1);
  EXPECT_EQ(a.trace().back().action, "oom");
  EXPECT_EQ(a.trace().back().size, 100 * MiB);
  void* small = a.allocate(1000);          // the allocator still works
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), live_bytes(a));
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), int64_t(40 * MiB + 1024));
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), segment_bytes(a));
  a.free(small); a.free(keep);
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), 0);
}

TEST(CachingAllocator, RetryAfterReleasingCacheSucceeds) {
  auto a = make_meta();
  a.set_capacity(31 * MiB);
  a.free(a.allocate(30 * MiB));            // 30 MiB segment now cached, free
  void* p = a.allocate(1000);              // needs a 2 MiB small segment: 32 > 31 -> retry
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(a.stat("num_alloc_retries"), 1);
  EXPECT_EQ(a.stat("num_ooms"), 0);
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), int64_t(2 * MiB));
  a.free(p);
}

TEST(CachingAllocator, InjectedRawFailure) {
  auto raw = std::make_unique<FlakyRaw>();
  FlakyRaw* flaky = raw.get();
  CachingAllocator a(meta_device(), std::move(raw));
  flaky->fail_next = 1;                    // first try fails, retry succeeds
  void* p = a.allocate(4 * MiB);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(a.stat("num_alloc_retries"), 1);
  flaky->fail_next = 2;                    // both fail
  EXPECT_THROW(a.allocate(64 * MiB), OutOfMemoryError);
  EXPECT_EQ(a.stat("num_alloc_retries"), 2);
  EXPECT_EQ(a.stat("num_ooms"), 1);
  void* q = a.allocate(512);
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), live_bytes(a));
  a.free(p); a.free(q);
}

TEST(CachingAllocator, WorkspaceTag) {
  auto a = make_meta();
  a.record_history(true);
  void* w = a.allocate(4000, "workspace");
  void* t = a.allocate(4096);
  EXPECT_EQ(a.stat("workspace_bytes.all.current"), 4096);
  EXPECT_EQ(a.stat("workspace_bytes.small_pool.current"), 4096);
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), 8192);
  a.free(w);
  EXPECT_EQ(a.stat("workspace_bytes.all.current"), 0);
  EXPECT_EQ(a.stat("workspace_bytes.all.peak"), 4096);
  int tagged = 0;
  for (const auto& e : a.trace()) tagged += e.tag == "workspace";
  EXPECT_EQ(tagged, 3);                    // alloc, free_requested, free_completed
  a.free(t);
}

// OOMLAB_NO_CACHING=1 (for memory checkers): no reuse, no split, every segment one block
// of the rounded size, released on free.
TEST(CachingAllocator, NoCachingSwitchGivesEachBlockItsOwnSegment) {
  ::setenv("OOMLAB_NO_CACHING", "1", 1);
  auto a = make_meta();
  ::unsetenv("OOMLAB_NO_CACHING");
  void* p = a.allocate(1000);
  void* q = a.allocate(3 * MiB);
  void* r = a.allocate(1000);
  EXPECT_EQ(a.stat("segment.all.current"), 3);
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), int64_t(1024 + 3 * MiB + 1024));
  EXPECT_EQ(a.stat("inactive_split.all.current"), 0);
  a.free(p);
  EXPECT_EQ(a.stat("segment.all.current"), 2);
  void* s = a.allocate(512);   // never the freed 1024 B block: it is gone
  EXPECT_NE(s, p);
  a.free(q); a.free(r); a.free(s);
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), 0);
  EXPECT_EQ(a.stat("num_device_free"), 4);
  auto cached = make_meta();   // without the switch: the policy caches as before
  cached.free(cached.allocate(1000));
  EXPECT_EQ(cached.stat("reserved_bytes.all.current"), int64_t(2 * MiB));
}

// Frees run in destructors, so they never throw: a double free is counted (and reported
// on stderr) and leaves the allocator consistent.
TEST(CachingAllocator, FreeOfUnknownPointerIsCountedNeverThrown) {
  auto a = make_meta();
  void* p = a.allocate(1024);
  a.free(p);
  EXPECT_EQ(a.stat("num_invalid_frees"), 0);
  EXPECT_NO_THROW(a.free(p));
  EXPECT_EQ(a.stat("num_invalid_frees"), 1);
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), 0);
  void* q = a.allocate(1024);
  a.free(q);
  EXPECT_EQ(a.stat("num_invalid_frees"), 1);
  EXPECT_EQ(a.stat("allocation.all.current"), 0);
}

// The same seeded alloc/free sequence on meta and host gives the same decisions.
std::pair<std::vector<std::pair<std::string, size_t>>, std::map<std::string, int64_t>>
run_random(CachingAllocator& a, unsigned seed) {
  std::mt19937 rng(seed);
  a.record_history(true);
  a.set_capacity(160 * MiB);
  std::vector<void*> live;
  for (int i = 0; i < 3000; ++i) {
    const int r = int(rng() % 100);
    if (r < 55 || live.empty()) {
      size_t n = rng() % 4 == 0 ? 1 + rng() % (24 * MiB) : 1 + rng() % (512 * KiB);
      try { live.push_back(a.allocate(n)); } catch (const OutOfMemoryError&) {}
    } else if (r < 98) {
      size_t k = rng() % live.size();
      a.free(live[k]);
      live[k] = live.back();
      live.pop_back();
    } else {
      a.empty_cache();
    }
  }
  for (void* p : live) a.free(p);
  std::vector<std::pair<std::string, size_t>> seq;
  for (const auto& e : a.trace()) seq.emplace_back(e.action, e.size);
  return {seq, a.stats()};
}

TEST(CachingAllocator, MetaAndHostAreIdentical) {
  CachingAllocator meta(meta_device(), make_meta_raw_memory());
  CachingAllocator host(cpu_device(), make_host_raw_memory());
  auto [meta_seq, meta_stats] = run_random(meta, 1234);
  auto [host_seq, host_stats] = run_random(host, 1234);
  EXPECT_GT(meta_seq.size(), 3000u);
  EXPECT_GT(meta_stats["num_ooms"], 0);     // the sequence does exercise the OOM path
  EXPECT_EQ(meta_seq, host_seq);
  EXPECT_EQ(meta_stats, host_stats);
  EXPECT_EQ(meta_stats["allocated_bytes.all.current"], 0);
  EXPECT_EQ(meta_stats["inactive_split.all.current"], 0);
}

TEST(CachingAllocator, HostMemoryIsUsableAndAligned) {
  CachingAllocator a(cpu_device(), make_host_raw_memory());
  auto* p = static_cast<unsigned char*>(a.allocate(3000));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  for (int i = 0; i < 3000; ++i) p[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(p[2999], static_cast<unsigned char>(2999));
  a.free(p);
}

TEST(CachingAllocator, TraceEventsAndMemoryContext) {
  auto a = make_meta();
  a.free(a.allocate(100));                 // not recorded
  a.empty_cache();
  a.record_history(true);
  EXPECT_EQ(MemoryContext::current(), "");
  void* p = nullptr;
  {
    MemoryContext outer("features.0", "fwd");
    {
      MemoryContext inner("classifier", "bwd");
      EXPECT_EQ(MemoryContext::current(), "classifier/bwd");
    }
    EXPECT_EQ(MemoryContext::current(), "features.0/fwd");
    p = a.allocate(5000);
  }
  EXPECT_EQ(MemoryContext::current(), "");
  a.free(p);
  a.empty_cache();
  auto t = a.trace();
  std::vector<std::string> actions;
  for (const auto& e : t) actions.push_back(e.action);
  EXPECT_EQ(actions, (std::vector<std::string>{"segment_alloc", "alloc", "free_requested",
                                               "free_completed", "segment_free"}));
  EXPECT_EQ(t[0].size, 2 * MiB);
  EXPECT_EQ(t[1].size, 5120u);
  EXPECT_EQ(t[1].frame, "features.0/fwd");
  EXPECT_EQ(t[1].addr, t[0].addr);
  EXPECT_LE(t[0].time_us, t[4].time_us);
  a.record_history(true, 2);               // bounded: keeps the newest
  ASSERT_EQ(a.trace().size(), 2u);
  EXPECT_EQ(a.trace().back().action, "segment_free");
  a.clear_trace();
  EXPECT_TRUE(a.trace().empty());
  a.record_history(false);
  a.free(a.allocate(1));
  EXPECT_TRUE(a.trace().empty());
}

TEST(MemoryExport, SnapshotShape) {
  CachingAllocator a({DeviceType::cuda, 1}, make_meta_raw_memory());
  a.record_history(true);
  void* p;
  {
    MemoryContext ctx("encoder.layer.0", "fwd");
    p = a.allocate(3 * MiB);
  }
  void* q = a.allocate(700);
  a.free(q);
  a.set_capacity(1);
  EXPECT_THROW(a.allocate(50 * MiB), OutOfMemoryError);
  const nlohmann::json snap = memory_snapshot_json(a);
  ASSERT_TRUE(snap.contains("segments"));
  ASSERT_TRUE(snap.contains("device_traces"));
  ASSERT_EQ(snap["segments"].size(), 1u);   // the free small segment went in the OOM retry
  const auto& seg = snap["segments"][0];
  for (const char* k : {"device", "address", "total_size", "allocated_size", "active_size",
                        "requested_size", "stream", "segment_type", "segment_pool_id",
                        "is_expandable", "frames", "blocks"})
    EXPECT_TRUE(seg.contains(k)) << k;
  EXPECT_EQ(seg["device"], 1);
  EXPECT_EQ(seg["segment_type"], "large");
  EXPECT_EQ(seg["total_size"], 20 * MiB);
  EXPECT_EQ(seg["allocated_size"], 3 * MiB);
  ASSERT_EQ(seg["blocks"].size(), 2u);
  EXPECT_EQ(seg["blocks"][0]["state"], "active_allocated");
  EXPECT_EQ(seg["blocks"][0]["requested_size"], 3 * MiB);
  EXPECT_EQ(seg["blocks"][0]["frames"][0]["filename"], "encoder.layer.0");
  EXPECT_EQ(seg["blocks"][0]["frames"][0]["name"], "fwd");
  EXPECT_EQ(seg["blocks"][1]["state"], "inactive");
  EXPECT_EQ(seg["blocks"][0]["address"].get<uint64_t>() + 3 * MiB,
            seg["blocks"][1]["address"].get<uint64_t>());
  ASSERT_EQ(snap["device_traces"].size(), 2u);   // index = device
  EXPECT_TRUE(snap["device_traces"][0].empty());
  const auto& trace = snap["device_traces"][1];
  EXPECT_EQ(trace[0]["action"], "segment_alloc");
  EXPECT_EQ(trace[1]["action"], "alloc");
  EXPECT_EQ(trace[1]["frames"][0]["filename"], "encoder.layer.0");
  EXPECT_EQ(trace.back()["action"], "oom");
  EXPECT_TRUE(trace.back().contains("device_free"));
  for (const auto& e : trace)
    for (const char* k : {"action", "size", "stream", "time_us", "frames"})
      EXPECT_TRUE(e.contains(k)) << k;
  EXPECT_EQ(nlohmann::json::parse(snap.dump()), snap);
  a.free(p);
}

TEST(MemoryExport, ChromeTraceHasSpansAndCounters) {
  auto a = make_meta();
  a.record_history(true);
  OpProfiler::enable(true);
  void* p;
  {
    OpSpanScope span("conv1.fwd");
    p = a.allocate(4 * MiB);
  }
  { OpSpanScope comm("allreduce", 1); }
  OpProfiler::enable(false);
  { OpSpanScope ignored("not_recorded"); }
  auto spans = OpProfiler::take();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "conv1.fwd");
  EXPECT_TRUE(OpProfiler::take().empty());
  a.free(p);
  const nlohmann::json t = chrome_trace_json(a, spans);
  int x = 0, c = 0;
  int64_t last_allocated = -1, last_reserved = -1, max_allocated = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") {
      ++x;
      EXPECT_TRUE(e.contains("dur") && e.contains("ts") && e.contains("tid"));
    }
    if (e["ph"] == "C") {
      ++c;
      last_allocated = e["args"]["allocated"];
      last_reserved = e["args"]["reserved"];
      max_allocated = std::max(max_allocated, last_allocated);
    }
  }
  EXPECT_EQ(x, 2);
  EXPECT_EQ(c, 3);                          // segment_alloc, alloc, free_completed
  EXPECT_EQ(max_allocated, int64_t(4 * MiB));
  EXPECT_EQ(last_allocated, 0);
  EXPECT_EQ(last_reserved, int64_t(20 * MiB));
}

TEST(CachingAllocator, TwoThreadsSmoke) {
  CachingAllocator a(cpu_device(), make_host_raw_memory());
  auto work = [&a](unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<void*> live;
    for (int i = 0; i < 5000; ++i) {
      if (live.empty() || rng() % 2 == 0) {
        auto* p = static_cast<char*>(a.allocate(1 + rng() % (3 * MiB)));
        p[0] = 1;
        live.push_back(p);
      } else {
        a.free(live.back());
        live.pop_back();
      }
    }
    for (void* p : live) a.free(p);
  };
  std::thread t1(work, 1u), t2(work, 2u);
  t1.join(); t2.join();
  EXPECT_EQ(a.stat("allocated_bytes.all.current"), 0);
  EXPECT_EQ(a.stat("allocation.all.allocated"), a.stat("allocation.all.freed"));
  EXPECT_EQ(a.stat("inactive_split.all.current"), 0);
  a.empty_cache();
  EXPECT_EQ(a.stat("reserved_bytes.all.current"), 0);
}

std::unique_ptr<RawMemory> fake_cuda(int) { return make_meta_raw_memory(); }

TEST(AllocatorRegistry, PerDeviceAllocatorsAndCudaRegistration) {
  reset_allocators();
  CachingAllocator& cpu = allocator_for(cpu_device());
  EXPECT_EQ(&cpu, &allocator_for(cpu_device()));
  EXPECT_NE(&cpu, &allocator_for(meta_device()));
  EXPECT_NE(&allocator_for(meta_device()), &allocator_for({DeviceType::meta, 1}));
  EXPECT_EQ(allocator_for(meta_device()).device(), meta_device());
  register_raw_memory(DeviceType::cuda, nullptr);
  try {
    allocator_for({DeviceType::cuda, 0});
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("without CUDA support"), std::string::npos);
  }
  register_raw_memory(DeviceType::cuda, &fake_cuda);
  CachingAllocator& gpu = allocator_for({DeviceType::cuda, 0});
  gpu.free(gpu.allocate(100));
  EXPECT_EQ(gpu.stat("segment.all.current"), 1);
  register_raw_memory(DeviceType::cuda, nullptr);
  reset_allocators();
}

}  // namespace
}  // namespace oomlab
