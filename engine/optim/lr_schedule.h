// lr_schedule.h — learning-rate schedules (torch.optim.lr_scheduler.LambdaLR semantics).
// Contracts:
//  * LrScheduler records each group's lr at construction as its base lr, then sets
//    lr = rule(base, 0); every step() advances last_step by one and sets
//    lr = rule(base, last_step). Call it after optimizer.step(), as in PyTorch.
//  * Schedules (base = a group's base lr, t = step):
//      constant                  base
//      step:size=S,gamma=G       base * G^floor(t / S)                       (StepLR)
//      cosine:t_max=T,lr_min=m   m + (base - m) * (1 + cos(pi * t / T)) / 2  (CosineAnnealingLR)
//      warmup-cosine:warmup=W,t_max=T,lr_min=m
//                                t < W: t / W * base; else
//                                m + (base - m) * (1 + cos(pi * (t - W) / (T - W))) / 2
//      lambda-warmup-cosine:warm_up_iter=W,t_max=T,lr_max=M,lr_min=m
//                                base * factor(t), the LambdaLR lambda of the source (T10):
//                                t < W: t / W; else (m + (M - m) * (1 + cos(pi * (t - W) / (T - W))) / 2) / M
//                                (relative: a group at base b ends at b * m / M, where warmup-cosine's
//                                absolute lr_min ends every group at m; past T the cos rises again)
//    Cosine schedules hold lr_min for t > t_max (PyTorch's closed form would rise again).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace oomlab {

class Optimizer;

struct LrSchedule {
  std::string spec;                                   // canonical string, e.g. "step:size=30,gamma=0.1"
  std::function<double(double base_lr, int64_t step)> lr;
};

LrSchedule constant_schedule();
LrSchedule step_decay_schedule(int64_t step_size, double gamma = 0.1);
LrSchedule cosine_schedule(int64_t t_max, double lr_min = 0.0);
LrSchedule warmup_cosine_schedule(int64_t warmup, int64_t t_max, double lr_min = 0.0);
LrSchedule lambda_warmup_cosine_schedule(int64_t warmup, int64_t t_max, double lr_max, double lr_min);
// Parses the CLI forms listed above (keys in any order; gamma defaults to 0.1, lr_min to
// 0). Throws ValueError naming the bad part (kind, key, or value).
LrSchedule parse_lr_schedule(const std::string& spec);

class LrScheduler {
 public:
  // LambdaLR: lr = base_lr * factor(step).
  LrScheduler(Optimizer& opt, std::function<double(int64_t step)> factor);
  LrScheduler(Optimizer& opt, LrSchedule schedule);
  void step();
  int64_t last_step() const { return last_step_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  std::vector<double> last_lrs() const;               // current lr of each group
  // Checkpoints: {"last_step", "base_lrs"}; load_state re-applies the lrs for last_step.
  nlohmann::json state_json() const;
  void load_state(const nlohmann::json& j);

 private:
  void apply();
  Optimizer& opt_;
  std::function<double(double, int64_t)> rule_;
  std::vector<double> base_lrs_;
  int64_t last_step_ = 0;
};

}  // namespace oomlab
