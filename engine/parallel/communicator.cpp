// communicator.cpp — the argument checks every backend shares and the host reductions
// (communicator.h) on the collective kernels.
#include "engine/parallel/communicator.h"

#include <algorithm>
#include <cmath>

#include "kernels/collective.h"

namespace oomlab {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& s) {
  if (s == "sum") return ReduceOp::sum;
  if (s == "avg") return ReduceOp::avg;
  if (s == "max") return ReduceOp::max;
  throw ValueError(str_cat("unknown reduction '", s, "' (sum, avg or max)"));
}

Communicator::Buf Communicator::checked(const Tensor& t, const char* op, const char* what) const {
  OOMLAB_CHECK_T(ValueError, t.defined(), op, ": the ", what, " tensor is undefined");
  OOMLAB_CHECK_T(ShapeError, t.is_dense(), op, ": the ", what, " tensor ", t.str(),
                 " is not dense (contiguous or channels_last)");
  const DType d = t.dtype();
  OOMLAB_CHECK_T(DTypeError,
                 d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16 || d == DType::i64, op, ": ",
                 dtype_name(d), " is not a collective dtype (float32, float64, float16, bfloat16, int64)");
  OOMLAB_CHECK_T(DeviceError, t.device() == device(), op, ": rank ", rank(), " of the ", backend(),
                 " communicator works on ", device().str(), ", the ", what, " tensor is on ", t.device().str());
  return {t.device().is_meta() ? nullptr : t.raw_data(), t.numel(), d};
}

void Communicator::check_root(int root, const char* op) const {
  OOMLAB_CHECK_T(ValueError, root >= 0 && root < world_size(), op, ": root ", root, " is not a rank of a world of ",
                 world_size());
}

namespace {
void same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  OOMLAB_CHECK_T(DTypeError, a.dtype() == b.dtype(), op, ": send is ", dtype_name(a.dtype()), ", recv is ",
                 dtype_name(b.dtype()));
}
void sizes(bool ok, const char* op, const Tensor& send, const Tensor& recv, const std::string& rule) {
  OOMLAB_CHECK_T(ShapeError, ok, op, ": send has ", send.numel(), " elements and recv ", recv.numel(), "; ", rule);
}
}  // namespace

void Communicator::all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) {
  const Buf s = checked(send, "all_reduce", "send"), r = checked(recv, "all_reduce", "recv");
  same_dtype(send, recv, "all_reduce");
  sizes(s.count == r.count, "all_reduce", send, recv, "they must be equal");
  ++stats_.calls["all_reduce"];
  do_all_reduce(s, r, op);
}

void Communicator::broadcast(const Tensor& send, const Tensor& recv, int root) {
  const Buf s = checked(send, "broadcast", "send"), r = checked(recv, "broadcast", "recv");
  same_dtype(send, recv, "broadcast");
  sizes(s.count == r.count, "broadcast", send, recv, "they must be equal");
  check_root(root, "broadcast");
  ++stats_.calls["broadcast"];
  do_broadcast(s, r, root);
}

void Communicator::reduce(const Tensor& send, const Tensor& recv, ReduceOp op, int root) {
  const Buf s = checked(send, "reduce", "send"), r = checked(recv, "reduce", "recv");
  same_dtype(send, recv, "reduce");
  sizes(s.count == r.count, "reduce", send, recv, "they must be equal");
  check_root(root, "reduce");
  ++stats_.calls["reduce"];
  do_reduce(s, r, op, root);
}

void Communicator::all_gather(const Tensor& send, const Tensor& recv) {
  const Buf s = checked(send, "all_gather", "send"), r = checked(recv, "all_gather", "recv");
  same_dtype(send, recv, "all_gather");
  sizes(r.count == s.count * world_size(), "all_gather", send, recv,
        str_cat("recv must hold world size (", world_size(), ") x send"));
  ++stats_.calls["all_gather"];
  do_all_gather(s, r);
}

void Communicator::reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) {
  const Buf s = checked(send, "reduce_scatter", "send"), r = checked(recv, "reduce_scatter", "recv");
  same_dtype(send, recv, "reduce_scatter");
  sizes(s.count == r.count * world_size(), "reduce_scatter", send, recv,
        str_cat("send must hold world size (", world_size(), ") x recv"));
  ++stats_.calls["reduce_scatter"];
  do_reduce_scatter(s, r, op);
}

void Communicator::barrier() {
  ++stats_.calls["barrier"];
  do_barrier();
}

// ---- host reductions: the collective kernels (kernels/collective.h) on host memory ----
PairOp pair_op(ReduceOp op) { return op == ReduceOp::max ? PairOp::max : PairOp::sum; }

namespace {
void check_collective_dtype(DType dtype, const char* what) {
  OOMLAB_CHECK_T(DTypeError, dtype != DType::u8, what, ": ", dtype_name(dtype), " is not a collective dtype");
}
}  // namespace

void reduce_to(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, int64_t n) {
  check_collective_dtype(dtype, "reduce_to");
  reduce_pair_kernels().launch(cpu_device(), dtype, ReducePairArgs{dst, a, b, n, pair_op(op)});
}

void divide_by_world(DType dtype, void* p, int64_t n, int world) {
  check_collective_dtype(dtype, "divide_by_world");
  divide_count_kernels().launch(cpu_device(), dtype, DivideCountArgs{p, n, world});
}

void Communicator::count_ring_bytes(int64_t full) {
  const int n = world_size();
  stats_.bytes_sent += full * (n - 1) / n;
  stats_.bytes_received += full * (n - 1) / n;
}

void Communicator::count_rooted_bytes(int root, int64_t bytes, bool from_root) {
  const int64_t at_root = bytes * (world_size() - 1);
  if (rank() == root) (from_root ? stats_.bytes_sent : stats_.bytes_received) += at_root;
  else (from_root ? stats_.bytes_received : stats_.bytes_sent) += bytes;
}

}  // namespace oomlab
