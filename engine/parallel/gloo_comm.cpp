// gloo_comm.cpp — the `gloo` backend: Debian's libgloo (PyTorch's CPU backend) over TCP,
// one rank per process on the cpu device. Built only when CMake finds Gloo (this file is the
// oomlab_parallel_gloo library, linked whole-archive so its registrar runs).
// Rendezvous: rank 0 serves a TcpStore on MASTER_ADDR:MASTER_PORT (rank_env.h); every rank
// publishes its pair addresses there and gloo connects the full mesh (as torch.distributed's
// init_process_group("gloo") with env://). Transport: gloo's tcp device on the master's
// interface (127.0.0.1 for one machine).
// Mapping: all_reduce -> gloo::allreduce (gloo's ring), broadcast -> gloo::broadcast,
// reduce -> gloo::reduce, all_gather -> gloo::allgather, barrier -> gloo::barrier. Every
// reduction uses reduce_to (communicator.h) as gloo's element function, so the dtype and NaN
// rules are the local backend's; avg = sum then divide_by_world. reduce_scatter: gloo has no
// reduce-scatter of this form, so an all-reduce of the whole buffer into a scratch tensor,
// then this rank's slice (what PyTorch's gloo backend also does for uneven cases).
// Timeouts: every collective gets timeout(); gloo throws on a timeout or a closed peer (a
// killed rank resets its TCP connections), and that becomes CommTimeoutError / CommError.
// Rendezvous: each wait for a peer's key and the mesh's connection each end within timeout()
// (a peer that dies between publishing its address and connecting included).
// Byte counts: what a ring moves (as the mpi backend).
// SIGPIPE: a rank writing to the socket of a peer that died would be killed by SIGPIPE (gloo's
// tcp pairs write with writev, which takes no MSG_NOSIGNAL) instead of getting the error that
// becomes CommError, so a rank that uses gloo ignores SIGPIPE when nothing else handles it, as
// every Python process (PyTorch's) does from its start (seen 2026-11-27: rank 0 of
// RanksFailure.gloo_kill exited on signal 13 under ASan).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <csignal>

#include <algorithm>
#include <cstring>

#include "engine/parallel/comm_registry.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/tcp_store.h"

namespace oomlab {
namespace {

class StoreAdapter : public gloo::rendezvous::Store {   // gloo's view of our TcpStore
 public:
  explicit StoreAdapter(TcpStore& s) : s_(s) {}
  void set(const std::string& key, const std::vector<char>& data) override { s_.set("gloo/" + key, data); }
  std::vector<char> get(const std::string& key) override { return s_.get("gloo/" + key); }
  // Every key wait gets the store's whole timeout (--timeout), not the context's: the context's
  // is shortened while the mesh connects (see the constructor).
  void wait(const std::vector<std::string>& keys) override { wait(keys, s_.timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    std::vector<std::string> k;
    for (const auto& key : keys) k.push_back("gloo/" + key);
    s_.wait(k, s_.timeout());
  }

 private:
  TcpStore& s_;
};

// Calls fn(T*) with the buffer typed by its element size (gloo counts elements of sizeof(T)).
template <class Fn> void typed(DType d, void* p, Fn fn) {
  switch (dtype_size(d)) {
    case 8: d == DType::i64 ? fn(static_cast<int64_t*>(p)) : fn(static_cast<double*>(p)); return;
    case 4: fn(static_cast<float*>(p)); return;
    default: fn(static_cast<uint16_t*>(p)); return;
  }
}

// SIGPIPE ignored unless the program set its own disposition (see the header).
void ignore_sigpipe_by_default() {
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const RankInfo& info, Device device) : rank_(info.rank), world_(info.world_size), device_(device) {
    OOMLAB_CHECK_T(DeviceError, device.type == DeviceType::cpu, "the gloo backend runs on cpu (got ", device.str(),
                   ")");
    ignore_sigpipe_by_default();
    set_timeout(info.timeout);   // the rendezvous below is bounded by it too
    store_ = std::make_unique<TcpStore>(info.master_addr, info.master_port, info.rank == 0, timeout(),
                                        rendezvous_job(info));
    StoreAdapter adapter(*store_);
    gloo::transport::tcp::attr attr;
    attr.hostname = info.master_addr == "localhost" ? "127.0.0.1" : local_host_for(info.master_addr);
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
    // gloo waits 5x a pair's timeout for its first connection (tcp/pair.h, waitUntil), which
    // the pair takes from the context: a peer that published its address and died held rank 0
    // for 5x --timeout. So the pairs are made under timeout()/5, then the context gets it whole.
    ctx->setTimeout(std::max(std::chrono::milliseconds(1), timeout() / 5));
    try {
      ctx->connectFullMesh(adapter, dev);
    } catch (const gloo::Exception& e) {
      throw CommError(str_cat("gloo: rank ", rank_, " could not connect to the other ", world_ - 1, " rank(s) within ",
                              std::chrono::duration<double>(timeout()).count(), " s: ", e.what()));
    }
    ctx->setTimeout(timeout());
    ctx_ = ctx;
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "gloo"; }
  Device device() const override { return device_; }

 protected:
  void do_all_reduce(Buf send, Buf recv, ReduceOp op) override {
    count_ring_bytes(2 * int64_t(recv.bytes()));
    if (world_ == 1 || recv.count == 0) {
      if (send.data != recv.data) std::memcpy(recv.data, send.data, recv.bytes());
      if (op == ReduceOp::avg) divide_by_world(recv.dtype, recv.data, recv.count, world_);
      return;
    }
    run("all_reduce", [&] {
      gloo::AllreduceOptions o(ctx_);
      typed(recv.dtype, recv.data, [&](auto* out) {
        if (send.data != recv.data) o.setInput(static_cast<decltype(out)>(send.data), size_t(recv.count));
        o.setOutput(out, size_t(recv.count));
      });
      o.setReduceFunction(reduction(recv.dtype, op));
      o.setTimeout(timeout());
      gloo::allreduce(o);
    });
    if (op == ReduceOp::avg) divide_by_world(recv.dtype, recv.data, recv.count, world_);
  }

  void do_broadcast(Buf send, Buf recv, int root) override {
    count_rooted_bytes(root, int64_t(recv.bytes()), true);
    if (world_ == 1) {
      if (send.data != recv.data) std::memcpy(recv.data, send.data, recv.bytes());
      return;
    }
    run("broadcast", [&] {
      gloo::BroadcastOptions o(ctx_);
      typed(recv.dtype, recv.data, [&](auto* out) {
        if (rank_ == root) o.setInput(static_cast<decltype(out)>(send.data), size_t(recv.count));
        o.setOutput(out, size_t(recv.count));
      });
      o.setRoot(root);
      o.setTimeout(timeout());
      gloo::broadcast(o);
    });
  }

  void do_reduce(Buf send, Buf recv, ReduceOp op, int root) override {
    count_rooted_bytes(root, int64_t(recv.bytes()), false);
    // gloo's reduce writes the output on every rank; a non-root recv (even in place) stays untouched.
    Tensor scratch;
    void* out = recv.data;
    if (rank_ != root) {
      scratch = Tensor::empty({recv.count}, recv.dtype, device_, "comm_staging");
      out = scratch.raw_data();
    }
    if (world_ > 1) {
      run("reduce", [&] {
        gloo::ReduceOptions o(ctx_);
        typed(recv.dtype, out, [&](auto* p) {
          if (send.data != out) o.setInput(static_cast<decltype(p)>(send.data), size_t(recv.count));
          o.setOutput(p, size_t(recv.count));
        });
        o.setRoot(root);
        o.setReduceFunction(reduction(recv.dtype, op));
        o.setTimeout(timeout());
        gloo::reduce(o);
      });
    } else if (send.data != out) {
      std::memcpy(out, send.data, recv.bytes());
    }
    if (rank_ == root && op == ReduceOp::avg) divide_by_world(recv.dtype, recv.data, recv.count, world_);
  }

  void do_all_gather(Buf send, Buf recv) override {
    count_ring_bytes(int64_t(recv.bytes()));
    char* mine = static_cast<char*>(recv.data) + size_t(rank_) * send.bytes();
    if (send.data != mine) std::memcpy(mine, send.data, send.bytes());
    if (world_ == 1) return;
    run("all_gather", [&] {
      gloo::AllgatherOptions o(ctx_);
      typed(recv.dtype, recv.data, [&](auto* out) { o.setOutput(out, size_t(recv.count)); });
      o.setTimeout(timeout());
      gloo::allgather(o);
    });
  }

  void do_reduce_scatter(Buf send, Buf recv, ReduceOp op) override {
    count_ring_bytes(int64_t(send.bytes()));
    Tensor full = Tensor::empty({send.count}, send.dtype, device_, "comm_staging");
    Buf whole{full.raw_data(), send.count, send.dtype};
    const CommStats before = stats_;
    do_all_reduce(send, whole, op);
    stats_ = before;
    std::memmove(recv.data, static_cast<char*>(whole.data) + size_t(rank_) * recv.bytes(), recv.bytes());
  }

  void do_barrier() override {
    if (world_ == 1) return;
    run("barrier", [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTimeout(timeout());
      gloo::barrier(o);
    });
  }

 private:

  static gloo::AllreduceOptions::Func reduction(DType d, ReduceOp op) {
    return [d, op](void* c, const void* a, const void* b, size_t n) { reduce_to(d, op, c, a, b, int64_t(n)); };
  }

  // The address our tcp device binds: loopback when the master is this machine's loopback.
  static std::string local_host_for(const std::string& master) {
    return master.rfind("127.", 0) == 0 ? master : std::string();   // empty: gloo picks the hostname's address
  }

  template <class Fn> void run(const char* what, Fn fn) {
    if (broken_)
      throw CommError(str_cat("gloo: rank ", rank_, ": the communicator failed earlier; ", what, " refused"));
    try {
      fn();
    } catch (const gloo::IoException& e) {
      broken_ = true;
      const std::string text = e.what();
      if (text.find("Timed out") != std::string::npos || text.find("timed out") != std::string::npos)
        throw CommTimeoutError(str_cat("gloo: rank ", rank_, ": ", what, " timed out after ",
                                       std::chrono::duration<double>(timeout()).count(), " s: ", text));
      throw CommError(str_cat("gloo: rank ", rank_, ": ", what, " failed (a peer died or left?): ", text));
    } catch (const gloo::Exception& e) {
      broken_ = true;
      throw CommError(str_cat("gloo: rank ", rank_, ": ", what, " failed: ", e.what()));
    }
  }

  int rank_, world_;
  Device device_;
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::Context> ctx_;
  bool broken_ = false;
};

const bool registered = [] {
  register_comm_backend("gloo", [](const RankInfo& info, Device device) -> std::unique_ptr<Communicator> {
    return std::make_unique<GlooCommunicator>(info, device);
  });
  return true;
}();

}  // namespace
}  // namespace oomlab
