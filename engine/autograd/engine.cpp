// engine.cpp — attach_grad_fn and the backward walk.
// The walk: collect nodes reachable from the root, count dependencies, then execute in
// dependency order, highest creation sequence first among the ready ones (PyTorch's
// order). Each node's gradient buffer is dropped and its closure released as soon as it
// has run, so memory during backward falls as in PyTorch.
#include <algorithm>
#include <atomic>
#include <optional>
#include <queue>
#include <unordered_map>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/error.h"
#include "engine/core/layout.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_export.h"
#include "kernels/elementwise.h"

namespace oomlab {
namespace {
std::atomic<uint64_t> g_seq{0};

std::string layer_of(const std::string& frame) {
  auto p = frame.rfind('/');
  return p == std::string::npos ? frame : frame.substr(0, p);
}

bool uniquely_owned(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && t.is_dense();
}

// Gradient sums as ops' add / add_inplace compute them (the same kernel, the same
// allocations), without autograd: this layer sits below ops. Gradients into one place share
// shape (checked by the callers), dtype and device; autocast is off in backward
// (engine/train/mixed_precision.h), so nothing is promoted.
void check_gradient_pair(const Tensor& a, const Tensor& b) {
  OOMLAB_CHECK_T(DTypeError, a.dtype() == b.dtype(), "autograd: gradients of dtypes ", dtype_name(a.dtype()), " and ",
                 dtype_name(b.dtype()), " flow into one tensor");
  OOMLAB_CHECK_T(DeviceError, a.device() == b.device(), "autograd: gradients on ", a.device().str(), " and ",
                 b.device().str(), " flow into one tensor");
}

Tensor sum_of(const Tensor& a0, const Tensor& b0) {
  check_gradient_pair(a0, b0);
  // Both in a0's memory format when it is dense (channels_last gradients stay so).
  Tensor a = dense(a0), b = laid_out_like(b0, a);
  Tensor out = empty_like(a);
  axpby_kernels().launch(a.device(), a.dtype(),
                         AxpbyArgs{out.raw_data(), a.raw_data(), b.raw_data(), 1.0, 1.0, 0.0, a.numel()});
  return out;
}

void add_into(Tensor& a, const Tensor& b) {
  check_gradient_pair(a, b);
  OOMLAB_CHECK_T(ShapeError, a.is_dense(), "autograd: gradient buffer ", a.str(), " must be dense");
  Tensor bc = laid_out_like(b, a);
  a.bump_version();
  axpby_kernels().launch(a.device(), a.dtype(),
                         AxpbyArgs{a.raw_data(), a.raw_data(), bc.raw_data(), 1.0, 1.0, 0.0, a.numel()});
}

// Sum gradients flowing into one place: in place when we own the buffer.
void accumulate(Tensor& slot, Tensor g) {
  if (!slot.defined()) { slot = std::move(g); return; }
  OOMLAB_CHECK_T(ShapeError, slot.shape() == g.shape(), "autograd: gradient shape ",
                 shape_str(g.shape()), " does not match ", shape_str(slot.shape()));
  if (uniquely_owned(slot)) add_into(slot, g);
  else slot = sum_of(slot, g);
}

void accumulate_leaf(TensorImpl* leaf, Tensor g) {
  OOMLAB_CHECK_T(ShapeError, leaf->shape == g.shape(), "autograd: gradient of '", leaf->name,
                 "' has shape ", shape_str(g.shape()), " but the tensor has ",
                 shape_str(leaf->shape));
  if (!leaf->grad) {
    // Steal the buffer when nobody else sees it and it is laid out like the leaf (PyTorch's
    // AccumulateGrad: a dense leaf's gradient has the leaf's strides); else copy it so.
    const MemoryFormat f = suggest_memory_format(leaf->shape, leaf->strides);
    if (!uniquely_owned(g) || !g.is_contiguous(f)) {
      Tensor c = Tensor::empty_format(g.shape(), g.dtype(), g.device(), f);
      c.copy_(g);
      g = c;
    }
    leaf->grad = g.impl_ptr();
    return;
  }
  Tensor slot(leaf->grad);
  add_into(slot, g);   // parameter gradients accumulate with +=
}
}  // namespace

namespace {
// The pending list of NodeDeleter: trivially destructible thread_locals, so a node freed while
// the thread's other thread_locals are destroyed still finds them.
thread_local Node* t_pending_delete = nullptr;
thread_local bool t_deleting_nodes = false;
}  // namespace

void NodeDeleter::operator()(Node* n) const noexcept {
  if (t_deleting_nodes) {
    n->next_to_delete = t_pending_delete;
    t_pending_delete = n;
    return;
  }
  t_deleting_nodes = true;
  delete n;
  while (Node* m = t_pending_delete) {
    t_pending_delete = m->next_to_delete;
    delete m;
  }
  t_deleting_nodes = false;
}

std::shared_ptr<Node> make_node() { return std::shared_ptr<Node>(new Node(), NodeDeleter{}); }

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor attach_grad_fn(Tensor out, const char* op, const std::vector<Tensor>& inputs,
                      const std::function<BackwardFn()>& make_backward) {
  if (!any_requires_grad(inputs)) return out;
  auto node = make_node();
  node->op = op;
  node->scope = layer_of(MemoryContext::current());
  node->seq = g_seq.fetch_add(1);
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn()) e.node = t.grad_fn();
      else e.leaf = t.impl_ptr();
    }
    node->next.push_back(std::move(e));
  }
  node->backward = make_backward();
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
  return out;
}

namespace {
// Nodes reachable from the root with the number of edges into each, and the number of
// edges into each leaf: a node runs when its count reaches 0, a leaf's grad-ready hooks
// fire when its count does.
struct GraphCounts {
  std::unordered_map<Node*, int> deps;
  std::unordered_map<TensorImpl*, int> leaf_pending;
};

GraphCounts count_edges(Node* root) {
  GraphCounts c;
  std::vector<Node*> stack{root};
  c.deps[root] = 0;
  while (!stack.empty()) {
    Node* n = stack.back(); stack.pop_back();
    for (const Edge& e : n->next) {
      if (e.node) {
        auto [it, inserted] = c.deps.try_emplace(e.node.get(), 0);
        it->second++;
        if (inserted) stack.push_back(e.node.get());
      } else if (e.leaf) {
        c.leaf_pending[e.leaf.get()]++;
      }
    }
  }
  return c;
}

// Runs one node's backward on its incoming gradient (under its layer's memory context and
// profiler span) and frees what it saved; returns the gradients of its inputs.
std::vector<Tensor> run_node(Node* n, Tensor g) {
  OOMLAB_CHECK_T(AutogradError, !n->released, "Trying to backward through the graph a second time (op '", n->op,
                 "'): saved tensors were freed after the first backward");
  MemoryContext ctx(n->scope, "bwd");
  std::string span_name;   // outlives the span
  std::optional<OpSpanScope> span;
  if (OpProfiler::enabled()) {
    span_name = n->scope + "/" + n->op + "/bwd";
    span.emplace(span_name.c_str(), 0, g.defined() ? g.device() : cpu_device());
  }
  std::vector<bool> needs(n->next.size());
  for (size_t i = 0; i < n->next.size(); ++i) needs[i] = n->next[i].needs_grad();
  std::vector<Tensor> in_grads = n->backward(g, needs);
  g = Tensor();
  n->release();
  OOMLAB_ASSERT(in_grads.size() == n->next.size());
  return in_grads;
}

void fire_grad_ready_hooks(TensorImpl* leaf) {
  for (auto& h : leaf->grad_ready_hooks) { Tensor g(leaf->grad); h(g); }
}
}  // namespace

void Tensor::backward(const Tensor& grad_output) const { run_backward(*this, grad_output); }

void run_backward(const Tensor& root, const Tensor& grad_output) {
  OOMLAB_CHECK_T(AutogradError, root.defined() && root.requires_grad(),
                 "element 0 of tensors does not require grad and does not have a grad_fn");
  Tensor grad = grad_output;
  if (!grad.defined()) {
    OOMLAB_CHECK_T(AutogradError, root.numel() == 1,
                   "grad can be implicitly created only for scalar outputs (got ",
                   shape_str(root.shape()), ")");
    grad = Tensor::ones(root.shape(), root.dtype(), root.device());
  }
  OOMLAB_CHECK_T(ShapeError, grad.shape() == root.shape(), "backward: grad_output shape ",
                 shape_str(grad.shape()), " does not match output shape ", shape_str(root.shape()));
  NoGradGuard no_grad;
  if (root.is_leaf()) {
    accumulate_leaf(root.impl(), grad);
    fire_grad_ready_hooks(root.impl());
    return;
  }
  GraphCounts counts = count_edges(root.grad_fn().get());
  // The latest-created ready node first (PyTorch's order), so each gradient is freed early.
  auto later_first = [](Node* a, Node* b) { return a->seq < b->seq; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
  std::unordered_map<Node*, Tensor> grads;
  grads[root.grad_fn().get()] = grad;
  grad = Tensor();
  ready.push(root.grad_fn().get());
  while (!ready.empty()) {
    Node* n = ready.top(); ready.pop();
    Tensor g;
    if (auto it = grads.find(n); it != grads.end()) { g = std::move(it->second); grads.erase(it); }
    std::vector<Tensor> in_grads;
    if (g.defined()) in_grads = run_node(n, std::move(g));
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      Tensor gi = i < in_grads.size() ? std::move(in_grads[i]) : Tensor();
      if (e.node) {
        if (gi.defined()) accumulate(grads[e.node.get()], std::move(gi));
        if (--counts.deps[e.node.get()] == 0) ready.push(e.node.get());
      } else if (e.leaf) {
        TensorImpl* leaf = e.leaf.get();
        if (gi.defined()) accumulate_leaf(leaf, std::move(gi));
        if (--counts.leaf_pending[leaf] == 0 && leaf->grad) fire_grad_ready_hooks(leaf);
      }
    }
  }
}

}  // namespace oomlab
