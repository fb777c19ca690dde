// device_graph.cpp — DeviceGraph (device_graph.h): the allocator's private pool around the
// backend's capture hooks; meta runs the capture for its allocations only.
#include "engine/memory/device_graph.h"

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {
namespace {
bool has_graph_hooks(const BackendHooks& h) {
  return h.graph_prepare && h.graph_capture_begin && h.graph_capture_end && h.graph_replay && h.graph_destroy;
}
}  // namespace

DeviceGraph::DeviceGraph(Device device) : device_(device) {
  OOMLAB_CHECK(device.is_meta() || has_graph_hooks(backend_hooks(device.type)), "graph capture needs a CUDA device ",
               "(or meta, which counts a graph's memory); ", device.str(), " has none");
}

DeviceGraph::~DeviceGraph() {
  if (graph_ != nullptr) backend_hooks(device_.type).graph_destroy(graph_);
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
  const BackendHooks h = device_.is_meta() ? BackendHooks{} : backend_hooks(device_.type);
  if (!device_.is_meta()) {
    h.graph_prepare(device_.index);
    device_synchronize(device_);   // eager work before the capture has finished
  }
  alloc.empty_cache();   // as torch.cuda.graph does: the graph's pool gets what eager work cached
  pool_ = alloc.begin_graph_pool();
  try {
    if (!device_.is_meta()) h.graph_capture_begin(device_.index);
    try {
      work();
    } catch (...) {
      if (!device_.is_meta()) h.graph_capture_end(device_.index, /*keep=*/false);
      throw;
    }
    if (!device_.is_meta()) graph_ = h.graph_capture_end(device_.index, /*keep=*/true);
  } catch (...) {
    alloc.end_graph_pool();
    alloc.release_graph_pool(pool_);
    pool_ = 0;
    throw;
  }
  alloc.end_graph_pool();
  captured_ = true;
}

void DeviceGraph::replay() {
  OOMLAB_CHECK(captured_, "DeviceGraph::replay: nothing was captured");
  if (!device_.is_meta()) backend_hooks(device_.type).graph_replay(graph_, device_.index);
}

}  // namespace oomlab
