// sgd.cpp — torch.optim.SGD (momentum, dampening, nesterov, L2 weight decay added to the
// grad) as fused per-parameter kernels, launched per group through the foreach table. State: "momentum_buffer", created
// for a parameter's first update (Tensor::empty, filled by the kernel with a copy of the weight-decayed grad, exactly
// like PyTorch's clone) and only when momentum != 0.
#include "engine/core/error.h"
#include "engine/optim/optimizer.h"
#include "kernels/optim.h"

namespace oomlab {

namespace {
class Sgd final : public Optimizer {
 public:
  explicit Sgd(std::vector<ParamGroup> groups) : Optimizer("sgd", std::move(groups)) {
    for (size_t i = 0; i < param_groups().size(); ++i) validate_group(param_groups()[i], i);
  }

 protected:
  std::vector<std::string> state_kinds() const override { return {"momentum_buffer"}; }
  std::vector<std::string> required_state_kinds(const ParamGroup& g) const override {
    if (g.momentum != 0) return {"momentum_buffer"};
    return {};
  }
  void validate_group(const ParamGroup& g, size_t i) const override {
    Optimizer::validate_group(g, i);
    OOMLAB_CHECK(g.momentum >= 0, "sgd: invalid momentum ", g.momentum, " in group ", i);
    OOMLAB_CHECK(!g.nesterov || (g.momentum > 0 && g.dampening == 0), "sgd: nesterov momentum requires a "
                 "momentum > 0 and zero dampening (group ", i, ")");
  }
  void init_state(const ParamGroup& g, const Tensor& p, ParamState& s) override {
    if (g.momentum != 0 && !s.tensors[0].defined()) {
      s.tensors[0] = empty_like(p);   // laid out as p (the update walks memory order)
      s.fresh = true;   // the kernel fills it with the first (weight-decayed) grad
    }
  }
  void update_group(const ParamGroup& g, const std::vector<UpdateItem>& items) override {
    std::vector<SgdArgs> args;
    for (const UpdateItem& it : items) {
      Tensor& buf = it.state->tensors[0];
      args.push_back({it.param->raw_data(), it.grad->raw_data(), g.momentum != 0 ? buf.raw_data() : nullptr, g.lr,
                      g.momentum, g.dampening, g.weight_decay, g.nesterov, it.state->fresh, it.param->numel()});
    }
    const Tensor& p0 = *items.front().param;
    sgd_foreach_kernels().launch(p0.device(), p0.dtype(),
                                 SgdForeachArgs{args.data(), int64_t(args.size()), p0.dtype()});
    if (g.momentum != 0)
      for (const UpdateItem& it : items) it.state->tensors[0].bump_version();
  }
};
}  // namespace

std::unique_ptr<Optimizer> make_sgd(std::vector<ParamGroup> groups) {
  return std::make_unique<Sgd>(std::move(groups));
}

}  // namespace oomlab
