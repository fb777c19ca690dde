// test_op_profiler.cpp — profiler spans' device time (engine/memory/memory_export.h):
// OpSpanScope asks its device's span timer (BackendHooks span_timer_*) for a start and an end
// mark on the compute stream, OpProfiler::take() resolves each span's device_us through the
// same backend and resets its timer once, and the Chrome trace carries it as args.device_us.
// The timer here is a stand-in registered for the cuda device type around each test (the
// real one, kernels/cuda/span_timer.cpp, runs in test_cuda_tensor on a GPU).
// ctest tier: unit
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/core/backend.h"
#include "engine/core/dispatch.h"
#include "engine/memory/memory_export.h"

using namespace oomlab;

namespace {
struct FakeTimer {
  std::vector<int> started_on;   // device index per start
  std::vector<int64_t> stopped;  // handles, in order
  int resets = 0;
};
FakeTimer g_timer;

int64_t fake_start(int device) {
  g_timer.started_on.push_back(device);
  return device == 7 ? -1 : int64_t(g_timer.started_on.size() - 1);   // device 7: "capturing"
}
void fake_stop(int64_t h) { g_timer.stopped.push_back(h); }
int64_t fake_elapsed(int64_t h) { return 1000 + h; }
void fake_reset() { ++g_timer.resets; }

class OpProfilerDeviceTime : public ::testing::Test {
 protected:
  void SetUp() override {
    ensure_kernels_registered();   // a CUDA build's real hooks first, so that they are restored
    saved_ = backend_hooks(DeviceType::cuda);
    BackendHooks h = saved_;
    h.span_timer_start = &fake_start;
    h.span_timer_stop = &fake_stop;
    h.span_timer_elapsed_us = &fake_elapsed;
    h.span_timer_reset = &fake_reset;
    register_backend_hooks(DeviceType::cuda, h);
    g_timer = FakeTimer{};
    OpProfiler::take();
    OpProfiler::enable(true);
  }
  void TearDown() override {
    OpProfiler::enable(false);
    OpProfiler::take();
    register_backend_hooks(DeviceType::cuda, saved_);
  }
  BackendHooks saved_;
};
}  // namespace

TEST_F(OpProfilerDeviceTime, DeviceSpansCarryTheTimersElapsedTime) {
  const Device cuda1{DeviceType::cuda, 1};
  { OpSpanScope a("a/fwd", 0, cuda1); }
  { OpSpanScope b("b/fwd", 0, cuda1); }
  ASSERT_EQ(g_timer.started_on, (std::vector<int>{1, 1}));
  EXPECT_EQ(g_timer.stopped, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(g_timer.resets, 0);   // nothing resolved yet
  const std::vector<OpSpan> spans = OpProfiler::take();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].device_us, 1000);
  EXPECT_EQ(spans[1].device_us, 1001);
  EXPECT_EQ(spans[0].device_timer, -1);   // resolved: no handle outlives take()
  EXPECT_EQ(g_timer.resets, 1);
}

TEST_F(OpProfilerDeviceTime, HostSpansCommStreamsAndRefusedMarksHaveNone) {
  { OpSpanScope host("cpu/fwd", 0, cpu_device()); }
  { OpSpanScope meta("meta/fwd", 0, meta_device()); }
  { OpSpanScope comm("allreduce", 1, Device{DeviceType::cuda, 0}); }   // not the compute stream
  { OpSpanScope capturing("captured/fwd", 0, Device{DeviceType::cuda, 7}); }   // the timer said -1
  EXPECT_EQ(g_timer.started_on, (std::vector<int>{7}));
  EXPECT_TRUE(g_timer.stopped.empty());
  const std::vector<OpSpan> spans = OpProfiler::take();
  ASSERT_EQ(spans.size(), 4u);
  for (const OpSpan& s : spans) EXPECT_EQ(s.device_us, -1) << s.name;
  EXPECT_EQ(g_timer.resets, 0);   // no span held a handle
}

TEST_F(OpProfilerDeviceTime, ChromeTraceCarriesDeviceTime) {
  { OpSpanScope a("a/fwd", 0, Device{DeviceType::cuda, 0}); }
  { OpSpanScope h("h/fwd"); }
  const std::vector<OpSpan> spans = OpProfiler::take();
  CachingAllocator alloc(meta_device(), make_meta_raw_memory());
  const nlohmann::json t = chrome_trace_json(alloc, spans);
  int timed = 0, untimed = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e.contains("args") && e["args"].contains("device_us")) {
      EXPECT_EQ(e["name"], "a/fwd");
      EXPECT_EQ(e["args"]["device_us"], 1000);
      ++timed;
    } else {
      ++untimed;
    }
  }
  EXPECT_EQ(timed, 1);
  EXPECT_EQ(untimed, 1);
}
