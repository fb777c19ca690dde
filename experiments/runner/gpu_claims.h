// gpu_claims.h — the summary and verdict of an experiment's gpu profile, declared in its
// experiment.json rather than written in its driver: the driver judges the CPU / meta
// profiles (quick, full), these judge the claims about a GPU from the gpu profile's points.
//   "gpu_claims": [
//     {"name": "bf16 autocast speeds a ResNet-50 step up",
//      "metric": "step_time",                          what is compared (below)
//      "other": {"block": "r50", "amp": "bf16"},        the points measured ...
//      "base":  {"block": "r50", "amp": "off"},         ... against these (omit: "other" alone)
//      "below": 1.0}                                    or "above": X, or "within": [lo, hi]
//   ]
// A selector names a block and, optionally, axis values ("round" excluded): it matches the
// points of that block whose recorded axes have those values (a labelled value by its label);
// "device_index": N makes a peak metric that device's (the point's devices in name order).
// Metrics: "step_time" (the point's median step time; with a base, the ratio other/base
// per alternating pair: block "rounds", the verdict rule's paired ratio, >= 5 pairs);
// "peak_allocated" (the largest allocated_bytes.all.peak over the point's devices) and
// "peak_reserved"; "metrics.A.B" (a number in the point's metrics); "ok" (1 when every
// matched point ended ok). These are exact: their interval has width 0, and with a base the
// compared value is other / base of the first matched points.
// Judgement (verdict_rule.h): the claim holds / fails / is inside the noise by the interval
// against the bound. A run on a device other than cuda (the gpu profile on meta: a dry run
// of the profile) measures no GPU: every claim is "pending GPU" and says so, its values
// still shown.
// Contracts: check_gpu_claims refuses (ValueError naming the spec and the claim) a claim
// with an unknown key or metric, a selector naming a block the gpu profile lacks, or no
// bound; a point that failed is left out of its claim and named in the summary.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/runner/matrix.h"

namespace oomlab {

// Checks spec["gpu_claims"] against the gpu profile's points.
void check_gpu_claims(const nlohmann::json& spec, const std::vector<PointSpec>& points, const std::string& where);

// {"device", "claims": [{name, metric, bound, estimate, lo, hi, n, enough, judged, text,
// failed_points}]} from the gpu profile's points (the results' point records).
nlohmann::json gpu_claims_summary(const nlohmann::json& spec, const nlohmann::json& points, const std::string& device);

// {"status", "reason"} from gpu_claims_summary's summary.
nlohmann::json gpu_claims_verdict(const nlohmann::json& summary);

}  // namespace oomlab
