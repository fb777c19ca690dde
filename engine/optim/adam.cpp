// adam.cpp — torch.optim.Adam (L2 weight decay added to the grad) and torch.optim.AdamW
// (decoupled: param *= 1 - lr * weight_decay), bias-corrected, amsgrad off: fused
// per-parameter kernels, launched per group through the foreach table. State: "exp_avg"
// and "exp_avg_sq", zero-filled tensors allocated at a parameter's first update (in that
// order, like PyTorch), plus a per-parameter step count kept on the host (in state_json()).
#include <cmath>

#include "engine/core/error.h"
#include "engine/optim/optimizer.h"
#include "kernels/optim.h"

namespace oomlab {

namespace {
class Adam final : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, bool decoupled)
      : Optimizer(decoupled ? "adamw" : "adam", std::move(groups)), decoupled_(decoupled) {
    for (size_t i = 0; i < param_groups().size(); ++i) validate_group(param_groups()[i], i);
  }

 protected:
  std::vector<std::string> state_kinds() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> required_state_kinds(const ParamGroup&) const override { return state_kinds(); }
  void validate_group(const ParamGroup& g, size_t i) const override {
    Optimizer::validate_group(g, i);
    OOMLAB_CHECK(std::isfinite(g.eps) && g.eps >= 0, name(), ": invalid eps ", g.eps, " in group ", i);
    OOMLAB_CHECK(g.beta1 >= 0 && g.beta1 < 1, name(), ": invalid beta1 ", g.beta1, " in group ", i,
                 " (need 0 <= beta1 < 1)");
    OOMLAB_CHECK(g.beta2 >= 0 && g.beta2 < 1, name(), ": invalid beta2 ", g.beta2, " in group ", i,
                 " (need 0 <= beta2 < 1)");
  }
  void init_state(const ParamGroup&, const Tensor& p, ParamState& s) override {
    if (!s.tensors[0].defined()) s.tensors[0] = zeros_like(p);
    if (!s.tensors[1].defined()) s.tensors[1] = zeros_like(p);
  }
  void update_group(const ParamGroup& g, const std::vector<UpdateItem>& items) override {
    std::vector<AdamArgs> args;
    for (const UpdateItem& it : items) {
      const double t = double(it.state->step);
      const double bias_correction1 = 1.0 - std::pow(g.beta1, t);
      const double bias_correction2 = 1.0 - std::pow(g.beta2, t);
      args.push_back({it.param->raw_data(), it.grad->raw_data(), it.state->tensors[0].raw_data(),
                      it.state->tensors[1].raw_data(), g.lr, g.beta1, g.beta2, g.eps, g.weight_decay,
                      g.lr / bias_correction1, std::sqrt(bias_correction2), decoupled_, it.param->numel()});
    }
    const Tensor& p0 = *items.front().param;
    adam_foreach_kernels().launch(p0.device(), p0.dtype(),
                                  AdamForeachArgs{args.data(), int64_t(args.size()), p0.dtype()});
    for (const UpdateItem& it : items) {
      it.state->tensors[0].bump_version();
      it.state->tensors[1].bump_version();
    }
  }

 private:
  bool decoupled_;
};
}  // namespace

std::unique_ptr<Optimizer> make_adam(std::vector<ParamGroup> groups, bool decoupled_weight_decay) {
  return std::make_unique<Adam>(std::move(groups), decoupled_weight_decay);
}

}  // namespace oomlab
