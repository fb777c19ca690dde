// time_model.cpp — the step-time features and the calibrated model (time_model.h).
#include "experiments/plan/time_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include "engine/core/error.h"

namespace oomlab {
namespace {

// The class a matrix kernel of `kind` in `dtype` runs in on `gpu`, and that class's peak.
struct Class {
  const char* name;
  double tflops;
};

Class matrix_class(const std::string& kind, DType dtype, const GpuSpec& gpu, Tf32Use tf32) {
  if (dtype == DType::bf16 || dtype == DType::f16) {
    const double peak = gpu.peak_tflops(dtype, false);
    if (peak <= 0) throw ValueError(str_cat(gpu.name, " has no ", dtype_name(dtype), " tensor cores"));
    return {"16", peak};
  }
  OOMLAB_CHECK(dtype == DType::f32, "the time model covers float32 and 16-bit kernels, not ", dtype_name(dtype));
  const bool on_tf32 = kind == "gemm" ? tf32.matmul : kind != "attention" && tf32.conv;
  if (on_tf32 && gpu.tf32_tflops > 0) return {"tf32", gpu.tf32_tflops};
  OOMLAB_CHECK(gpu.fp32_tflops > 0, gpu.name, ": no float32 peak in the GPU table");
  return {"fp32", gpu.fp32_tflops};
}

double at_peak_ms(double flops, double tflops) { return flops / (tflops * 1e12) * 1e3; }

}  // namespace

Tf32Use parse_tf32_use(const std::string& allow_tf32) {
  if (allow_tf32 == "none") return {false, false};
  if (allow_tf32 == "cudnn") return {false, true};
  if (allow_tf32 == "all") return {true, true};
  throw ValueError(str_cat("--allow-tf32 must be none, cudnn or all, not '", allow_tf32, "'"));
}

const std::vector<std::string>& time_feature_names() {
  static const std::vector<std::string> names = {
      "gemm.fp32", "gemm.tf32", "gemm.16", "conv.fp32", "conv.tf32", "conv.16",
      "conv_channels_last", "attention", "bytes", "launches"};
  return names;
}

TimeFeatures time_features(const MemoryEstimate& e, const GpuSpec& gpu, Tf32Use tf32) {
  OOMLAB_CHECK(gpu.bandwidth_gbps > 0, gpu.name, ": no memory bandwidth in the GPU table");
  TimeFeatures f;
  for (const std::string& n : time_feature_names()) f[n] = 0;
  for (const auto& [kind, by_dtype] : e.step_cost.flops)
    for (const auto& [dtype, flops] : by_dtype) {
      if (kind == "attention") {
        f["attention"] += at_peak_ms(flops, matrix_class(kind, DType::f32, gpu, tf32).tflops);
        continue;
      }
      const bool channels_last = kind == "conv_channels_last";
      const Class c = matrix_class(channels_last ? "conv" : kind, parse_dtype(dtype), gpu, tf32);
      const double ms = at_peak_ms(flops, c.tflops);
      f[str_cat(channels_last ? "conv" : kind, ".", c.name)] += ms;
      if (channels_last) f["conv_channels_last"] += ms;
    }
  const double optimizer_bytes =
      2.0 * double(e.params_bytes + e.grads_bytes + e.master_weights_bytes + e.optimizer_state_bytes);
  f["bytes"] = (double(e.step_cost.allocated_bytes) + optimizer_bytes) / (gpu.bandwidth_gbps * 1e9) * 1e3;
  f["launches"] = double(e.step_cost.launches) * 1e-3;
  return f;
}

double TimeModel::predict_ms(const TimeFeatures& f) const {
  double ms = 0;
  for (const auto& [name, value] : f) {
    auto c = coefficients.find(name);
    if (c != coefficients.end()) ms += c->second * value;
  }
  return ms;
}

std::vector<std::string> TimeModel::unseen(const TimeFeatures& f) const {
  std::vector<std::string> out;
  for (const auto& [name, value] : f) {
    auto s = seen.find(name);
    if (value > 0 && (s == seen.end() || s->second == 0)) out.push_back(name);
  }
  return out;
}

TimeModel load_time_model(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ValueError(str_cat("time model ", path, ": cannot be read"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  const auto where = [&](const std::string& what) { return str_cat("time model ", path, ": ", what); };
  if (j.is_discarded() || !j.is_object()) throw ValueError(where("not a JSON object"));
  if (!j.contains("model") || !j["model"].is_object() || !j["model"].contains("coefficients") ||
      !j["model"]["coefficients"].is_object())
    throw ValueError(where("no model.coefficients object"));
  const std::vector<std::string>& names = time_feature_names();
  TimeModel m;
  m.source = path;
  for (const auto& [name, value] : j["model"]["coefficients"].items()) {
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw ValueError(where(str_cat("unknown feature '", name, "' in model.coefficients")));
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0)
      throw ValueError(where(str_cat("model.coefficients.", name, " must be a finite number >= 0")));
    m.coefficients[name] = value.get<double>();
  }
  if (j["model"].contains("seen") && j["model"]["seen"].is_object())
    for (const auto& [name, value] : j["model"]["seen"].items())
      if (value.is_number_integer()) m.seen[name] = value.get<int64_t>();
  if (j["model"].contains("precisions") && j["model"]["precisions"].is_array())
    for (const auto& v : j["model"]["precisions"])
      if (v.is_string()) m.precisions.push_back(v.get<std::string>());
  if (j.contains("summary")) m.summary = j["summary"];
  return m;
}

namespace {
std::string& time_model_path() {
  static std::string path = std::string(OOMLAB_SOURCE_DIR) + "/reports/plan_calibration.json";
  return path;
}
}  // namespace

void set_time_model_path(const std::string& path) { time_model_path() = path; }

const TimeModel* default_time_model() {
  static const std::optional<TimeModel> model = []() -> std::optional<TimeModel> {
    const std::string path = time_model_path();
    if (!std::filesystem::exists(path)) return std::nullopt;
    return load_time_model(path);
  }();
  return model ? &*model : nullptr;
}

}  // namespace oomlab
