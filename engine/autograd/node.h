// node.h — autograd graph nodes (define-by-run tape).
// Contracts:
//  * A Node is the grad_fn of one op output. `next[i]` says where the gradient of input i
//    goes: another node (non-leaf), a leaf tensor (accumulate into .grad with +=), or
//    nowhere (input did not require grad). Nodes never hold their inputs' data — only
//    what the op's backward needs, inside the closure (documented per op).
//  * backward(grad_out, needs) returns one gradient per input (undefined where not
//    needed). After it runs the engine calls release(): the closure and its saved
//    tensors are freed at once (retain_graph=false), so a second backward fails clearly.
//  * Nodes are deleted iteratively (NodeDeleter): freeing a graph of any depth uses a
//    bounded stack, where plain shared_ptr deletion recursed once per node and overflowed
//    the stack for deep models (PyTorch defers deletions the same way: deleteNode).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab {

struct Edge {
  std::shared_ptr<Node> node;          // non-leaf input
  std::shared_ptr<TensorImpl> leaf;    // leaf input that requires grad
  bool needs_grad() const { return node != nullptr || leaf != nullptr; }
};

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out,
                                                     const std::vector<bool>& needs_input_grad)>;

struct Node {
  const char* op = "";
  std::string scope;                   // MemoryContext layer at creation (for frames)
  std::vector<Edge> next;
  BackwardFn backward;
  uint64_t seq = 0;                    // creation order
  bool released = false;
  Node* next_to_delete = nullptr;      // NodeDeleter's pending list (intrusive: no allocation)
  void release() { backward = nullptr; released = true; }
};

// The deleter of every shared_ptr<Node>: a node whose last reference goes while another
// node is being deleted on this thread joins a pending list that the outermost deletion
// drains, so deleting a chain of N nodes nests one level deep instead of N.
struct NodeDeleter {
  void operator()(Node* n) const noexcept;
};

// A new node owned by a shared_ptr with NodeDeleter (the only way nodes are made).
std::shared_ptr<Node> make_node();

// Attaches a grad_fn to `out` if grad mode is on and any input requires grad.
// `inputs` are the differentiable inputs, in the order backward returns their grads.
// Returns `out` (for chaining). `make_backward` is only invoked when a node is created,
// so ops can avoid saving tensors when no gradient is needed.
Tensor attach_grad_fn(Tensor out, const char* op, const std::vector<Tensor>& inputs,
                      const std::function<BackwardFn()>& make_backward);

// True if grad mode is on and any of the tensors requires grad.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Runs backward from `root` (scalar unless grad_output is given). Leaf grads accumulate
// with +=; grad-ready hooks fire after a leaf's grad is final for this backward.
void run_backward(const Tensor& root, const Tensor& grad_output);

}  // namespace oomlab
