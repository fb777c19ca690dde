// comm_queue.h — one rank's collectives run in order on one communication thread, so
// they can overlap the compute thread (DDP's bucket all-reduces during backward; PyTorch's
// ProcessGroup work queue / NCCL's communication stream).
// Contracts:
//  * The queue owns the use of its Communicator: while it exists nobody else calls it.
//    Work runs in submission order, one item at a time, on the queue's thread with the
//    communicator's device current. Every rank must submit the same collectives in the
//    same order (the communicator's contract).
//  * submit() returns a Work whose wait() blocks until the item ran and rethrows its
//    exception. After an item failed, later items are not run: their wait() throws
//    CommError naming the first failure (the communicator is unusable after a failure).
//  * run() = submit(fn).wait(): for collectives the caller needs before going on.
//  * Work records when it was queued, started and finished (steady clock), for overlap
//    figures.
//  * The destructor finishes queued work, then joins the thread (never throws).
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/parallel/communicator.h"

namespace oomlab {

class CommQueue {
 public:
  using Clock = std::chrono::steady_clock;
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    Clock::time_point queued, started, finished;
  };
  class Work {
   public:
    Work() = default;
    explicit Work(std::shared_ptr<State> s) : s_(std::move(s)) {}
    bool valid() const { return s_ != nullptr; }
    void wait() const;                    // rethrows the item's failure
    double seconds() const;               // finished - started (after wait)
    Clock::time_point finished() const;   // after wait
   private:
    std::shared_ptr<State> s_;
  };

  explicit CommQueue(Communicator& comm);
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  Communicator& comm() { return comm_; }
  int rank() const { return comm_.rank(); }
  int world_size() const { return comm_.world_size(); }
  Device device() const { return comm_.device(); }

  Work submit(std::function<void(Communicator&)> fn);
  void run(std::function<void(Communicator&)> fn) { submit(std::move(fn)).wait(); }

 private:
  void loop();
  Communicator& comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void(Communicator&)>, std::shared_ptr<State>>> items_;
  std::string failure_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace oomlab
