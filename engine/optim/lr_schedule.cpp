// lr_schedule.cpp — schedule factories, the CLI parser, and LrScheduler (LambdaLR-style:
// base lrs captured per group at construction, lr = rule(base, step)).
#include "engine/optim/lr_schedule.h"

#include <charconv>
#include <cmath>
#include <map>
#include <numbers>

#include "engine/core/error.h"
#include "engine/io/json_count.h"
#include "engine/optim/optimizer.h"

namespace oomlab {

namespace {
std::string fmt(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

double cosine_between(double lr_max, double lr_min, double frac) {
  if (frac >= 1.0) return lr_min;
  return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + std::cos(std::numbers::pi * frac));
}
}  // namespace

LrSchedule constant_schedule() {
  return {"constant", [](double base, int64_t) { return base; }};
}

LrSchedule step_decay_schedule(int64_t step_size, double gamma) {
  OOMLAB_CHECK(step_size > 0, "step schedule: size must be > 0, got ", step_size);
  OOMLAB_CHECK(std::isfinite(gamma) && gamma > 0, "step schedule: gamma must be > 0, got ", gamma);
  return {"step:size=" + std::to_string(step_size) + ",gamma=" + fmt(gamma),
          [step_size, gamma](double base, int64_t t) {
            return base * std::pow(gamma, double(t / step_size));
          }};
}

LrSchedule cosine_schedule(int64_t t_max, double lr_min) {
  OOMLAB_CHECK(t_max > 0, "cosine schedule: t_max must be > 0, got ", t_max);
  OOMLAB_CHECK(std::isfinite(lr_min) && lr_min >= 0, "cosine schedule: lr_min must be >= 0, got ", lr_min);
  return {"cosine:t_max=" + std::to_string(t_max) + ",lr_min=" + fmt(lr_min),
          [t_max, lr_min](double base, int64_t t) {
            return cosine_between(base, lr_min, double(t) / double(t_max));
          }};
}

LrSchedule warmup_cosine_schedule(int64_t warmup, int64_t t_max, double lr_min) {
  OOMLAB_CHECK(warmup >= 0, "warmup-cosine schedule: warmup must be >= 0, got ", warmup);
  OOMLAB_CHECK(t_max > warmup, "warmup-cosine schedule: t_max (", t_max, ") must be > warmup (", warmup, ")");
  OOMLAB_CHECK(std::isfinite(lr_min) && lr_min >= 0, "warmup-cosine schedule: lr_min must be >= 0, got ",
               lr_min);
  return {"warmup-cosine:warmup=" + std::to_string(warmup) + ",t_max=" + std::to_string(t_max) +
              ",lr_min=" + fmt(lr_min),
          [warmup, t_max, lr_min](double base, int64_t t) {
            if (t < warmup) return double(t) / double(warmup) * base;
            return cosine_between(base, lr_min, double(t - warmup) / double(t_max - warmup));
          }};
}

LrSchedule lambda_warmup_cosine_schedule(int64_t warmup, int64_t t_max, double lr_max, double lr_min) {
  OOMLAB_CHECK(warmup > 0, "lambda-warmup-cosine schedule: warm_up_iter must be > 0, got ", warmup);
  OOMLAB_CHECK(t_max > warmup, "lambda-warmup-cosine schedule: t_max (", t_max, ") must be > warm_up_iter (", warmup,
               ")");
  OOMLAB_CHECK(std::isfinite(lr_max) && lr_max > 0, "lambda-warmup-cosine schedule: lr_max must be > 0, got ", lr_max);
  OOMLAB_CHECK(std::isfinite(lr_min) && lr_min >= 0 && lr_min <= lr_max,
               "lambda-warmup-cosine schedule: lr_min must be in [0, lr_max], got ", lr_min);
  return {"lambda-warmup-cosine:warm_up_iter=" + std::to_string(warmup) + ",t_max=" + std::to_string(t_max) +
              ",lr_max=" + fmt(lr_max) + ",lr_min=" + fmt(lr_min),
          [warmup, t_max, lr_max, lr_min](double base, int64_t t) {
            if (t < warmup) return base * double(t) / double(warmup);
            const double frac = double(t - warmup) / double(t_max - warmup);   // the formula's own cos past t_max
            return base * (lr_min + 0.5 * (lr_max - lr_min) * (1.0 + std::cos(std::numbers::pi * frac))) / lr_max;
          }};
}

namespace {
// "k1=v1,k2=v2" after a schedule's ':' (keys unique). ctx starts every error message.
std::map<std::string, std::string> parse_key_values(const std::string& rest, const std::string& ctx) {
  OOMLAB_CHECK(!rest.empty(), ctx, "nothing after ':' (expected key=value pairs)");
  std::map<std::string, std::string> kv;
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t comma = rest.find(',', pos);
    if (comma == std::string::npos) comma = rest.size();
    std::string part = rest.substr(pos, comma - pos);
    size_t eq = part.find('=');
    OOMLAB_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < part.size(), ctx, "bad part '", part,
                 "' (expected key=value)");
    std::string key = part.substr(0, eq);
    OOMLAB_CHECK(kv.emplace(key, part.substr(eq + 1)).second, ctx, "key '", key, "' given twice");
    pos = comma + 1;
  }
  return kv;
}
}  // namespace

LrSchedule parse_lr_schedule(const std::string& spec) {
  const std::string ctx = "lr schedule '" + spec + "': ";
  size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::map<std::string, std::string> kv =
      colon == std::string::npos ? std::map<std::string, std::string>{} : parse_key_values(spec.substr(colon + 1), ctx);
  auto allow = [&](std::initializer_list<const char*> keys) {
    for (const auto& [k, v] : kv) {
      bool ok = false;
      std::string expected;
      for (const char* a : keys) {
        ok = ok || k == a;
        expected += expected.empty() ? a : std::string(", ") + a;
      }
      OOMLAB_CHECK(ok, ctx, "unknown key '", k, "' for schedule '", kind, "' (expected ",
                   expected.empty() ? "no keys" : expected, ")");
    }
  };
  auto get_int = [&](const char* key, const int64_t* dflt) -> int64_t {
    auto it = kv.find(key);
    OOMLAB_CHECK(it != kv.end() || dflt, ctx, "missing key '", key, "'");
    if (it == kv.end()) return *dflt;
    int64_t v = 0;
    const std::string& s = it->second;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    OOMLAB_CHECK(r.ec == std::errc() && r.ptr == s.data() + s.size(), ctx, "value '", s, "' of '", key,
                 "' is not an integer");
    return v;
  };
  auto get_double = [&](const char* key, double dflt) -> double {
    auto it = kv.find(key);
    if (it == kv.end()) return dflt;
    double v = 0;
    const std::string& s = it->second;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    OOMLAB_CHECK(r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(v), ctx, "value '", s,
                 "' of '", key, "' is not a number");
    return v;
  };
  try {
    if (kind == "constant") {
      allow({});
      return constant_schedule();
    }
    if (kind == "step") {
      allow({"size", "gamma"});
      return step_decay_schedule(get_int("size", nullptr), get_double("gamma", 0.1));
    }
    if (kind == "cosine") {
      allow({"t_max", "lr_min"});
      return cosine_schedule(get_int("t_max", nullptr), get_double("lr_min", 0.0));
    }
    if (kind == "warmup-cosine") {
      allow({"warmup", "t_max", "lr_min"});
      return warmup_cosine_schedule(get_int("warmup", nullptr), get_int("t_max", nullptr),
                                    get_double("lr_min", 0.0));
    }
    if (kind == "lambda-warmup-cosine") {
      allow({"warm_up_iter", "t_max", "lr_max", "lr_min"});
      return lambda_warmup_cosine_schedule(get_int("warm_up_iter", nullptr), get_int("t_max", nullptr),
                                           get_double("lr_max", NAN), get_double("lr_min", 0.0));
    }
  } catch (const ValueError& e) {
    std::string msg = e.what();
    if (msg.rfind(ctx, 0) == 0) throw;
    throw ValueError(ctx + msg);
  }
  throw ValueError(ctx + "unknown kind '" + kind +
                   "' (expected constant, step, cosine, warmup-cosine or lambda-warmup-cosine)");
}

// ---------------------------------------------------------------- LrScheduler
LrScheduler::LrScheduler(Optimizer& opt, std::function<double(int64_t)> factor) : opt_(opt) {
  OOMLAB_CHECK(factor != nullptr, "LrScheduler: empty lr factor function");
  rule_ = [f = std::move(factor)](double base, int64_t t) { return base * f(t); };
  for (const ParamGroup& g : opt_.param_groups()) base_lrs_.push_back(g.lr);
  apply();
}

LrScheduler::LrScheduler(Optimizer& opt, LrSchedule schedule) : opt_(opt), rule_(std::move(schedule.lr)) {
  OOMLAB_CHECK(rule_ != nullptr, "LrScheduler: schedule '", schedule.spec, "' has no rule");
  for (const ParamGroup& g : opt_.param_groups()) base_lrs_.push_back(g.lr);
  apply();
}

void LrScheduler::apply() {
  auto& groups = opt_.param_groups();
  OOMLAB_CHECK(groups.size() == base_lrs_.size(), "LrScheduler: optimizer has ", groups.size(),
               " parameter groups, the scheduler was built for ", base_lrs_.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    double lr = rule_(base_lrs_[i], last_step_);
    OOMLAB_CHECK(std::isfinite(lr) && lr >= 0, "LrScheduler: schedule gave invalid lr ", lr, " at step ",
                 last_step_, " for group ", i);
    groups[i].lr = lr;
  }
}

void LrScheduler::step() {
  ++last_step_;
  apply();
}

std::vector<double> LrScheduler::last_lrs() const {
  std::vector<double> out;
  for (const ParamGroup& g : opt_.param_groups()) out.push_back(g.lr);
  return out;
}

nlohmann::json LrScheduler::state_json() const {
  return {{"last_step", last_step_}, {"base_lrs", base_lrs_}};
}

void LrScheduler::load_state(const nlohmann::json& j) {
  int64_t step = 0;
  std::vector<double> bases;
  try {
    step = json_count(j.at("last_step"), "LrScheduler load_state: last_step");
    bases = j.at("base_lrs").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(std::string("LrScheduler load_state: malformed state JSON: ") + e.what());
  }
  OOMLAB_CHECK(bases.size() == base_lrs_.size(), "LrScheduler load_state: state has ", bases.size(),
               " base lrs, the optimizer has ", base_lrs_.size(), " parameter groups");
  base_lrs_ = std::move(bases);
  last_step_ = step;
  apply();
}

}  // namespace oomlab
