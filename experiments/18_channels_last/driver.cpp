// driver.cpp — experiment 18_channels_last (issue 31): summary and verdict (registered with
// the runner). Points: `train` on meta of ResNet-50 (b64, bf16 autocast), ResNet-18 (b64)
// and VGG16 (b32, its convolutions' biases), 2 steps each, in NCHW and with
// --channels-last; `estimate --device-memory 24GiB` of the same three, both layouts (the
// largest batch whose step fits the card).
// Summary: per model and layout, the allocated and reserved peaks of the training run and
// the largest batch on the card.
// Verdict (verdict_rule.h; exact figures): the channels_last run's allocated peak within
// source.rounding_bytes of NCHW's for every model (a layout, not a copy: what differs is the
// allocator's block rounding: a large block is not split when under 1 MiB would remain, as
// PyTorch's kSmallSize, so two requests may each hold up to 1 MiB more, and the converted
// weights take other blocks of the cache); the largest batch on the card at least NCHW's,
// for every model; the speed claim (source.speedup_claim) pending a GPU.
#include <cmath>
#include <map>

#include "experiments/runner/driver_util.h"
#include "experiments/runner/registry.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

json summarize_18(const json& spec, json& points) {
  std::map<std::string, json> rows;   // model -> row
  std::vector<std::string> order;
  for (const json* p : ok_points(points, "train")) {
    const std::string model = (*p)["axes"]["model"], mode = (*p)["axes"]["mode"];
    if (!rows.count(model)) { order.push_back(model); rows[model] = {{"model", model}}; }
    const json& s = (*p)["memory"]["devices"]["meta:0"];
    rows[model][mode] = {{"peak_bytes", s["allocated_bytes.all.peak"]},
                         {"reserved_bytes", s["reserved_bytes.all.peak"]}};
  }
  for (const json* p : ok_points(points, "estimate")) {
    const std::string model = (*p)["axes"]["model"], mode = (*p)["axes"]["mode"];
    if (rows.count(model) && rows[model].contains(mode))
      rows[model][mode]["largest_batch"] = (*p)["metrics"]["largest_batch"]["batch"];
  }
  json out = json::array();
  for (const std::string& m : order) out.push_back(rows[m]);
  return {{"models", out}, {"card", spec["source"]["card_label"]}, {"profile", spec.value("profile", "")}};
}

std::string gib(double b) { return str_cat(std::round(b / 1073741824.0 * 1000) / 1000, " GiB"); }

json verdict_18(const json& spec, const json& s) {
  const double rounding = spec["source"]["rounding_bytes"].get<double>();
  const double speedup = spec["source"]["speedup_claim"].get<double>();
  bool same_peak = true, same_fit = true;
  std::string figures, batches;
  for (const json& r : s["models"]) {
    const json &n = r["nchw"], &c = r["channels_last"];
    const double diff = c["peak_bytes"].get<double>() - n["peak_bytes"].get<double>();
    same_peak = same_peak && std::fabs(diff) <= rounding;
    const int64_t bn = n["largest_batch"].get<int64_t>(), bc = c["largest_batch"].get<int64_t>();
    same_fit = same_fit && bc >= bn;
    const std::string model = r["model"].get<std::string>();
    figures += str_cat(figures.empty() ? "" : "; ", model, ": ", gib(n["peak_bytes"].get<double>()), " NCHW, ",
                       gib(c["peak_bytes"].get<double>()), " channels_last (", diff >= 0 ? "+" : "",
                       std::llround(diff / 1024.0), " KiB)");
    batches += str_cat(
        batches.empty() ? "" : ", ", model, " ", bn, " NCHW / ", bc, " channels_last",
        bc < bn ? str_cat(" (", bn - bc, " fewer, ", std::round(1000.0 * double(bn - bc) / double(bn)) / 10, "%)")
                : "");
  }
  const std::vector<Judged> parts = {judge_exact(same_peak), judge_exact(same_fit), Judged::pending_gpu};
  const std::string reason = str_cat(
      "Exact meta-device figures of 2-step runs, the batch laid out on the device before each step (its NCHW copy "
      "freed, as x.to(device, memory_format=torch.channels_last)). Allocated peaks ",
      same_peak ? "within" : "beyond", " the ", std::llround(rounding / 1048576.0),
      " MiB of the allocator's block rounding of NCHW's: ", figures,
      " (the converted weights take other blocks of the cache, so later requests split other blocks). "
      "The largest batch on a ", s["card"].get<std::string>(), " card: ", batches, ": ",
      same_fit ? "the same batch fits" :
                 "a slightly smaller batch fits channels_last for some model: at the card's edge a step that meets the "
                 "limit releases cached segments and retries, and which blocks it can release depends on where the "
                 "converted weights sit in the cache",
      ". The speed claim (a ", std::llround(speedup * 100),
      "% faster ResNet-50 step with AMP on tensor cores) waits for the GPU kit's r50_bf16_cl and r50_tf32_cl rows "
      "beside their NCHW defaults and PyTorch's channels_last twins.");
  return {{"status", verdict_status(parts)}, {"reason", reason}};
}

}  // namespace

OOMLAB_REGISTER_EXPERIMENT({"18_channels_last", summarize_18, verdict_18, {},
                            {{"source.rounding_bytes", "positive"}, {"source.speedup_claim", "positive"},
                             {"source.card_label", "string"}}});

}  // namespace oomlab
