// grad_mode.h — thread-local grad mode (torch.no_grad equivalent).
#pragma once

namespace oomlab {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Sets grad mode for a scope and restores it (torch.set_grad_enabled as a context manager);
// checkpoint recomputation runs with grad on inside the engine's no-grad backward.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;
 private:
  bool prev_;
};

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
 private:
  bool prev_;
};

}  // namespace oomlab
