// device_graph.cpp — DeviceGraph (device_graph.h): the allocator's private pool around the
// backend's capture hooks; meta runs the capture for its allocations only.
#include "engine/memory/device_graph.h"

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {
namespace {
bool has_graph_hooks(const BackendHooks& h) {
  return h.graph_prepare && h.graph_capture_begin && h.graph_capture_end && h.graph_replay && h.graph_destroy &&
         h.graph_consts_begin && h.graph_consts_end && h.graph_consts_free;
}
}  // namespace

DeviceGraph::DeviceGraph(Device device) : device_(device) {
  OOMLAB_CHECK(device.is_meta() || has_graph_hooks(backend_hooks(device.type)), "graph capture needs a CUDA device ",
               "(or meta, which counts a graph's memory); ", device.str(), " has none");
}

DeviceGraph::~DeviceGraph() {
  if (graph_ != nullptr) backend_hooks(device_.type).graph_destroy(graph_);
  if (consts_ != nullptr) backend_hooks(device_.type).graph_consts_free(consts_);
  if (consts_block_ != nullptr) allocator_for(device_).free(consts_block_);
  if (pool_ != 0) allocator_for(device_).release_graph_pool(pool_);
}

void DeviceGraph::prepare(Device device) {
  if (device.is_meta()) return;
  const BackendHooks h = backend_hooks(device.type);
  OOMLAB_CHECK(has_graph_hooks(h), "graph capture needs a CUDA device; ", device.str(), " has none");
  h.graph_prepare(device.index);
}

void DeviceGraph::capture(const std::function<void()>& work) {
  OOMLAB_CHECK(!captured_ && pool_ == 0, "DeviceGraph::capture: this graph was captured already");
  CachingAllocator& alloc = allocator_for(device_);
  if (!device_.is_meta()) {
    backend_hooks(device_.type).graph_prepare(device_.index);
    device_synchronize(device_);   // eager work before the capture has finished
  }
  alloc.empty_cache();   // as torch.cuda.graph does: the graph's pool gets what eager work cached
  pool_ = alloc.begin_graph_pool();
  rng_at_capture_ = device_generator(device_).get_state().offset;
  try {
    {
      MemoryContext ctx("graph", "consts");
      consts_block_ = alloc.allocate(kConstBytes, "graph_consts");   // in the pool, on meta too
    }
    record(work);
  } catch (...) {
    alloc.end_graph_pool();
    alloc.free(consts_block_);
    consts_block_ = nullptr;
    alloc.release_graph_pool(pool_);
    pool_ = 0;
    throw;
  }
  alloc.end_graph_pool();
  rng_blocks_per_replay_ = device_generator(device_).get_state().offset - rng_at_capture_;
  captured_ = true;
  replayed_ = false;
}

// The capture proper: the backend's stream capture and the record pass of the constants
// around `work`, with this thread's random draws limited to graph-safe ops.
void DeviceGraph::record(const std::function<void()>& work) {
  const BackendHooks h = device_.is_meta() ? BackendHooks{} : backend_hooks(device_.type);
  if (!device_.is_meta()) {
    h.graph_capture_begin(device_.index);
    consts_ = h.graph_consts_begin(device_.index, nullptr, /*record*/ 1, consts_block_, kConstBytes, 0);
  }
  begin_rng_capture(device_);
  try {
    work();
  } catch (...) {
    end_rng_capture();
    if (!device_.is_meta()) {
      h.graph_capture_end(device_.index, /*keep=*/false);
      h.graph_consts_end(nullptr);   // closes the pass; nothing to copy
    }
    throw;
  }
  end_rng_capture();
  if (!device_.is_meta()) {
    graph_ = h.graph_capture_end(device_.index, /*keep=*/true);
    h.graph_consts_end(consts_);   // after the capture: the copy is real work, not captured
  }
}

void DeviceGraph::replay(const std::function<void()>& refresh) {
  OOMLAB_CHECK(captured_, "DeviceGraph::replay: nothing was captured");
  // The first replay runs the captured step with what the capture recorded (its draws are
  // already reserved); each later one is a new step: its own draws and constants.
  if (replayed_) refresh_pass(refresh);
  replayed_ = true;
  if (!device_.is_meta()) backend_hooks(device_.type).graph_replay(graph_, device_.index);
}

void DeviceGraph::refresh_pass(const std::function<void()>& refresh) {
  DeviceGenerator& gen = device_generator(device_);
  const uint64_t delta = gen.get_state().offset - rng_at_capture_;
  gen.with([&](Generator& g) { g.offset += rng_blocks_per_replay_; });   // this replay's draws
  if (device_.is_meta()) {   // no kernels: the refresh is the host's bookkeeping only
    if (refresh) refresh();
    return;
  }
  const BackendHooks h = backend_hooks(device_.type);
  h.graph_consts_begin(device_.index, consts_, /*refresh*/ 2, nullptr, 0, delta);
  try {
    if (refresh) refresh();
  } catch (...) {
    h.graph_consts_end(nullptr);
    throw;
  }
  h.graph_consts_end(consts_);
}

}  // namespace oomlab
