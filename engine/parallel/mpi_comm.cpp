// mpi_comm.cpp — the `mpi` backend: OpenMPI (Debian's libopenmpi-dev) under mpirun, one
// rank per process on the cpu device. Built only when CMake finds MPI (this file is the
// oomlab_parallel_mpi library, linked whole-archive so its registrar runs).
// Mapping: all_reduce -> MPI_Allreduce (sum of float32 / float64 / int64 and max of int64 with
// MPI's built-in ops; float16 / bfloat16 and float max with user ops built on reduce_into,
// so the dtype and NaN rules are the local backend's; avg = sum then divide_by_world);
// broadcast -> MPI_Bcast; reduce -> MPI_Reduce; all_gather -> MPI_Allgather;
// reduce_scatter -> MPI_Reduce_scatter_block; barrier -> MPI_Barrier. In-place calls use
// MPI_IN_PLACE. Counts above 2^30 elements are split into several calls (element-wise
// collectives) or refused (all_gather / reduce_scatter).
// Errors: MPI_ERRORS_RETURN on the world; a failed call throws CommError with MPI's text.
// No hang: MPI has no timeouts, so a watchdog thread ends this process (exit 2, after
// printing the collective and the rank) when a call, MPI_Init_thread included, outlasts
// timeout(); mpirun then
// terminates the other ranks. A rank killed by a signal makes mpirun end the job.
// Byte counts: MPI's algorithms are its own; stats() counts what a ring moves
// (all_reduce 2(n-1)/n x size, all_gather / reduce_scatter (n-1)/n x the full buffer,
// broadcast / reduce: size at the non-roots, (n-1) x size at the root).
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/parallel/comm_registry.h"
#include "engine/parallel/communicator.h"

namespace oomlab {
namespace {

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CommError(str_cat("mpi: ", call, " failed: ", std::string(text, size_t(len))));
}

template <DType D, ReduceOp OP> void user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(D, OP, inout, in, *len);
}

struct MpiTypes {   // created once after MPI_Init
  MPI_Datatype half = MPI_DATATYPE_NULL, bf16 = MPI_DATATYPE_NULL;
  MPI_Op f16_sum, f16_max, bf16_sum, bf16_max, f32_max, f64_max;
};

class Watchdog {   // ends the process when a collective outlasts its deadline
 public:
  Watchdog() : thread_([this] { loop(); }) {}
  ~Watchdog() {
    { std::lock_guard<std::mutex> lk(mu_); stop_ = true; }
    cv_.notify_all();
    thread_.join();
  }
  void arm(const std::string& what, std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lk(mu_);
    what_ = what;
    timeout_ = timeout;
    deadline_ = std::chrono::steady_clock::now() + timeout;
    armed_ = true;
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      if (!armed_) { cv_.wait(lk); continue; }
      if (cv_.wait_until(lk, deadline_) == std::cv_status::timeout && armed_ && !stop_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr, "oomlab: error: mpi: %s did not complete within %.1f s (a peer died, hung or called "
                     "another collective); ending this rank\n", what_.c_str(),
                     std::chrono::duration<double>(timeout_).count());
        std::fflush(stderr);
        std::_Exit(2);
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  std::string what_;
  std::chrono::milliseconds timeout_{0};
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(const RankInfo& info) {
    set_timeout(info.timeout);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      watchdog_.arm("MPI_Init_thread (mpirun's job set-up)", timeout());   // the wire-up is a wait too
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      watchdog_.disarm();
      std::atexit([] {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
      });
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    OOMLAB_CHECK_T(CommError, info.source == "single" || (info.rank == rank_ && info.world_size == size_),
                   "mpi: MPI says rank ", rank_, " of ", size_, " but ", info.source, " says rank ", info.rank, " of ",
                   info.world_size);
    types();
  }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  Device device() const override { return cpu_device(); }

 protected:
  void do_all_reduce(Buf s, Buf r, ReduceOp op) override {
    Guard g(*this, "all_reduce");
    for (int64_t lo = 0; lo < r.count; lo += kMaxCount) {
      const int n = int(std::min<int64_t>(kMaxCount, r.count - lo));
      const size_t off = size_t(lo) * dtype_size(r.dtype);
      mpi_check(MPI_Allreduce(s.data == r.data ? MPI_IN_PLACE : static_cast<char*>(s.data) + off,
                              static_cast<char*>(r.data) + off, n, mpi_type(r.dtype), mpi_op(r.dtype, op),
                              MPI_COMM_WORLD), "MPI_Allreduce");
    }
    if (op == ReduceOp::avg) divide_by_world(r.dtype, r.data, r.count, size_);
    count_ring_bytes(int64_t(r.bytes()) * 2);
  }
  void do_broadcast(Buf s, Buf r, int root) override {
    Guard g(*this, "broadcast");
    if (rank_ == root && s.data != r.data) std::memcpy(r.data, s.data, r.bytes());
    for (int64_t lo = 0; lo < r.count; lo += kMaxCount) {
      const int n = int(std::min<int64_t>(kMaxCount, r.count - lo));
      mpi_check(MPI_Bcast(static_cast<char*>(r.data) + size_t(lo) * dtype_size(r.dtype), n, mpi_type(r.dtype), root,
                          MPI_COMM_WORLD), "MPI_Bcast");
    }
    count_rooted_bytes(root, int64_t(r.bytes()), true);
  }
  void do_reduce(Buf s, Buf r, ReduceOp op, int root) override {
    Guard g(*this, "reduce");
    for (int64_t lo = 0; lo < r.count; lo += kMaxCount) {
      const int n = int(std::min<int64_t>(kMaxCount, r.count - lo));
      const size_t off = size_t(lo) * dtype_size(r.dtype);
      const bool in_place = rank_ == root && s.data == r.data;
      mpi_check(MPI_Reduce(in_place ? MPI_IN_PLACE : static_cast<char*>(s.data) + off,
                           rank_ == root ? static_cast<char*>(r.data) + off : nullptr, n, mpi_type(r.dtype),
                           mpi_op(r.dtype, op), root, MPI_COMM_WORLD), "MPI_Reduce");
    }
    if (rank_ == root && op == ReduceOp::avg) divide_by_world(r.dtype, r.data, r.count, size_);
    count_rooted_bytes(root, int64_t(r.bytes()), false);
  }
  void do_all_gather(Buf s, Buf r) override {
    Guard g(*this, "all_gather");
    OOMLAB_CHECK_T(CommError, r.count <= INT_MAX, "mpi: all_gather of ", r.count, " elements exceeds MPI's int counts");
    const bool in_place = static_cast<char*>(r.data) + size_t(rank_) * s.bytes() == s.data;
    mpi_check(MPI_Allgather(in_place ? MPI_IN_PLACE : s.data, int(s.count), mpi_type(s.dtype), r.data, int(s.count),
                            mpi_type(s.dtype), MPI_COMM_WORLD), "MPI_Allgather");
    count_ring_bytes(int64_t(r.bytes()));
  }
  void do_reduce_scatter(Buf s, Buf r, ReduceOp op) override {
    Guard g(*this, "reduce_scatter");
    OOMLAB_CHECK_T(CommError, s.count <= INT_MAX, "mpi: reduce_scatter of ", s.count,
                   " elements exceeds MPI's int counts");
    char* mine = static_cast<char*>(s.data) + size_t(rank_) * r.bytes();
    if (mine == r.data) {   // NCCL's in-place (recv = send's slice); MPI_IN_PLACE leaves it at the start
      mpi_check(MPI_Reduce_scatter_block(MPI_IN_PLACE, s.data, int(r.count), mpi_type(r.dtype), mpi_op(r.dtype, op),
                                         MPI_COMM_WORLD), "MPI_Reduce_scatter_block");
      if (rank_ != 0) std::memmove(mine, s.data, r.bytes());
    } else {
      mpi_check(MPI_Reduce_scatter_block(s.data, r.data, int(r.count), mpi_type(r.dtype), mpi_op(r.dtype, op),
                                         MPI_COMM_WORLD), "MPI_Reduce_scatter_block");
    }
    if (op == ReduceOp::avg) divide_by_world(r.dtype, r.data, r.count, size_);
    count_ring_bytes(int64_t(s.bytes()));
  }
  void do_barrier() override {
    Guard g(*this, "barrier");
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }

 private:
  static constexpr int64_t kMaxCount = int64_t(1) << 30;
  struct Guard {   // arms the watchdog for one collective
    Guard(MpiCommunicator& c, const char* what) : c(c) {
      c.watchdog_.arm(str_cat("rank ", c.rank_, ": ", what), c.timeout());
    }
    ~Guard() { c.watchdog_.disarm(); }
    MpiCommunicator& c;
  };
  static MpiTypes& types() {
    static MpiTypes* t = [] {
      auto* m = new MpiTypes;
      MPI_Type_contiguous(1, MPI_UINT16_T, &m->half);
      MPI_Type_commit(&m->half);
      MPI_Type_contiguous(1, MPI_UINT16_T, &m->bf16);
      MPI_Type_commit(&m->bf16);
      MPI_Op_create(&user_reduce<DType::f16, ReduceOp::sum>, 1, &m->f16_sum);
      MPI_Op_create(&user_reduce<DType::f16, ReduceOp::max>, 1, &m->f16_max);
      MPI_Op_create(&user_reduce<DType::bf16, ReduceOp::sum>, 1, &m->bf16_sum);
      MPI_Op_create(&user_reduce<DType::bf16, ReduceOp::max>, 1, &m->bf16_max);
      MPI_Op_create(&user_reduce<DType::f32, ReduceOp::max>, 1, &m->f32_max);
      MPI_Op_create(&user_reduce<DType::f64, ReduceOp::max>, 1, &m->f64_max);
      return m;
    }();
    return *t;
  }
  static MPI_Datatype mpi_type(DType d) {
    switch (d) {
      case DType::f32: return MPI_FLOAT;
      case DType::f64: return MPI_DOUBLE;
      case DType::i64: return MPI_INT64_T;
      case DType::f16: return types().half;
      case DType::bf16: return types().bf16;
      default: throw DTypeError(str_cat("mpi: ", dtype_name(d), " is not a collective dtype"));
    }
  }
  static MPI_Op mpi_op(DType d, ReduceOp op) {
    const bool max = op == ReduceOp::max;
    switch (d) {
      case DType::f32: return max ? types().f32_max : MPI_SUM;
      case DType::f64: return max ? types().f64_max : MPI_SUM;
      case DType::i64: return max ? MPI_MAX : MPI_SUM;
      case DType::f16: return max ? types().f16_max : types().f16_sum;
      case DType::bf16: return max ? types().bf16_max : types().bf16_sum;
      default: throw DTypeError(str_cat("mpi: ", dtype_name(d), " is not a collective dtype"));
    }
  }

  int rank_ = 0, size_ = 1;
  Watchdog watchdog_;
};

const bool registered = [] {
  register_comm_backend("mpi", [](const RankInfo& info, Device device) -> std::unique_ptr<Communicator> {
    OOMLAB_CHECK_T(DeviceError, device.is_cpu(), "the mpi backend runs on the cpu device, not ", device.str());
    return std::make_unique<MpiCommunicator>(info);
  });
  return true;
}();

}  // namespace
}  // namespace oomlab
