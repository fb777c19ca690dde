// conv_graph.cu — convolutions on cuDNN's graph (backend) API (conv_graph.h), the path PyTorch
// takes by default (its "cuDNN v8 API"): one operation graph per problem, engine
// configurations from the heuristics (mode A, then the fallback list), filtered by
// conv_graph_rules.h, finalized into execution plans and cached.
// Plans: per (handle, dtype, direction, shape, parameters, the three pointers' alignments,
// TF32 / benchmark / deterministic / workspace settings) one cached GraphPlan holds every descriptor and the
// usable execution plans in preference order: the heuristics' order, the first
// kHeuristicPlans of them (a spare for a workspace that cannot be allocated), or, with
// cudnn_benchmark(), up to kBenchmarkPlans timed on the call's own buffers (fastest first;
// the outputs are scratch until the real call overwrites them). A problem the graph API has
// no usable plan for is cached too, with cuDNN's answer, and runs the legacy path.
// Handles are per (thread, device) (cuda_libs.h): keying by handle keeps a plan on the handle
// that finalized it. Workspaces come from the caching allocator (tag "workspace").
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/memory/kernel_choices.h"
#include "kernels/cuda/conv_graph.h"
#include "kernels/cuda/conv_graph_desc.h"
#include "kernels/cuda/conv_graph_rules.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_libs.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/cuda_stream.h"

namespace oomlab {
namespace {
using namespace cudnn_graph;

constexpr size_t kHeuristicPlans = 2;
constexpr size_t kBenchmarkPlans = 8;

// The cuda_settings.h switches a plan is built under (all part of its cache key).
struct Settings {
  bool tf32, bench, deterministic;
  size_t limit;
};


// The heuristics' engine configurations for `graph` under `mode` (none when it has none).
std::vector<Desc> engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendDescriptor_t g = graph.get();
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, "heuristics graph");
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  step(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                nullptr),
       "heuristics count");
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  step(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                raw.data()),
       "heuristics results");
  while (int64_t(cfgs.size()) > got) cfgs.pop_back();
  return cfgs;
}

// An engine configuration's notes and its tag (conv_graph_rules.h).
struct EngineInfo {
  cudnn_graph::EngineNotes notes;
  std::string tag;
};
EngineInfo engine_info(const Desc& cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  step(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e),
       "engine of a configuration");
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  step(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, int64_t(notes.size()),
                                &n, notes.data()),
       "engine notes");
  EngineInfo info;
  for (int64_t i = 0; i < n; ++i) {
    info.notes.tensor_core |= notes[size_t(i)] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    info.notes.down_convert_inputs |= notes[size_t(i)] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
    info.notes.reduced_precision_reduction |= notes[size_t(i)] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
    info.notes.nondeterministic |= notes[size_t(i)] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
  }
  int64_t index = -1;
  step(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index), "engine index");
  std::vector<Desc> choices;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raw.push_back(choices.back().get());
  }
  step(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                int64_t(raw.size()), &n, raw.data()),
       "knob choices");
  std::vector<std::pair<int64_t, int64_t>> knobs;
  for (int64_t i = 0; i < n; ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, m = 0;
    step(cudnnBackendGetAttribute(raw[size_t(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &m, &type),
         "knob type");
    step(cudnnBackendGetAttribute(raw[size_t(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &m, &value),
         "knob value");
    knobs.emplace_back(int64_t(type), value);
  }
  info.tag = cudnn_graph::engine_tag(index, knobs);
  return info;
}

struct Engine {
  Desc cfg, plan;
  size_t ws = 0;
  std::string tag;
};

struct GraphPlan {
  std::vector<Desc> keep;          // tensors, convolution, operation, graph: alive with the plans
  std::vector<Engine> engines;     // preference order; empty: no usable plan (why)
  bool from_find = false;
  std::string why;
};

// The pointers of a call in uid order (x or dx, w or dw, y or dy).
std::array<void*, 3> pointers(const Conv2dArgs& a, int kind) {
  if (kind == 0) return {const_cast<void*>(a.x), const_cast<void*>(a.w), a.y};
  if (kind == 1) return {a.dx, const_cast<void*>(a.w), const_cast<void*>(a.dy)};
  return {const_cast<void*>(a.x), a.dw, const_cast<void*>(a.dy)};
}

cudnnStatus_t execute(cudnnHandle_t h, const Engine& e, std::array<void*, 3> ptrs, void* ws) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {1, 2, 3};
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs.data(), "variant pack pointers");
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, "variant pack uids");
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "variant pack workspace");
  pack.finalize("variant pack");
  return cudnnBackendExecute(h, e.plan.get(), pack.get());
}
// As execute, with a variant pack cuDNN refuses read as NOT_SUPPORTED (nothing ran).
cudnnStatus_t try_execute(cudnnHandle_t h, const Engine& e, std::array<void*, 3> ptrs, void* ws, std::string* why) {
  try {
    return execute(h, e, ptrs, ws);
  } catch (const Refused& r) {
    *why = r.why;
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
}

// An execution plan for `cfg` when the rules accept it, it finalizes and its workspace is
// within the workspace limit; otherwise nullopt and *skipped says why (the last reason is kept).
std::optional<Engine> make_engine(cudnnHandle_t h, Desc cfg, DType t, const Settings& set, std::string* skipped) {
  EngineInfo info;
  try {
    info = engine_info(cfg);
  } catch (const Refused& r) {   // one configuration cuDNN will not describe: the next one
    *skipped = r.why;
    return std::nullopt;
  }
  if (const char* refusal = cudnn_graph::engine_refusal(info.notes, t, set.tf32, set.deterministic)) {
    *skipped = str_cat(info.tag, " ", refusal);
    return std::nullopt;
  }
  Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  const cudnnBackendDescriptor_t c = cfg.get();
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "plan configuration");
  if (const cudnnStatus_t st = cudnnBackendFinalize(plan.get()); st != CUDNN_STATUS_SUCCESS) {
    *skipped = str_cat(info.tag, " plan: ", cudnnGetErrorString(st));
    return std::nullopt;
  }
  int64_t ws = 0, n = 0;
  if (const cudnnStatus_t st =
          cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
      st != CUDNN_STATUS_SUCCESS) {
    *skipped = str_cat(info.tag, " workspace query: ", cudnnGetErrorString(st));
    return std::nullopt;
  }
  if (ws < 0 || size_t(ws) > set.limit) {
    *skipped = str_cat(info.tag, " workspace ", ws, " B over the limit");
    return std::nullopt;
  }
  return Engine{std::move(cfg), std::move(plan), size_t(ws), info.tag};
}

// Milliseconds of one run of `e` on the call's buffers (best of two after a warm-up), or
// nullopt when it cannot run (workspace, refusal).
std::optional<float> time_engine(cudnnHandle_t h, const Engine& e, std::array<void*, 3> ptrs, int device) {
  std::optional<cuda::DeviceBuffer> ws;
  try {
    ws.emplace(device, e.ws);
  } catch (const OutOfMemoryError&) {
    return std::nullopt;
  }
  std::string ignored;
  if (try_execute(h, e, ptrs, ws->get(), &ignored) != CUDNN_STATUS_SUCCESS) return std::nullopt;
  cudaStream_t s = cuda::compute_stream(device);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  float best = -1.0f;
  for (int rep = 0; rep < 2; ++rep) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventRecord(start, s));
    const cudnnStatus_t st = try_execute(h, e, ptrs, ws->get(), &ignored);
    CUDA_CHECK(cudaEventRecord(stop, s));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (st == CUDNN_STATUS_SUCCESS && (best < 0 || ms < best)) best = ms;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  if (best < 0) return std::nullopt;
  return best;
}

void order_by_time(GraphPlan& p, cudnnHandle_t h, std::array<void*, 3> ptrs, int device) {
  std::vector<std::pair<float, size_t>> timed;
  for (size_t i = 0; i < p.engines.size(); ++i)
    if (auto ms = time_engine(h, p.engines[i], ptrs, device)) timed.emplace_back(*ms, i);
  std::stable_sort(timed.begin(), timed.end());
  std::vector<Engine> ordered;
  for (const auto& [ms, i] : timed) ordered.push_back(std::move(p.engines[i]));
  p.engines = std::move(ordered);
}

void build_engines(GraphPlan& p, cudnnHandle_t h, const Desc& graph, DType t, const Settings& set) {
  const size_t wanted = set.bench ? kBenchmarkPlans : kHeuristicPlans;
  std::string skipped = "the heuristics offered no engine";
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (Desc& cfg : engine_configs(graph, mode)) {
      if (p.engines.size() >= wanted) return;
      if (auto e = make_engine(h, std::move(cfg), t, set, &skipped)) p.engines.push_back(std::move(*e));
    }
    if (!p.engines.empty()) return;   // the fallback list only when mode A gave nothing usable
  }
  p.why = str_cat("no usable engine (last: ", skipped, ")");
}

std::shared_ptr<GraphPlan> build_plan(cudnnHandle_t h, const Conv2dArgs& a, DType t, int kind, int device,
                                      std::array<void*, 3> ptrs, const Settings& set) {
  auto plan = std::make_shared<GraphPlan>();
  GraphPlan& p = *plan;
  p.from_find = set.bench;
  try {
    p.keep.push_back(tensor(1, t, {a.N, a.C, a.H, a.W}, cudnn_graph::pointer_alignment(ptrs[0]), a.channels_last));
    p.keep.push_back(tensor(2, t, {a.K, a.C / a.p.groups, a.R, a.S}, cudnn_graph::pointer_alignment(ptrs[1]),
                            a.channels_last));
    p.keep.push_back(tensor(3, t, {a.N, a.K, a.P, a.Q}, cudnn_graph::pointer_alignment(ptrs[2]), a.channels_last));
    p.keep.push_back(convolution(a, t));
    p.keep.push_back(operation(kind, p.keep[0], p.keep[1], p.keep[2], p.keep[3], t));
    Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    const cudnnBackendDescriptor_t op = p.keep[4].get();
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, "graph operations");
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    graph.finalize("operation graph");
    p.keep.push_back(std::move(graph));
    build_engines(p, h, p.keep.back(), t, set);
  } catch (const Refused& r) {
    p.engines.clear();
    p.why = r.why;
  }
  if (set.bench && !p.engines.empty()) order_by_time(p, h, ptrs, device);
  if (p.engines.empty() && p.why.empty()) p.why = "no engine ran in the benchmark";
  return plan;
}

using Key = std::array<int64_t, 28>;
struct GraphPlanCache {
  std::mutex mu;
  std::map<Key, std::shared_ptr<const GraphPlan>> plans;
};
GraphPlanCache& graph_cache() { static auto* c = new GraphPlanCache; return *c; }   // leaked: no teardown at exit

std::shared_ptr<const GraphPlan> get_plan(cudnnHandle_t h, const Conv2dArgs& a, DType t, int kind, int device,
                                          std::array<void*, 3> ptrs) {
  const Settings set{t == DType::f32 && cudnn_allow_tf32(), cudnn_benchmark(), cudnn_deterministic(),
                     cudnn_workspace_limit()};
  const Key key{int64_t(reinterpret_cast<uintptr_t>(h)), int64_t(t), kind, a.N, a.C, a.H, a.W, a.K, a.R, a.S, a.P,
                a.Q, a.p.stride_h, a.p.stride_w, a.p.pad_h, a.p.pad_w, a.p.dil_h, a.p.dil_w, a.p.groups, set.tf32,
                set.bench, set.limit == SIZE_MAX ? -1 : int64_t(std::min<size_t>(set.limit, size_t(INT64_MAX))),
                cudnn_graph::pointer_alignment(ptrs[0]), cudnn_graph::pointer_alignment(ptrs[1]),
                cudnn_graph::pointer_alignment(ptrs[2]), device, a.channels_last, set.deterministic};
  GraphPlanCache& c = graph_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.plans.find(key);
  if (it != c.plans.end()) return it->second;
  std::shared_ptr<const GraphPlan> plan = build_plan(h, a, t, kind, device, ptrs, set);
  c.plans.emplace(key, plan);
  return plan;
}

}  // namespace

bool conv_graph_run(cudnnHandle_t h, const Conv2dArgs& a, DType t, int kind, int device, std::string* why) {
  OOMLAB_ASSERT(kind >= 0 && kind <= 2);
  const std::array<void*, 3> ptrs = pointers(a, kind);
  const std::shared_ptr<const GraphPlan> plan = get_plan(h, a, t, kind, device, ptrs);
  std::string last = plan->why;
  for (const Engine& e : plan->engines) {
    std::optional<cuda::DeviceBuffer> ws;
    try {
      ws.emplace(device, e.ws);
    } catch (const OutOfMemoryError&) {
      last = str_cat(e.tag, ": workspace of ", e.ws, " B not allocated");
      continue;   // a spare with a smaller workspace, else the legacy path (its own fallbacks)
    }
    std::string refusal;
    const cudnnStatus_t st = try_execute(h, e, ptrs, ws->get(), &refusal);
    if (st != CUDNN_STATUS_SUCCESS && CUDNN_STATUS_CATEGORY(int(st)) == int(CUDNN_STATUS_NOT_SUPPORTED)) {
      last = str_cat(e.tag, ": ", refusal.empty() ? cudnnGetErrorString(st) : refusal);   // nothing ran
      continue;
    }
    if (st != CUDNN_STATUS_SUCCESS) cuda::throw_cudnn_error(st, conv_op_name(kind), __FILE__, __LINE__);
    if (cuda::sync_after_launch()) CUDA_CHECK(cudaDeviceSynchronize());
    note_kernel_choice(conv_op_name(kind), str_cat("cuDNN graph ", e.tag, ", workspace ", e.ws, " B (",
                                              plan->from_find ? "find" : "heuristics", ")"));
    return true;
  }
  *why = last;
  return false;
}

void clear_cudnn_graph_plans() {
  GraphPlanCache& c = graph_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.plans.clear();
}

}  // namespace oomlab
