// local_comm.h — the `local` backend: ranks are threads of one process, each on its own
// logical device (cpu:0..N-1, meta:0..N-1 or cuda:0..N-1), reading each other's buffers
// directly. A cpu rank moves data with memcpy and reduces with the collective family's CPU
// kernels; a cuda rank launches the copy kernel (device-to-device, on its compute stream)
// and the collective kernels on its device, and waits for its queued work (settle) before it
// publishes buffers or tells a peer a step is done, so peers on other GPUs never read
// unfinished data. Its ring runs as one segment (the slices below are a CPU cache matter).
// It exists because T7 studies the all-reduce algorithms, so they are written out here:
//  * ring (default): reduce-scatter then all-gather over n chunks, each rank reading only
//    from its left neighbour: per rank 2(n-1)/n x size sent and received, flat in n;
//  * parameter_server: rank 0 receives every worker's buffer into its own staging buffers
//    ((n-1) x size on its device, visible in its allocator's stats), reduces and sends the
//    result back: (n-1) x size received and sent at rank 0, size at each worker.
// broadcast, reduce, all_gather and reduce_scatter move data flat (each rank reads what it
// needs from the ranks that hold it); their byte counts are those of the flat pattern.
// On meta ranks no data moves, but the same synchronisation, byte counts and staging
// allocations happen. Synchronisation: each rank publishes its buffers per collective;
// ring steps advance through per-rank atomic progress / consumed counters (a rank writes a
// chunk only after its right neighbour has read the previous one), waited for by spinning
// briefly, then yielding, then sleeping on the world's condition variable (a waiter counts
// itself a sleeper before it checks, so a counter written without the lock always wakes it:
// local_comm.cpp, wait). The ring is
// pipelined: the buffer is cut into segments of n slices of kRingSliceBytes, and the whole
// reduce-scatter + all-gather runs per segment, so a chunk is re-read while still in cache.
// See communicator.h for the shared contracts (timeouts, a failed or departed rank,
// mismatched calls).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/parallel/communicator.h"

namespace oomlab {

enum class AllReduceAlgo { ring, parameter_server };
inline constexpr int64_t kRingSliceBytes = int64_t(256) << 10;   // see local_all_reduce.cpp
const char* all_reduce_algo_name(AllReduceAlgo a);     // "ring", "ps"
AllReduceAlgo parse_all_reduce_algo(const std::string& s);   // "ring" | "ps"; ValueError otherwise

class LocalWorld {
 public:
  explicit LocalWorld(int size);
  int size() const { return int(slots_.size()); }

 private:
  friend class LocalCommunicator;
  struct Slot {
    const void* send = nullptr;
    void* recv = nullptr;
    std::string call;                        // "all_reduce(float32 x 1024, sum, ring)": checked against the peers'
    int64_t generation = 0;                  // collectives this rank has entered
    std::atomic<int64_t> progress{0};        // steps done (all collectives so far)
    std::atomic<int64_t> consumed{0};        // steps of this rank's data its reader has consumed
    bool left = false;                       // the rank's communicator is gone
  };
  std::mutex mu_;                            // guards everything but the atomics
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};             // ranks blocked on cv_: a counter write must notify
  std::vector<Slot> slots_;
  std::string failure_;                      // non-empty: the world is broken, every wait throws
  int64_t barrier_generation_ = 0;
  int barrier_waiting_ = 0;
  std::function<void()> before_sleep_;       // tests only (LocalCommTestPeer): runs locked, before a sleep
  friend struct LocalCommTestPeer;
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalWorld> world, int rank, Device device,
                    AllReduceAlgo algo = AllReduceAlgo::ring);
  ~LocalCommunicator() override;   // marks the rank as gone: peers waiting for it throw CommError
  int rank() const override { return rank_; }
  int world_size() const override { return world_->size(); }
  std::string backend() const override { return "local"; }
  Device device() const override { return device_; }
  AllReduceAlgo algo() const { return algo_; }
  // Breaks the world: every rank's pending and later calls throw CommError naming this rank.
  void fail(const std::string& why);
  // Tests only: cpu ranks created while this is on move and reduce data as an accelerator
  // rank does (copy and collective kernels through their tables, settle points), so that
  // path runs in CPU CI (tests/test_comm_local.cpp).
  static void use_kernel_path_on_cpu_for_tests(bool on);

 protected:
  void do_all_reduce(Buf send, Buf recv, ReduceOp op) override;
  void do_broadcast(Buf send, Buf recv, int root) override;
  void do_reduce(Buf send, Buf recv, ReduceOp op, int root) override;
  void do_all_gather(Buf send, Buf recv) override;
  void do_reduce_scatter(Buf send, Buf recv, ReduceOp op) override;
  void do_barrier() override;

 private:
  using Lock = std::unique_lock<std::mutex>;
  void enter(const std::string& call, const void* send, void* recv);   // publish this collective
  const LocalWorld::Slot& peer(Lock& lk, int p);    // waits until p entered this collective
  void wait(Lock& lk, const std::function<bool()>& ready, int peer, const char* what);
  // Without the lock: spins, then yields, then sleeps in wait() until counter >= target.
  void wait_counter(const std::atomic<int64_t>& counter, int64_t target, int peer, const char* what);
  void step_done(int64_t step, int reader_of = -1);   // progress; ack the rank read from (no lock)
  void wake();   // notifies sleepers after an atomic counter write (no lock held)
  void set_progress_locked(int64_t step);   // world lock held: progress, then notify
  void ring_all_reduce(Buf send, Buf recv, ReduceOp op);
  void ps_all_reduce(Buf send, Buf recv, ReduceOp op);
  void finish(int64_t end);   // world lock held
  void wait_readers_done(Lock& lk, const std::vector<int>& readers, int64_t step);
  bool moves_data() const { return !device_.is_meta(); }
  bool on_accelerator() const { return kernel_path_; }
  // Data movement on this rank's device (see the header comment); no-ops on meta.
  void move(void* dst, const void* src, size_t bytes);
  void reduce(DType d, ReduceOp op, void* dst, const void* a, const void* b, int64_t n);
  void divide(DType d, void* p, int64_t n);
  void settle();   // accelerator: waits for this rank's queued work; cpu / meta: nothing

  std::shared_ptr<LocalWorld> world_;
  int rank_;
  Device device_;
  AllReduceAlgo algo_;
  bool kernel_path_;           // data moves through kernels: accelerators (and cpu in tests)
  int64_t steps_ = 0;          // this rank's steps before the current collective
  std::string call_;           // the current collective
  friend struct LocalCommTestPeer;   // tests/test_comm_local.cpp: the wait / wake handshake
};

// Runs fn on devices.size() threads, rank r's communicator on devices[r], all in one world.
// A rank that throws breaks the world (the others' calls throw CommError instead of
// waiting); after joining, the first rank's own failure (not a CommError) is rethrown, else
// the first CommError.
void run_local_ranks(const std::vector<Device>& devices, AllReduceAlgo algo,
                     const std::function<void(LocalCommunicator&)>& fn,
                     std::chrono::milliseconds timeout = std::chrono::seconds(300));

}  // namespace oomlab
