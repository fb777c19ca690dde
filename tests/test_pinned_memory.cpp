// test_pinned_memory.cpp — --pin-memory (PyTorch's pin_memory):
//  * the DataLoader's pinned copy (with a counting malloc pinner standing in for the
//    backend's pool, so the loader logic is tested on any machine): input then target
//    bytes equal the batch's vectors for image, token and mask datasets, with any number
//    of workers; blocks handed back to the loader are released (bounded live blocks);
//  * cpu and meta have no pinned memory: a clear ValueError from pinned_host_alloc, and a
//    --pin-memory run warns, keeps pageable batches (metrics.pin_memory false) and is
//    bit-identical to the run without it;
//  * on a GPU (skipped without one): pinned batches arrive bit-exact, a pinned run equals
//    the pageable one, and the pool reuses a freed block only after its copies are done.
// ctest tier: gpu
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <set>

#include "cuda_test_util.h"
#include "engine/core/backend.h"
#include "engine/data/dataloader.h"
#include "engine/data/synthetic_seg.h"
#include "engine/data/synthetic_seq.h"
#include "engine/memory/pinned_host.h"
#include "engine/train/train_step.h"
#include "experiments/train/train_command.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
struct CountingPinner {   // malloc'd blocks standing in for page-locked ones
  std::shared_ptr<std::atomic<int>> live = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> made = std::make_shared<std::atomic<int>>(0);
  HostPinner fn() const {
    return [live = live, made = made](size_t n) {
      ++*live;
      ++*made;
      return std::shared_ptr<void>(std::malloc(n), [live](void* p) { std::free(p); --*live; });
    };
  }
};

void expect_pinned_copy(const HostBatch& b) {
  ASSERT_TRUE(b.pinned);
  const char* p = static_cast<const char*>(b.pinned.get());
  const void* in = b.is_tokens() ? static_cast<const void*>(b.tokens.data()) : b.images.data();
  EXPECT_EQ(b.pinned_target_offset % 64, 0u);
  EXPECT_GE(b.pinned_target_offset, b.input_bytes());
  EXPECT_EQ(std::memcmp(p, in, b.input_bytes()), 0);
  EXPECT_EQ(std::memcmp(p + b.pinned_target_offset, b.targets().data(), b.target_bytes()), 0);
}

RunSpec small_run() {
  RunSpec c;
  c.model = "mlp";
  c.dataset = "synthetic";
  c.input = {1, 28, 28};
  c.synthetic_size = 128;
  c.batch = 16;
  c.steps = 10;
  c.optimizer = "sgd";
  c.lr = 0.05;
  c.seed = 3;
  c.quiet = true;
  c.eval_batches = 2;
  return c;
}
}  // namespace

TEST(PinnedLoader, BatchesCarryAnExactPinnedCopyForEveryKindOfDataset) {
  SyntheticImageDataset images({1, 8, 8}, 50, 10, 1);
  SyntheticSeqOptions so;
  so.size = 50;
  so.max_len = 16;
  so.min_len = 4;
  SyntheticSequenceDataset tokens(so);
  SyntheticSegmentationDataset masks({3, 16, 16}, 50, 4, 2);
  for (const Dataset* ds : {static_cast<const Dataset*>(&images), static_cast<const Dataset*>(&tokens),
                            static_cast<const Dataset*>(&masks)})
    for (int workers : {0, 3}) {
      SCOPED_TRACE(ds->name() + " workers " + std::to_string(workers));
      CountingPinner pinner;
      DataLoader dl(*ds, 8, true, false, 5, workers);
      dl.set_pinner(pinner.fn());
      EXPECT_TRUE(dl.pins());
      DataLoader plain(*ds, 8, true, false, 5, workers);
      HostBatch b, ref;
      int n = 0;
      while (dl.next(b)) {
        ASSERT_TRUE(plain.next(ref));
        EXPECT_EQ(b.images, ref.images);   // pinning changes nothing the run sees
        EXPECT_EQ(b.tokens, ref.tokens);
        EXPECT_EQ(b.targets(), ref.targets());
        EXPECT_FALSE(ref.pinned);
        expect_pinned_copy(b);
        ++n;
      }
      EXPECT_EQ(n, 7);   // 50 samples in batches of 8, the last one short
      EXPECT_EQ(*pinner.made, 7);
      // The loader holds at most workers x prefetch_factor built batches plus the caller's.
      EXPECT_LE(*pinner.live, workers * 2 + 1);
    }
}

TEST(PinnedLoader, BlocksOfReturnedBatchesAreReleased) {
  SyntheticImageDataset ds({1, 4, 4}, 400, 10, 1);
  CountingPinner pinner;
  {
    DataLoader dl(ds, 4, false, false, 0, 2);
    dl.set_pinner(pinner.fn());
    HostBatch b;
    int max_live = 0;
    while (dl.next(b)) max_live = std::max(max_live, pinner.live->load());
    EXPECT_EQ(*pinner.made, 100);
    EXPECT_LE(max_live, 2 * 2 + 2);   // built ahead + the caller's + one being built
  }
  EXPECT_LE(*pinner.live, 1);   // the caller's batch `b` is gone with the scope too
}

TEST(PinnedHost, CpuAndMetaHaveNoPinnedMemory) {
  EXPECT_FALSE(has_pinned_host_memory(cpu_device()));
  EXPECT_FALSE(has_pinned_host_memory(Device{DeviceType::meta, 0}));
  try {
    pinned_host_alloc(cpu_device(), 64);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("device cpu:0 has no pinned host memory"), std::string::npos) << e.what();
  }
}

// PyTorch warns and goes on without an accelerator; so do we, and the run is unchanged.
TEST(PinnedHost, PinMemoryOnTheCpuWarnsAndChangesNothing) {
  RunSpec c = small_run();
  const nlohmann::json ref = train(c)["metrics"];
  c.pin_memory = true;
  ::testing::internal::CaptureStderr();
  const nlohmann::json res = train(c);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("pinned memory asked for, but device cpu:0 has no pinned host memory"), std::string::npos) << err;
  EXPECT_EQ(res["metrics"]["pin_memory"], false);
  EXPECT_EQ(res["config"]["pin_memory"], true);
  EXPECT_EQ(res["metrics"]["history"]["train_loss"], ref["history"]["train_loss"]);
  EXPECT_EQ(res["metrics"]["history"]["epochs"], ref["history"]["epochs"]);
}

TEST(CudaPinned, PinnedBatchesArriveBitExact) {
  OOMLAB_REQUIRE_CUDA();
  ASSERT_TRUE(has_pinned_host_memory(cuda0()));
  SyntheticSeqOptions so;
  so.size = 40;
  so.max_len = 16;
  SyntheticSequenceDataset tokens(so);
  SyntheticSegmentationDataset masks({3, 16, 16}, 40, 4, 2);
  for (const Dataset* ds : {static_cast<const Dataset*>(&tokens), static_cast<const Dataset*>(&masks)}) {
    SCOPED_TRACE(ds->name());
    DataLoader dl(*ds, 8, true, false, 5, 2);
    dl.set_pinner([](size_t n) { return pinned_host_alloc(cuda0(), n); });
    HostBatch b;
    while (dl.next(b)) {
      ASSERT_TRUE(b.pinned);
      const Tensor x = batch_input_to_device(b, cuda0()), y = batch_target_to_device(b, cuda0());
      HostBatch pageable = b;
      pageable.pinned.reset();
      const Tensor x_ref = batch_input_to_device(pageable, cpu_device());
      const Tensor y_ref = batch_target_to_device(pageable, cpu_device());
      const Tensor xh = to_host(x), yh = to_host(y);
      ASSERT_EQ(xh.shape(), x_ref.shape());
      ASSERT_EQ(yh.shape(), y_ref.shape());
      EXPECT_EQ(std::memcmp(xh.raw_data(), x_ref.raw_data(), x_ref.nbytes()), 0);
      EXPECT_EQ(std::memcmp(yh.raw_data(), y_ref.raw_data(), y_ref.nbytes()), 0);
    }
  }
}

TEST(CudaPinned, PinnedRunEqualsPageableRun) {
  OOMLAB_REQUIRE_CUDA();
  RunSpec c = small_run();
  c.device = cuda0();
  const nlohmann::json ref = train(c)["metrics"];
  c.pin_memory = true;
  const nlohmann::json res = train(c)["metrics"];
  EXPECT_EQ(res["pin_memory"], true);
  EXPECT_EQ(res["history"]["train_loss"], ref["history"]["train_loss"]);
}

// A block dropped right after its copy was queued is not handed out again until the copy
// has completed (the copies below take milliseconds; the host gets back in microseconds),
// and is reused once the device is idle.
TEST(CudaPinned, FreedBlockWaitsForItsCopies) {
  OOMLAB_REQUIRE_CUDA();
  const size_t bytes = size_t(256) << 20;
  Tensor dst = Tensor::empty({int64_t(bytes / 4)}, DType::f32, cuda0());
  std::shared_ptr<void> a = pinned_host_alloc(cuda0(), bytes);
  std::memset(a.get(), 0x3c, bytes);
  void* const a_ptr = a.get();
  for (int i = 0; i < 4; ++i) copy_from_pinned(cuda0(), dst.raw_data(), a.get(), bytes);
  a.reset();
  std::shared_ptr<void> b = pinned_host_alloc(cuda0(), bytes);
  EXPECT_NE(b.get(), a_ptr) << "a block was reused while a copy from it was still queued";
  b.reset();
  device_synchronize(cuda0());
  std::set<void*> seen;
  std::shared_ptr<void> c = pinned_host_alloc(cuda0(), bytes), d = pinned_host_alloc(cuda0(), bytes);
  seen = {c.get(), d.get()};
  EXPECT_TRUE(seen.count(a_ptr)) << "an idle freed block should be reused";
  // What arrived is what the block held when the copies were queued.
  const Tensor h = to_host(dst);
  EXPECT_EQ(static_cast<const unsigned char*>(h.raw_data())[12345], 0x3c);
  EXPECT_THROW(copy_from_pinned(cuda0(), dst.raw_data(), dst.raw_data(), 16), DeviceError);
}
