// nccl_comm.cpp — the `nccl` communicator backend (communicator.h): the CUDA toolkit's NCCL,
// one rank per process and one GPU per rank, on the cuda device the rank is given (logical
// index, cuda_device.h; any other device type is a DeviceError; two ranks on one GPU are a
// DeviceError naming the rule before NCCL is called: check_one_rank_per_gpu). Compiled into the CUDA
// backend library when CMake finds libnccl and nccl.h under the CUDA prefix, CI included; the
// backend's registrar (register_cuda.cpp) calls register_nccl_communicator at the bottom.
// NOT YET RUN ON A GPU: written and compiled on a machine without one; tests/test_comm_nccl.cpp
// runs the collective suite on one rank when a GPU is present and skips otherwise.
// Rendezvous: rank 0 serves a TcpStore on MASTER_ADDR:MASTER_PORT (rank_env.h, tcp_store.h),
// creates the ncclUniqueId and publishes it under "nccl/unique_id"; the other ranks get() it
// (as torch.distributed's init_process_group("nccl") with env://). The communicator is
// created with ncclCommInitRankConfig, config.blocking = 0 (non-blocking), so that creation
// and every collective can be bounded by timeout().
// Mapping (on the device's compute stream, cuda_stream.h): all_reduce -> ncclAllReduce,
// broadcast -> ncclBroadcast, reduce -> ncclReduce (NCCL ignores recvbuff on non-roots, so a
// non-root recv stays untouched without a scratch buffer), all_gather -> ncclAllGather,
// reduce_scatter -> ncclReduceScatter (in place as NCCL's: recv is send's slice of this rank),
// barrier -> an int64 all-reduce of one element. dtypes: float32, float64, float16, bfloat16,
// int64 -> ncclFloat32, ncclFloat64, ncclFloat16, ncclBfloat16, ncclInt64.
// Reductions, kept to communicator.h's rules where NCCL's own differ:
//  * sum -> ncclSum. float16 / bfloat16 add in float and round once per hop (__hadd), as the
//    contract says.
//  * avg on int64 -> ncclAvg: NCCL sums, then divides by the world size truncating toward
//    zero (its FuncSumPostDiv), which is the contract's integer division.
//  * avg on floats -> ncclSum, then a division by the world size. NCCL's ncclAvg multiplies by
//    a rounded 1/n (before the sum in older releases, after it in newer ones), which differs
//    from a division in the last bit when n is not a power of two. For n a power of two the
//    division runs on the device as the elementwise axpby kernel (x * 2^-k + (-0), exactly
//    the quotient, signed zeros included); otherwise the result is copied to the host,
//    divided by divide_by_world (communicator.h) and copied back: slower, bit for bit the
//    other backends' result.
//  * max -> ncclMax. NCCL's float max (fmaxf / __hmax) returns the other operand of a NaN, so
//    with more than one rank each rank also marks its NaN inputs in a uint8 mask (a host scan
//    of a copy of send), the masks are max-reduced the same way, and the marked elements of
//    the result are set to the dtype's quiet NaN on the host. Float max on more than one rank
//    therefore costs host round trips (rare in training: flags, statistics); a device kernel
//    would remove them.
// No hang: every NCCL call is followed by a bounded poll. ncclInProgress (the non-blocking
// enqueue still running) is polled with ncclCommGetAsyncError; then an event recorded after
// the work on the stream is polled with cudaEventQuery, checking ncclCommGetAsyncError on
// every round. Past timeout() the communicator is aborted (ncclCommAbort) and
// CommTimeoutError names this rank, the collective and the seconds waited (NCCL does not say
// which peer it waits for: the message says "the other N-1 ranks"). An asynchronous error (a
// peer died or its connection broke: ncclRemoteError / ncclSystemError, ...) aborts too and
// throws CommError with ncclGetErrorString and ncclGetLastError. After either, every call
// throws CommError. A peer that died on an NVLink / shared-memory path may not be detected by
// NCCL at all: then the timeout is what ends the wait. NCCL cannot see mismatched calls (they
// hang or corrupt data); the timeout bounds the hang.
// This synchronous wait is what makes the no-hang contract hold; DDP's overlap of
// communication with backward will want an asynchronous variant (enqueue now, wait on the
// event later) — not here yet.
// Byte counts: what a ring moves (as the gloo and mpi backends): all_reduce 2(n-1)/n x size,
// all_gather / reduce_scatter (n-1)/n x the full buffer, broadcast / reduce: size at the
// non-roots, (n-1) x size at the root; barrier and the NaN masks count nothing.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/parallel/comm_registry.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/tcp_store.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/elementwise.h"

namespace oomlab {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUniqueIdKey = "nccl/unique_id";

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i64: return ncclInt64;
    default: throw DTypeError(str_cat("nccl: ", dtype_name(d), " is not a collective dtype"));
  }
}

bool is_float(DType d) { return d != DType::i64; }

// NCCL's reduction for a contract op (see the header comment for avg and max on floats).
ncclRedOp_t nccl_op(ReduceOp op, DType d) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::avg: return is_float(d) ? ncclSum : ncclAvg;
  }
  return ncclSum;
}

bool is_nan_at(DType d, const void* p, int64_t i) {
  switch (d) {
    case DType::f32: return std::isnan(static_cast<const float*>(p)[i]);
    case DType::f64: return std::isnan(static_cast<const double*>(p)[i]);
    case DType::f16: {
      const uint16_t b = static_cast<const uint16_t*>(p)[i];
      return (b & 0x7c00u) == 0x7c00u && (b & 0x03ffu) != 0;
    }
    case DType::bf16: {
      const uint16_t b = static_cast<const uint16_t*>(p)[i];
      return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0;
    }
    default: return false;
  }
}

void set_nan_at(DType d, void* p, int64_t i) {
  switch (d) {
    case DType::f32: static_cast<float*>(p)[i] = std::numeric_limits<float>::quiet_NaN(); return;
    case DType::f64: static_cast<double*>(p)[i] = std::numeric_limits<double>::quiet_NaN(); return;
    case DType::f16: static_cast<uint16_t*>(p)[i] = 0x7e00u; return;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = 0x7fc0u; return;
    default: return;
  }
}

// NCCL runs one rank per GPU: two ranks of a communicator on one GPU fail deep inside
// ncclCommInitRank ("Duplicate GPU detected"). Each rank publishes its GPU's identity (host
// name and GPU UUID) in the store and checks every other rank's before the communicator is
// created, so the error names the rule and the way out.
std::vector<char> gpu_identity(int logical) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, cuda::physical_device(logical)));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::vector<char> id(host, host + std::strlen(host));
  id.push_back('/');
  id.insert(id.end(), p.uuid.bytes, p.uuid.bytes + sizeof p.uuid.bytes);
  return id;
}

void check_one_rank_per_gpu(TcpStore& store, int rank, int world, Device device) {
  const std::vector<char> mine = gpu_identity(device.index);
  store.set(str_cat("nccl/gpu/", rank), mine);
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    OOMLAB_CHECK_T(DeviceError, store.get(str_cat("nccl/gpu/", r)) != mine, "nccl: ranks ", std::min(r, rank), " and ",
                   std::max(r, rank), " are on the same GPU (this rank: ", device.str(), " on GPU ",
                   cuda::physical_device(device.index), "); NCCL runs one rank per GPU: start at most one rank per "
                   "GPU, or run logical devices of one GPU as threads (--backend local)");
  }
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const RankInfo& info, Device device) : rank_(info.rank), world_(info.world_size), device_(device) {
    OOMLAB_CHECK_T(DeviceError, device.type == DeviceType::cuda, "the nccl backend runs on cuda devices (got ",
                   device.str(), ")");
    cuda::DeviceGuard guard(device_.index);   // DeviceError without a usable GPU, before any rank is waited for
    set_timeout(info.timeout);   // the rendezvous below is bounded by it too
    store_ = std::make_unique<TcpStore>(info.master_addr, info.master_port, info.rank == 0, timeout(),
                                        rendezvous_job(info));
    if (world_ > 1) check_one_rank_per_gpu(*store_, rank_, world_, device_);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank_ == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess)
        throw CommError(str_cat("nccl: rank 0: ncclGetUniqueId failed: ", ncclGetErrorString(r), last_error()));
      store_->set(kUniqueIdKey, std::vector<char>(id.internal, id.internal + sizeof id.internal));
    } else {
      const std::vector<char> v = store_->get(kUniqueIdKey);
      OOMLAB_CHECK_T(CommError, v.size() == sizeof id.internal, "nccl: rank ", rank_,
                     ": the unique id published by rank 0 has ", v.size(), " bytes, not ", sizeof id.internal,
                     " (another program on ", info.master_addr, ":", info.master_port, "?)");
      std::memcpy(id.internal, v.data(), v.size());
    }
    try {
      const Clock::time_point deadline = Clock::now() + timeout();
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t r = ncclCommInitRankConfig(&comm_, world_, id, rank_, &config);
      const std::string what = str_cat("communicator creation (ncclCommInitRankConfig, world of ", world_, ")");
      if (r != ncclSuccess && r != ncclInProgress) fail(what, r);
      wait_enqueued(what, deadline);
      CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
      barrier_buf_ = Tensor::zeros({1}, DType::i64, device_);
    } catch (...) {
      abort_comm();
      if (done_) (void)cudaEventDestroy(done_);
      throw;
    }
  }

  ~NcclCommunicator() override {
    try {
      cuda::DeviceGuard guard(device_.index);
      if (comm_ && !broken_) {   // flush and leave cleanly, bounded; abort otherwise
        bool clean = false;
        ncclResult_t r = ncclCommFinalize(comm_);
        if (r == ncclSuccess || r == ncclInProgress) {
          const Clock::time_point deadline = Clock::now() + timeout();
          int spins = 0;
          ncclResult_t state = ncclInProgress;
          while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
                 Clock::now() < deadline)
            pause(spins);
          clean = state == ncclSuccess;
        }
        if (clean && ncclCommDestroy(comm_) == ncclSuccess) comm_ = nullptr;
      }
      abort_comm();
      if (done_) (void)cudaEventDestroy(done_);
    } catch (...) {   // destructors never throw
    }
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "nccl"; }
  Device device() const override { return device_; }

 protected:
  void do_all_reduce(Buf send, Buf recv, ReduceOp op) override {
    count_ring_bytes(2 * int64_t(recv.bytes()));
    if (recv.count == 0) return;
    const Clock::time_point deadline = begin("all_reduce");
    cuda::DeviceGuard guard(device_.index);
    NanMask mask = nan_mask(send, op);
    enqueued("all_reduce", deadline,
             ncclAllReduce(send.data, recv.data, size_t(recv.count), nccl_dtype(recv.dtype), nccl_op(op, recv.dtype),
                           comm_, stream()));
    if (mask.used())
      enqueued("all_reduce (NaN mask)", deadline,
               ncclAllReduce(mask.data(), mask.data(), size_t(recv.count), ncclUint8, ncclMax, comm_, stream()));
    finish("all_reduce", deadline, recv, op, mask, 0);
  }

  void do_broadcast(Buf send, Buf recv, int root) override {
    count_rooted_bytes(root, int64_t(recv.bytes()), true);
    if (recv.count == 0) return;
    const Clock::time_point deadline = begin("broadcast");
    cuda::DeviceGuard guard(device_.index);
    enqueued("broadcast", deadline,
             ncclBroadcast(send.data, recv.data, size_t(recv.count), nccl_dtype(recv.dtype), root, comm_, stream()));
    complete("broadcast", deadline);
  }

  void do_reduce(Buf send, Buf recv, ReduceOp op, int root) override {
    count_rooted_bytes(root, int64_t(recv.bytes()), false);
    if (recv.count == 0) return;
    const Clock::time_point deadline = begin("reduce");
    cuda::DeviceGuard guard(device_.index);
    NanMask mask = nan_mask(send, op);
    // recvbuff is ignored on non-roots (NCCL's documented behaviour): a non-root recv, even in
    // place, is left as it was.
    enqueued("reduce", deadline,
             ncclReduce(send.data, recv.data, size_t(recv.count), nccl_dtype(recv.dtype), nccl_op(op, recv.dtype), root,
                        comm_, stream()));
    if (mask.used())
      enqueued("reduce (NaN mask)", deadline,
               ncclReduce(mask.data(), mask.data(), size_t(recv.count), ncclUint8, ncclMax, root, comm_, stream()));
    if (rank_ == root) {
      finish("reduce", deadline, recv, op, mask, 0);
    } else {
      complete("reduce", deadline);
    }
  }

  void do_all_gather(Buf send, Buf recv) override {
    count_ring_bytes(int64_t(recv.bytes()));
    if (send.count == 0) return;
    const Clock::time_point deadline = begin("all_gather");
    cuda::DeviceGuard guard(device_.index);
    enqueued("all_gather", deadline,
             ncclAllGather(send.data, recv.data, size_t(send.count), nccl_dtype(recv.dtype), comm_, stream()));
    complete("all_gather", deadline);
  }

  void do_reduce_scatter(Buf send, Buf recv, ReduceOp op) override {
    count_ring_bytes(int64_t(send.bytes()));
    if (recv.count == 0) return;
    const Clock::time_point deadline = begin("reduce_scatter");
    cuda::DeviceGuard guard(device_.index);
    NanMask mask = nan_mask(send, op);
    enqueued("reduce_scatter", deadline,
             ncclReduceScatter(send.data, recv.data, size_t(recv.count), nccl_dtype(recv.dtype),
                               nccl_op(op, recv.dtype), comm_, stream()));
    if (mask.used()) {   // in place, as NCCL's: this rank's slice of the mask
      uint8_t* m = mask.data();
      enqueued("reduce_scatter (NaN mask)", deadline,
               ncclReduceScatter(m, m + size_t(rank_) * size_t(recv.count), size_t(recv.count), ncclUint8, ncclMax,
                                 comm_, stream()));
    }
    finish("reduce_scatter", deadline, recv, op, mask, int64_t(rank_) * recv.count);
  }

  void do_barrier() override {
    const Clock::time_point deadline = begin("barrier");
    cuda::DeviceGuard guard(device_.index);
    void* p = barrier_buf_.raw_data();
    enqueued("barrier", deadline, ncclAllReduce(p, p, 1, ncclInt64, ncclSum, comm_, stream()));
    complete("barrier", deadline);
  }

 private:
  // The per-element NaN marks of float max on more than one rank (header comment): a uint8
  // tensor on the device holding this rank's marks, reduced with ncclMax next to the data.
  struct NanMask {
    Tensor marks;
    bool used() const { return marks.defined(); }
    uint8_t* data() const { return static_cast<uint8_t*>(marks.raw_data()); }
  };

  cudaStream_t stream() const { return cuda::compute_stream(device_.index); }

  static std::string last_error() {
    const char* s = ncclGetLastError(nullptr);
    return s && *s ? str_cat(" (", s, ")") : std::string();
  }

  static void pause(int& spins) {   // a short spin first (small collectives), then sleeps
    if (++spins < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void abort_comm() noexcept {
    if (comm_) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  Clock::time_point begin(const char* what) {
    if (broken_ || !comm_)
      throw CommError(str_cat("nccl: rank ", rank_, ": the communicator failed earlier; ", what, " refused"));
    return Clock::now() + timeout();
  }

  [[noreturn]] void fail(const std::string& what, ncclResult_t r) {
    const std::string last = last_error();
    broken_ = true;
    abort_comm();
    const bool peer = r == ncclRemoteError || r == ncclSystemError;
    throw CommError(str_cat("nccl: rank ", rank_, " of ", world_, ": ", what, " failed: ", ncclGetErrorString(r), last,
                            peer ? "; a peer died, left or lost its connection?" : "",
                            "; the communicator is aborted"));
  }

  [[noreturn]] void time_out(const std::string& what) {
    broken_ = true;
    abort_comm();
    throw CommTimeoutError(str_cat("nccl: rank ", rank_, " of ", world_, ": ", what, " did not complete within ",
                                   std::chrono::duration<double>(timeout()).count(), " s, waiting for the other ",
                                   world_ - 1, " rank(s) (one died, hung or called another collective); the "
                                   "communicator is aborted"));
  }

  // Throws when the communicator reports an error; true while an enqueue is still in progress.
  bool in_progress(const std::string& what) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
    if (q != ncclSuccess) fail(what, q);
    if (state == ncclSuccess) return false;
    if (state != ncclInProgress) fail(what, state);
    return true;
  }

  // A non-blocking call returned: until its work is on the stream the state is ncclInProgress.
  void wait_enqueued(const std::string& what, Clock::time_point deadline) {
    int spins = 0;
    while (in_progress(what)) {
      if (Clock::now() > deadline) time_out(what);
      pause(spins);
    }
  }

  void enqueued(const std::string& what, Clock::time_point deadline, ncclResult_t r) {
    if (r != ncclSuccess && r != ncclInProgress) fail(what, r);
    wait_enqueued(what, deadline);
  }

  // Waits for everything queued so far on the stream, polling NCCL's error state as well.
  void complete(const std::string& what, Clock::time_point deadline) {
    CUDA_CHECK(cudaEventRecord(done_, stream()));
    int spins = 0;
    for (;;) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        broken_ = true;
        abort_comm();
        cuda::throw_cuda_error(e, str_cat("cudaEventQuery after nccl ", what).c_str(), __FILE__, __LINE__);
      }
      in_progress(what);
      if (Clock::now() > deadline) time_out(what);
      pause(spins);
    }
    in_progress(what);   // an error raised while the last step finished
  }

  // This rank's NaN marks for float max on more than one rank (empty otherwise). Runs before
  // the collective: in place, send is overwritten by it.
  NanMask nan_mask(Buf send, ReduceOp op) {
    NanMask m;
    if (op != ReduceOp::max || !is_float(send.dtype) || world_ == 1) return m;
    std::vector<char> host(send.bytes());
    CUDA_CHECK(cudaMemcpyAsync(host.data(), send.data, send.bytes(), cudaMemcpyDeviceToHost, stream()));
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    std::vector<uint8_t> marks(size_t(send.count));
    for (int64_t i = 0; i < send.count; ++i) marks[size_t(i)] = is_nan_at(send.dtype, host.data(), i) ? 1 : 0;
    m.marks = Tensor::empty({send.count}, DType::u8, device_, "comm_staging");
    CUDA_CHECK(cudaMemcpyAsync(m.data(), marks.data(), marks.size(), cudaMemcpyHostToDevice, stream()));
    CUDA_CHECK(cudaStreamSynchronize(stream()));   // `marks` is pageable and dies here
    return m;
  }

  // The end of a reducing collective whose result is `out`: the float avg division, the NaN
  // marks of float max (mask_offset: where out's marks start in the mask), then the wait.
  void finish(const char* what, Clock::time_point deadline, Buf out, ReduceOp op, const NanMask& mask,
              int64_t mask_offset) {
    const bool divide = op == ReduceOp::avg && is_float(out.dtype) && world_ > 1;
    const bool power_of_two = (world_ & (world_ - 1)) == 0;
    if (divide && power_of_two) {   // x * 2^-k + (-0) is exactly x / 2^k (signed zeros too)
      axpby_kernels().launch(device_, out.dtype,
                             AxpbyArgs{out.data, out.data, nullptr, 1.0 / double(world_), 0.0, -0.0, out.count});
    }
    complete(what, deadline);
    if (divide && !power_of_two) {
      std::vector<char> host(out.bytes());
      CUDA_CHECK(cudaMemcpyAsync(host.data(), out.data, out.bytes(), cudaMemcpyDeviceToHost, stream()));
      CUDA_CHECK(cudaStreamSynchronize(stream()));
      divide_by_world(out.dtype, host.data(), out.count, world_);
      CUDA_CHECK(cudaMemcpyAsync(out.data, host.data(), out.bytes(), cudaMemcpyHostToDevice, stream()));
      CUDA_CHECK(cudaStreamSynchronize(stream()));
    }
    if (mask.used()) {
      std::vector<uint8_t> marks(size_t(out.count));
      CUDA_CHECK(
          cudaMemcpyAsync(marks.data(), mask.data() + mask_offset, marks.size(), cudaMemcpyDeviceToHost, stream()));
      CUDA_CHECK(cudaStreamSynchronize(stream()));
      bool any = false;
      for (uint8_t v : marks) any = any || v != 0;
      if (any) {
        std::vector<char> host(out.bytes());
        CUDA_CHECK(cudaMemcpyAsync(host.data(), out.data, out.bytes(), cudaMemcpyDeviceToHost, stream()));
        CUDA_CHECK(cudaStreamSynchronize(stream()));
        for (int64_t i = 0; i < out.count; ++i)
          if (marks[size_t(i)]) set_nan_at(out.dtype, host.data(), i);
        CUDA_CHECK(cudaMemcpyAsync(out.data, host.data(), out.bytes(), cudaMemcpyHostToDevice, stream()));
        CUDA_CHECK(cudaStreamSynchronize(stream()));
      }
    }
  }

  int rank_, world_;
  Device device_;
  std::unique_ptr<TcpStore> store_;   // rank 0's server stays up while the communicator lives
  ncclComm_t comm_ = nullptr;
  cudaEvent_t done_ = nullptr;
  Tensor barrier_buf_;
  bool broken_ = false;
};

}  // namespace

// The CUDA backend's registrar calls this (register_cuda.cpp), after its build check.
void register_nccl_communicator() {
  register_comm_backend("nccl", [](const RankInfo& info, Device device) -> std::unique_ptr<Communicator> {
    return std::make_unique<NcclCommunicator>(info, device);
  });
}
}  // namespace oomlab
