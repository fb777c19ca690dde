// time_model.h — the planner's step-time model: a linear roofline over what a meta step
// counted (memory_report.h StepCost), its efficiencies fitted by least squares on the GPU
// records' measured step times (scripts/plan_calibration.py writes the fit, its data, its
// residuals and its leave-one-configuration-out error to reports/plan_calibration.json).
// Contracts:
//  * time_features(e, gpu, tf32): named terms, each the milliseconds the work would take at
//    the card's datasheet figure (gpu_table.h):
//      gemm.C, conv.C for C in fp32 | tf32 | 16: the kind's FLOPs over the card's dense peak
//        for the class they ran in (float32 on TF32 tensor cores where `tf32` allows it for
//        that kind and the card has them; 16: bfloat16 / float16 on their tensor cores);
//      conv_channels_last: the channels-last convolutions' FLOPs over the same peaks (they
//        count in conv.C too: this term is the layout's difference, one for every class);
//      attention: the fused attention kernels' FLOPs over the fp32 peak (CUDA cores);
//      bytes: the step's allocated bytes plus the optimizer's read and write of parameters,
//        gradients, master weights and state (2 x their bytes), over the memory bandwidth;
//      launches: the step's kernel launches at 1 us each.
//    A dtype whose class the card has no peak for is a ValueError naming the card.
//  * predict_ms = sum of coefficient x feature; a feature with a value but no calibration
//    pair that had it is named by unseen() (its coefficient is 0: the prediction omits it);
//    `precisions` lists the precisions the calibration's pairs ran (the planner names a
//    candidate's precision that no pair measured).
//  * load_time_model(path): a ValueError naming the file and the field for a missing file,
//    bad JSON, an unknown feature name, or a coefficient that is negative or not finite.
//    default_time_model(): the source tree's reports/plan_calibration.json, nullptr when
//    that file is absent (a build moved elsewhere); an invalid one still throws.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/plan/gpu_table.h"
#include "experiments/plan/memory_report.h"

namespace oomlab {

// --allow-tf32 none | cudnn | all: float32 GEMMs and / or convolutions on TF32 tensor cores
// (PyTorch's defaults: convolutions only).
struct Tf32Use {
  bool matmul = false, conv = true;
};
Tf32Use parse_tf32_use(const std::string& allow_tf32);

using TimeFeatures = std::map<std::string, double>;
const std::vector<std::string>& time_feature_names();
TimeFeatures time_features(const MemoryEstimate& e, const GpuSpec& gpu, Tf32Use tf32);

struct TimeModel {
  std::map<std::string, double> coefficients;   // per feature, >= 0
  std::map<std::string, int64_t> seen;          // calibration pairs where the feature was > 0
  std::vector<std::string> precisions;          // the precisions its pairs ran (fp32, tf32, bf16, ...)
  std::string source;                           // the file it came from
  nlohmann::json summary;                       // the file's leave-one-out summary
  double predict_ms(const TimeFeatures& f) const;
  std::vector<std::string> unseen(const TimeFeatures& f) const;
};

TimeModel load_time_model(const std::string& path);
const TimeModel* default_time_model();
// Where default_time_model() reads from (the Python package's copy of the calibration), set
// before its first call; later calls change nothing.
void set_time_model_path(const std::string& path);

}  // namespace oomlab
