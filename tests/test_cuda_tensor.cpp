// test_cuda_tensor.cpp — the CUDA backend around the op kernels, against the CPU:
//  * availability: the skip reason is one clear line (runs without a GPU too);
//  * copies: host<->device round trips bit-exact, every dtype->dtype cast equal to the
//    CPU's bit for bit (NaN, inf, out-of-range and rounding included), strided copies;
//  * host access on cuda tensors: factories, fill_, item(), to_vector, from_vector*;
//  * argmax counting (count_correct, count_task_correct with a confusion matrix);
//  * capacity emulation: OutOfMemoryError naming requested/capacity/free/allocated/reserved;
//  * the convolution's kernel choice: the cuDNN algorithm and whether heuristics or Find chose it;
//  * the cuDNN graph-API convolutions (auto under benchmark and on channels_last) against the
//    legacy ones.
// The optimizers and the span timer: test_cuda_optim.cpp.
// Everything that needs a device GTEST_SKIPs with the reason when none is usable.
// ctest tier: gpu
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "cuda_test_util.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/kernel_choices.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/loss.h"
#include "engine/train/train_step.h"
#include "kernels/cuda/cuda_settings.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
const DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::u8};

bool same_bytes(const Tensor& a, const Tensor& b) {
  Tensor x = to_host(a).contiguous(), y = to_host(b).contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// Values that exercise every conversion rule: rounding, ties, denormals, overflow, NaN, inf,
// negative and out-of-range integers.
std::vector<double> special_values() {
  const double inf = std::numeric_limits<double>::infinity();
  return {0.0, -0.0, 1.0, -1.5, 2.5, 3.5, 1.0 / 3.0, 255.0, 256.0, 300.7, -3.2, 65504.0, 65520.0, 1e10, -1e10,
          1e-8, 6e-8, 1e-40, 3.4e38, 1e300, inf, -inf, std::nan(""), 9.3e18, -9.3e18, 0.1, 1e-3, 123456.789};
}
}  // namespace

TEST(CudaAvailability, ReasonIsOneClearLine) {
  std::string why;
  const bool ok = cuda_available(&why);
  if (ok) { EXPECT_TRUE(why.empty()); return; }
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  if (!built_with_cuda()) EXPECT_NE(why.find("no CUDA backend"), std::string::npos) << why;
  else EXPECT_NE(why.find("no usable"), std::string::npos) << why;
  // Allocating on cuda raises a typed DeviceError (never a crash), whatever the build.
  EXPECT_THROW(Tensor::empty({4}, DType::f32, cuda0()), DeviceError);
}

// The H100's DataParallel failure (cuBLAS status 14): a new thread whose first CUDA work is
// a GEMM on a handle an exited thread left in the pool, with no context bound to the new
// thread (cudaGetDevice() answers 0 without binding one). DeviceGuard binds it now.
TEST(CudaTensor, FreshThreadsRunGemmsOnPooledHandles) {
  OOMLAB_REQUIRE_CUDA();
  const Device devs[] = {cuda0(), Device{DeviceType::cuda, 1}};
  std::vector<Tensor> a;
  for (Device d : devs) {
    a.push_back(Tensor::ones({64, 64}, DType::f32, d));
    (void)Tensor::empty({64, 64}, DType::f32, d);   // a cached block: the thread's matmul needs no cudaMalloc
  }
  for (int round = 0; round < 3; ++round)
    for (int i = 0; i < 2; ++i) {
      std::exception_ptr err;
      std::vector<double> got;
      std::thread([&] {
        try { got = matmul(a[size_t(i)], a[size_t(i)]).to_vector(); } catch (...) { err = std::current_exception(); }
      }).join();
      if (err) std::rethrow_exception(err);
      ASSERT_EQ(got.size(), 64u * 64u);
      EXPECT_EQ(got[0], 64.0) << "round " << round << " on " << devs[i].str();
    }
}

TEST(CudaTensor, HostDeviceRoundTripIsBitExact) {
  OOMLAB_REQUIRE_CUDA();
  for (DType t : kAll) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<double> v = special_values();
    if (t == DType::i64 || t == DType::u8)
      for (double& x : v) x = std::isfinite(x) ? std::fmod(std::trunc(x), 100.0) + 100.0 : 7.0;
    Tensor h = Tensor::from_vector(v, {int64_t(v.size())}, t);
    Tensor d = to_device(h, cuda0());
    EXPECT_EQ(d.device(), cuda0());
    EXPECT_TRUE(same_bytes(to_host(d), h));
    EXPECT_TRUE(same_bytes(d.clone(), h));   // device -> device copy
  }
}

TEST(CudaTensor, EveryCastMatchesCpuBitForBit) {
  OOMLAB_REQUIRE_CUDA();
  const std::vector<double> v = special_values();
  for (DType src : kAll)
    for (DType dst : kAll) {
      SCOPED_TRACE(std::string(dtype_name(src)) + " -> " + dtype_name(dst));
      std::vector<double> in = v;
      if (src == DType::i64 || src == DType::u8)
        for (double& x : in) x = std::isfinite(x) ? std::fmod(std::trunc(x), 200.0) : -5.0;
      if (src == DType::u8)
        for (double& x : in) x = std::fabs(x);
      Tensor h = Tensor::from_vector(in, {int64_t(in.size())}, src);
      Tensor want = h.to(dst);
      Tensor got = to_device(h, cuda0()).to(dst);
      EXPECT_EQ(got.device(), cuda0());
      EXPECT_TRUE(same_bytes(got, want));
      // Cross-device conversion inside copy_: host src -> device dst and back.
      Tensor d = Tensor::empty(h.shape(), dst, cuda0());
      d.copy_(h);
      EXPECT_TRUE(same_bytes(d, want));
      Tensor back = Tensor::empty(h.shape(), dst, cpu_device());
      back.copy_(to_device(h, cuda0()));
      EXPECT_TRUE(same_bytes(back, want));
    }
}

TEST(CudaTensor, StridedCopiesMatchCpu) {
  OOMLAB_REQUIRE_CUDA();
  Tensor h = random_tensor({4, 5, 6, 3}, -1, 1, 3, DType::f32);
  Tensor d = to_device(h, cuda0());
  auto views = [](const Tensor& t) {
    return std::vector<Tensor>{t.permute({3, 1, 0, 2}), t.transpose(0, 2), t.narrow(1, 1, 3), t.narrow(3, 2, 1),
                               t.transpose(1, 3).narrow(0, 1, 2)};
  };
  auto hv = views(h), dv = views(d);
  for (size_t i = 0; i < hv.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(same_bytes(dv[i].contiguous(), hv[i].contiguous()));
    EXPECT_TRUE(same_bytes(to_host(dv[i]), hv[i].contiguous()));           // strided device -> host
    Tensor into = Tensor::empty(hv[i].shape(), DType::f16, cuda0());       // strided host -> device, with a cast
    into.copy_(hv[i]);
    EXPECT_TRUE(same_bytes(into, hv[i].contiguous().to(DType::f16)));
  }
}

TEST(CudaTensor, FactoriesFillAndHostReads) {
  OOMLAB_REQUIRE_CUDA();
  const Device dev = cuda0();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::u8}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_TRUE(same_bytes(Tensor::zeros({3, 5}, t, dev), Tensor::zeros({3, 5}, t)));
    EXPECT_TRUE(same_bytes(Tensor::full({7}, 3.0, t, dev), Tensor::full({7}, 3.0, t)));
    EXPECT_EQ(Tensor::full({}, 5.0, t, dev).item(), 5.0);
  }
  std::vector<double> v = {0.5, -1.25, 3.0, 7.5, 1e-3, -2.0};
  EXPECT_TRUE(
      same_bytes(Tensor::from_vector(v, {2, 3}, DType::bf16, dev), Tensor::from_vector(v, {2, 3}, DType::bf16)));
  EXPECT_EQ(Tensor::from_vector(v, {2, 3}, DType::f64, dev).to_vector(), v);
  std::vector<int64_t> iv = {4, -9, 1LL << 40, 0};
  EXPECT_EQ(Tensor::from_vector_i64(iv, {4}, dev).to_vector_i64(), iv);
  manual_seed(11);
  Tensor hu = Tensor::uniform({100}, -1, 1), hn = Tensor::normal({100}, 0, 2);
  manual_seed(11);
  Tensor du = Tensor::uniform({100}, -1, 1, DType::f32, dev), dn = Tensor::normal({100}, 0, 2, DType::f32, dev);
  EXPECT_TRUE(same_bytes(du, hu));
  EXPECT_TRUE(same_bytes(dn, hn));
  EXPECT_EQ(sum_all(Tensor::ones({1000}, DType::f32, dev)).item(), 1000.0);
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f32, dev);
  EXPECT_EQ(x.transpose(0, 1).to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));   // strided host read
}

// count_correct's CUDA kernel (host path and, under the switch, the device argmax) against
// the CPU: random rows, GPT-2-wide rows (even rows labelled with their argmax), ties (the
// first maximal index), NaN (the maximum, the first NaN), +-inf, a strided view (the op's host
// copy), every float type.
TEST(CudaTensor, ArgmaxCountsMatchCpu) {
  OOMLAB_REQUIRE_CUDA();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor special = Tensor::from_vector({1, 3, 3, 0, nan, 2, nan, 5, -inf, inf, 7, inf, 0, -0.0, 0, 0,
                                        -inf, -inf, -inf, -inf}, {5, 4});
  Tensor special_labels = Tensor::from_vector_i64({1, 0, 1, 0, 0}, {5});   // each row's torch.argmax: 1, 0, 1, 0, 0
  EXPECT_EQ(count_correct(special, special_labels), 5);
  // even rows labelled with their own argmax, odd rows at random: matches and misses both counted
  auto labelled = [](const Tensor& x, uint64_t seed) {
    const int64_t N = x.size(0), C = x.size(1);
    const std::vector<double> v = x.to_vector();
    std::vector<int64_t> lab = random_ints(N, 0, C, seed);
    for (int64_t i = 0; i < N; i += 2)
      lab[size_t(i)] = std::max_element(v.begin() + i * C, v.begin() + (i + 1) * C) - (v.begin() + i * C);
    return std::make_pair(x, Tensor::from_vector_i64(lab, {N}));
  };
  const std::vector<std::pair<Tensor, Tensor>> cases = {labelled(random_tensor({33, 10}, -1, 1, 21, DType::f32), 22),
                                                        labelled(random_tensor({70, 50257}, -1, 1, 25, DType::f32), 26),
                                                        {special, special_labels}};
  for (const auto& [logits, labels] : cases) {
    for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      const Tensor lt = logits.to(t);
      const int64_t mine = count_correct(lt, labels);
      if (t == DType::f32) { EXPECT_GE(mine, (logits.size(0) + 1) / 2); }
      EXPECT_EQ(count_correct(to_device(lt, cuda0()), to_device(labels, cuda0())), mine)
          << dtype_name(t) << " " << shape_str(lt.shape());
    }
  }
  Tensor wide = to_device(random_tensor({12, 7}, -1, 1, 27, DType::f32), cuda0());
  Tensor lab = Tensor::from_vector_i64(random_ints(7, 0, 12, 28), {7});
  EXPECT_EQ(count_correct(wide.transpose(0, 1), to_device(lab, cuda0())),
            count_correct(random_tensor({12, 7}, -1, 1, 27, DType::f32).transpose(0, 1), lab));
  Tensor logits = random_tensor({33, 10}, -1, 1, 21, DType::f32);
  Tensor labels = Tensor::from_vector_i64(random_ints(33, 0, 10, 22), {33});
  Tensor seg = random_tensor({2, 4, 6, 5}, -1, 1, 23, DType::f32);
  Tensor masks = Tensor::from_vector_i64(random_ints(60, 0, 4, 24), {2, 6, 5});
  std::vector<int64_t> conf_cpu(16, 0), conf_dev(16, 0);
  EXPECT_EQ(count_task_correct(to_device(seg, cuda0()), to_device(masks, cuda0()), &conf_dev),
            count_task_correct(seg, masks, &conf_cpu));
  EXPECT_EQ(conf_dev, conf_cpu);
}

// ---- capacity emulation -------------------------------------------------------------------
TEST(CudaMemory, CapacityEmulationRaisesClearOutOfMemoryError) {
  OOMLAB_REQUIRE_CUDA();
  reset_allocators();
  CachingAllocator& al = allocator_for(cuda0());
  al.set_capacity(size_t(64) << 20);
  {
    Tensor keep = Tensor::empty({int64_t(30) << 18}, DType::f32, cuda0());   // 30 MiB
    std::string msg;
    try {
      Tensor big = Tensor::empty({int64_t(48) << 18}, DType::f32, cuda0());   // 48 MiB: over the cap
    } catch (const OutOfMemoryError& e) {
      msg = e.what();
    }
    ASSERT_FALSE(msg.empty()) << "no OutOfMemoryError";
    for (const char* k : {"cuda:0", "out of memory", "tried to allocate 48.00 MiB", "capacity 64.00 MiB", "allocated",
                          "reserved", "free"})
      EXPECT_NE(msg.find(k), std::string::npos) << k << " missing in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(al.stat("num_ooms"), 1);
    EXPECT_GE(al.stat("num_alloc_retries"), 1);
    Tensor small = Tensor::zeros({1024}, DType::f32, cuda0());   // still usable after the OOM
    EXPECT_EQ(sum_all(small).item(), 0.0);
    EXPECT_LE(al.stat("reserved_bytes.all.current"), int64_t(64) << 20);
  }
  al.set_capacity(0);
  reset_allocators();
}

// kernel_choices.h on CUDA: a convolution names its cuDNN algorithm, math type, workspace and
// whether the heuristics (the default) or Find (cudnn benchmark) chose it.
TEST(CudaConv, KernelChoiceNamesTheCudnnAlgorithm) {
  OOMLAB_REQUIRE_CUDA();
  Tensor x = Tensor::ones({2, 8, 16, 16}, DType::f32, cuda0()), w = Tensor::ones({8, 8, 3, 3}, DType::f32, cuda0());
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  reset_kernel_choices();
  {
    MemoryContext ctx("heur", "fwd");
    (void)conv2d(x, w, Tensor(), p).to_vector();
  }
  set_cudnn_benchmark(true);
  {
    MemoryContext ctx("find", "fwd");
    (void)conv2d(x, w, Tensor(), p).to_vector();
  }
  set_cudnn_benchmark(false);
  const nlohmann::json rows = kernel_choices_json();
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  for (int i = 0; i < 2; ++i) {
    const std::string c = rows[size_t(i)]["choice"].get<std::string>();
    EXPECT_EQ(c.rfind("cuDNN ", 0), 0u) << c;
    EXPECT_NE(c.find(", workspace "), std::string::npos) << c;
    EXPECT_NE(c.find(i == 0 ? "(heuristics)" : "(find)"), std::string::npos) << c;
    EXPECT_EQ(rows[size_t(i)]["op"], "conv2d_forward");
  }
}

// The graph-API path (OOMLAB_CUDNN_GRAPH, cudnn_graph_api(); conv_graph.cu) against the legacy
// path, forward and both backward passes, per dtype: within the dtype's rounding of two
// different algorithms; and on the dense float32 / half problems each call names a graph
// engine ("cuDNN graph eng<N> ...") rather than falling back (a broken descriptor would fall
// back silently otherwise; float64 and depthwise may legitimately have no graph engine).
TEST(CudaConv, GraphApiMatchesLegacyAndNamesItsEngines) {
  OOMLAB_REQUIRE_CUDA();
  struct Problem { Shape x, w; Conv2dParams p; };
  Conv2dParams pad1, s2, dw;
  pad1.pad_h = pad1.pad_w = 1;
  s2.stride_h = s2.stride_w = 2;
  dw.pad_h = dw.pad_w = 1;
  dw.groups = 8;
  const Problem problems[] = {{{4, 16, 14, 14}, {32, 16, 3, 3}, pad1}, {{4, 16, 14, 14}, {8, 16, 1, 1}, s2},
                              {{2, 8, 9, 9}, {8, 1, 3, 3}, dw}};
  struct Run { std::vector<double> y, dx, dw; };
  auto run = [](const Problem& pr, DType t, bool graph) {
    set_cudnn_graph_api(graph);
    Tensor x = to_device(random_f64(pr.x, -1, 1, 3).to(t), cuda0());
    Tensor w = to_device(random_f64(pr.w, -1, 1, 4).to(t), cuda0());
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    Tensor y = conv2d(x, w, Tensor(), pr.p);
    Tensor gy = to_device(random_f64(y.shape(), -1, 1, 5).to(t), cuda0());
    sum_all(mul(y, gy)).backward();
    Run r{to_host(y).to_vector(), to_host(x.grad()).to_vector(), to_host(w.grad()).to_vector()};
    set_cudnn_graph_api(false);
    return r;
  };
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const double tol = t == DType::f64 ? 1e-12 : (t == DType::f32 ? (tf32_enabled() ? 5e-3 : 1e-5) : 3e-2);
    for (const Problem& pr : problems) {
      reset_kernel_choices();
      const Run legacy = run(pr, t, false), graph = run(pr, t, true);
      const auto close = [&](const std::vector<double>& a, const std::vector<double>& b, const char* what) {
        ASSERT_EQ(a.size(), b.size());
        double scale = 1e-30, worst = 0;
        for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::fabs(a[i]));
        for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / scale);
        EXPECT_LE(worst, tol) << dtype_name(t) << " " << what << " groups " << pr.p.groups;
      };
      close(legacy.y, graph.y, "forward");
      close(legacy.dx, graph.dx, "backward data");
      close(legacy.dw, graph.dw, "backward weight");
      int graph_calls = 0;
      for (const auto& row : kernel_choices_json())
        if (row["choice"].get<std::string>().rfind("cuDNN graph eng", 0) == 0) ++graph_calls;
      if (t != DType::f64 && pr.p.groups == 1) {
        EXPECT_EQ(graph_calls, 3) << dtype_name(t) << " groups " << pr.p.groups << ": " << kernel_choices_json().dump();
      }
    }
  }
}
