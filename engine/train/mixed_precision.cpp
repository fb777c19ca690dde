// mixed_precision.cpp — GradScaler and --loss-scale parsing (mixed_precision.h).
#include "engine/train/mixed_precision.h"

#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/io/json_count.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/elementwise.h"
#include "kernels/optim.h"

namespace oomlab {

std::string LossScaleSpec::str() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::dynamic: return "dynamic";
    case Kind::fixed: return str_cat("static:", scale);
  }
  return "?";
}

LossScaleSpec parse_loss_scale(const std::string& text, bool fp16) {
  LossScaleSpec s;
  if (text == "auto") {
    s.kind = fp16 ? LossScaleSpec::Kind::dynamic : LossScaleSpec::Kind::none;
  } else if (text == "dynamic") {
    s.kind = LossScaleSpec::Kind::dynamic;
  } else if (text == "none") {
    s.kind = LossScaleSpec::Kind::none;
  } else if (text.rfind("static:", 0) == 0) {
    const std::string v = text.substr(7);
    char* end = nullptr;
    const double x = v.empty() ? 0.0 : std::strtod(v.c_str(), &end);
    OOMLAB_CHECK(!v.empty() && end && *end == '\0' && std::isfinite(x) && x > 0 && x <= 3.0e38,
                 "loss scale '", text, "': the scale must be a positive finite number (e.g. static:1024)");
    s.kind = LossScaleSpec::Kind::fixed;
    s.scale = x;
  } else {
    throw ValueError(str_cat("unknown loss scale '", text, "' (expected auto, dynamic, static:S or none)"));
  }
  return s;
}

GradScaler::GradScaler(LossScaleSpec spec, int64_t growth_interval)
    : spec_(spec), growth_interval_(growth_interval), scale_(float(spec.scale)), used_scale_(float(spec.scale)) {
  OOMLAB_CHECK(spec.kind != LossScaleSpec::Kind::none, "GradScaler: loss scaling is off (loss scale none)");
  OOMLAB_CHECK(growth_interval >= 1, "GradScaler: growth_interval must be >= 1");
}

Tensor GradScaler::backward_root(const Tensor& loss, int64_t, int64_t) {
  used_scale_ = scale_;
  MemoryContext ctx("amp", "scale");
  return oomlab::scale(loss, double(scale_));
}

bool GradScaler::before_optimizer_step(Optimizer& opt) {
  found_inf_ = false;
  Tensor flag;
  {
    NoGradGuard ng;
    MemoryContext ctx("amp", "unscale");
    const double inv = double(1.0f / scale_);   // float32 reciprocal, as torch's _scale.double().reciprocal().float()
    for (ParamGroup& g : opt.param_groups())
      for (auto& [name, p] : g.params) {
        Tensor grad = p.grad();
        if (!grad.defined()) continue;
        if (!flag.defined()) flag = Tensor::zeros({1}, DType::f32, grad.device());
        OOMLAB_CHECK_T(ShapeError, grad.is_dense(), "GradScaler: the gradient of ", name, " is not dense");
        grad.bump_version();
        amp_unscale_kernels().launch(
            grad.device(), grad.dtype(),
            UnscaleArgs{grad.raw_data(), flag.device().is_meta() ? nullptr : flag.data<float>(), inv, grad.numel()});
      }
  }
  if (reduce_found_inf_) {   // every rank takes part, whether or not it had gradients
    if (!flag.defined()) flag = Tensor::zeros({1}, DType::f32, opt.param_groups().at(0).params.at(0).second.device());
    reduce_found_inf_(flag);
  }
  if (flag.defined() && !flag.device().is_meta()) found_inf_ = flag.item() != 0.0;
  return !found_inf_;
}

void GradScaler::after_optimizer_step(Optimizer&, bool) {
  if (spec_.kind != LossScaleSpec::Kind::dynamic) return;
  if (found_inf_) {
    scale_ = scale_ * 0.5f;
    tracker_ = 0;
  } else if (++tracker_ == growth_interval_) {
    scale_ = scale_ * 2.0f;
    tracker_ = 0;
  }
}

nlohmann::json GradScaler::state_json() const {
  return {{"kind", spec_.str()}, {"scale", scale_}, {"growth_tracker", tracker_}};
}

void GradScaler::load_state(const nlohmann::json& s) {
  OOMLAB_CHECK(s.is_object() && s.contains("scale") && s["scale"].is_number() && s.contains("growth_tracker") &&
                   s["growth_tracker"].is_number_integer(),
               "grad_scaler state: expected {\"scale\": number, \"growth_tracker\": integer}");
  const double sc = s["scale"].get<double>();
  const int64_t tr = json_count(s["growth_tracker"], "grad_scaler state: growth_tracker");
  OOMLAB_CHECK(std::isfinite(sc) && sc > 0 && tr < growth_interval_, "grad_scaler state: scale ", sc,
               " / growth_tracker ", tr, " out of range");
  scale_ = float(sc);
  tracker_ = tr;
}

}  // namespace oomlab
