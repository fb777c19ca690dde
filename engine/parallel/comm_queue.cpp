// comm_queue.cpp — the communication thread of one rank (comm_queue.h).
#include "engine/parallel/comm_queue.h"

#include "engine/core/device.h"

namespace oomlab {

void CommQueue::Work::wait() const {
  OOMLAB_CHECK(s_ != nullptr, "CommQueue::Work::wait on an empty Work");
  std::unique_lock<std::mutex> lk(s_->mu);
  s_->cv.wait(lk, [&] { return s_->done; });
  if (s_->error) std::rethrow_exception(s_->error);
}

double CommQueue::Work::seconds() const {
  std::lock_guard<std::mutex> lk(s_->mu);
  return std::chrono::duration<double>(s_->finished - s_->started).count();
}

CommQueue::Clock::time_point CommQueue::Work::finished() const {
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->finished;
}

CommQueue::CommQueue(Communicator& comm) : comm_(comm) { thread_ = std::thread([this] { loop(); }); }

CommQueue::~CommQueue() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CommQueue::Work CommQueue::submit(std::function<void(Communicator&)> fn) {
  auto st = std::make_shared<State>();
  st->queued = Clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    OOMLAB_CHECK(!stop_, "CommQueue: submit after shutdown");
    items_.emplace_back(std::move(fn), st);
  }
  cv_.notify_all();
  return Work(st);
}

void CommQueue::loop() {
  CurrentDeviceGuard guard(comm_.device());
  for (;;) {
    std::function<void(Communicator&)> fn;
    std::shared_ptr<State> st;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;   // stopping with nothing left
      fn = std::move(items_.front().first);
      st = std::move(items_.front().second);
      items_.pop_front();
    }
    std::exception_ptr error;
    const auto started = Clock::now();
    if (!failure_.empty()) {
      error = std::make_exception_ptr(CommError(str_cat("rank ", comm_.rank(),
                                                        ": an earlier collective failed: ", failure_)));
    } else {
      try {
        fn(comm_);
      } catch (const std::exception& e) {
        failure_ = e.what();
        error = std::current_exception();
      } catch (...) {
        failure_ = "unknown exception";
        error = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lk(st->mu);
      st->started = started;
      st->finished = Clock::now();
      st->error = error;
      st->done = true;
    }
    st->cv.notify_all();
  }
}

}  // namespace oomlab
