// driver.cpp — experiment 09_practical_tricks: one row per trick of the source's T9 list,
// each with the claim, our numbers and a verdict computed from them (registered with the
// runner). Points (matrix blocks, by name):
//   batch    estimate resnet18 at batches 8..64            -> (1) activation bytes per sample
//   tricks   trick --name graph-history | del-intermediates | inplace-relu | empty-cache
//                                                          -> (2) (3) (4) (6)
//   no_grad  summary resnet18                              -> (5) forward-only vs training forward peak
//   oom      train bert-mini on meta, capped, raise | skip  -> (7)
//   half     estimate resnet20 fp32 | --half               -> (9) activations and peak
//   workers  train mlp on Fashion-MNIST, --workers 0 | 2   -> (10) samples per second
//   seq      estimate bert-mini at seq 64..512             -> (11) fit c0 + c1*s + c2*s^2
//   slim     estimate bert-mini 4x256 / 2x256 / 4x128 / 2x128 (layers x hidden) -> (12)
// (8) cuDNN autotuning needs a GPU: its row stays "pending" until a CUDA run fills it.
// Summary: {"rows": [{id, claim, ours (numbers), status, reason}]}; verdict: how many rows
// are confirmed / depends / refuted / pending.
#include <cmath>
#include <cstdio>
#include <map>

#include "experiments/runner/driver_util.h"
#include "experiments/runner/registry.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

std::string block_of(const json& p) {
  const std::string n = p.value("name", "");
  return n.substr(0, n.find(' '));
}

std::string axis(const json& p, const std::string& name) {
  if (!p.contains("axes") || !p["axes"].contains(name)) return "";
  const json& v = p["axes"][name];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string mib(double bytes) { return str_cat(std::round(bytes / 1048576.0 * 10) / 10, " MiB"); }
std::string times(double r) { return str_cat(std::round(r * 100) / 100, "x"); }

// 3x3 linear solve (Cramer) for the quadratic fit.
bool solve3(double a[3][3], const double b[3], double x[3]) {
  auto det = [](double m[3][3]) {
    return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
           m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  };
  const double d = det(a);
  if (std::abs(d) < 1e-300) return false;
  for (int c = 0; c < 3; ++c) {
    double m[3][3];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) m[i][j] = j == c ? b[i] : a[i][j];
    x[c] = det(m) / d;
  }
  return true;
}

json row(int id, const json& spec, const std::string& ours, const std::string& status, const std::string& reason) {
  return {{"id", id}, {"claim", spec["source"]["tricks"][size_t(id - 1)]}, {"ours", ours}, {"status", status},
          {"reason", reason}};
}

// The points by block (ok ones), by "block axis" (any outcome), and the tricks' metrics.
struct Points {
  const json& spec;
  std::map<std::string, std::vector<const json*>> by;
  std::map<std::string, const json*> any;
  std::map<std::string, const json*> trick;
  json missing(int id, const char* what) const {
    return row(id, spec, "", "pending", str_cat("the ", what, " points did not run ok"));
  }
  const std::vector<const json*>& ok(const std::string& block) const {
    static const std::vector<const json*> none;
    auto it = by.find(block);
    return it == by.end() ? none : it->second;
  }
  const json* trick_metrics(const std::string& name) const {
    auto it = trick.find(name);
    return it == trick.end() ? nullptr : it->second;
  }
};

const json& variant(const json& t, const std::string& name) {
  for (const json& v : t["variants"])
    if (v["variant"] == name) return v;
  throw ValueError(str_cat("experiment 09: trick ", t["trick"].dump(), " has no variant '", name, "'"));
}

// (1) batch: activation bytes against batch, least-squares line a + b * batch.
json row_batch(const Points& P) {
  if (P.ok("batch").size() < 3) return P.missing(1, "batch");
  const double tol = P.spec["source"]["linear_tolerance"].get<double>();
  std::vector<std::pair<double, double>> xy;
  std::string ours;
  for (const json* p : P.ok("batch")) {
    xy.push_back({(*p)["metrics"]["batch"].get<double>(), (*p)["metrics"]["exact"]["activation_bytes"].get<double>()});
    ours += str_cat(ours.empty() ? "" : ", ", "batch ", xy.back().first, ": ", mib(xy.back().second));
  }
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = double(xy.size());
  for (auto [x, y] : xy) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx), a = (sy - b * sx) / n;
  double worst = 0;
  for (auto [x, y] : xy) worst = std::max(worst, std::abs(a + b * x - y) / y);
  return row(1, P.spec, str_cat("resnet18 3x224x224 activations: ", ours), worst <= tol ? "confirmed" : "refuted",
             str_cat("a line fits within ", std::round(worst * 1e4) / 100, "% (tolerance ", tol * 100, "%): ", mib(b),
                     " per sample, ", mib(a), " independent of the batch"));
}

json row_graph_history(const Points& P) {   // (2)
  const json* t = P.trick_metrics("graph-history");
  if (!t) return P.missing(2, "graph-history");
  const double tr = variant(*t, "train: total_loss += loss")["growth_bytes_per_iteration"].get<double>();
  const double de =
      variant(*t, "train: total_loss += loss.detach() (or .item())")["growth_bytes_per_iteration"].get<double>();
  const double ev = variant(*t, "eval without no_grad: total_loss += loss")["growth_bytes_per_iteration"].get<double>();
  const std::string status = tr > 0 ? "confirmed" : ev > 0 ? "depends" : "refuted";
  return row(2, P.spec,
             str_cat("mlp, batch ", (*t)["batch"], ", device memory growth per iteration: training loop ", tr,
                     " B (detached: ", de, " B), evaluation loop without no_grad ", ev, " B"),
             status,
             tr > 0 ? "the kept history holds device memory in training"
                    : "backward frees each step's saved activations, so in a training loop the kept history "
                      "holds only graph nodes (host memory); without a backward (evaluation without no_grad) "
                      "every iteration's activations stay");
}

json row_del_intermediates(const Points& P) {   // (3)
  const json* t = P.trick_metrics("del-intermediates");
  if (!t) return P.missing(3, "del-intermediates");
  auto peak = [&](const char* v) { return variant(*t, v)["forward_peak_bytes"].get<double>(); };
  const double inf = peak("inference (no_grad), every intermediate named") / peak("inference (no_grad), x = layer(x)");
  const double trn = peak("training (grad), every intermediate named") / peak("training (grad), x = layer(x)");
  return row(3, P.spec,
             str_cat("conv stack, forward peak keeping every intermediate vs x = layer(x): inference ", times(inf),
                     ", training ", times(trn)),
             inf >= 2 && trn < inf && trn <= 1.5 ? "confirmed" : "refuted",
             str_cat("under no_grad the named intermediates are the whole cost (", times(inf),
                     "); with grad autograd keeps most of them anyway (", times(trn), ")"));
}

json row_inplace_relu(const Points& P) {   // (4)
  const json* t = P.trick_metrics("inplace-relu");
  if (!t) return P.missing(4, "inplace-relu");
  const json &o = variant(*t, "ReLU()"), &i = variant(*t, "ReLU(inplace=True)");
  const double one = (*t)["relu_output_bytes"].get<double>(), relus = (*t)["relus"].get<double>();
  const double kept = o["activation_bytes"].get<double>() - i["activation_bytes"].get<double>();
  const double peak = o["forward_peak_bytes"].get<double>() - i["forward_peak_bytes"].get<double>();
  const bool per_relu = kept >= 0.9 * relus * one;
  return row(4, P.spec,
             str_cat(relus, " conv-BN-ReLU blocks: kept for backward ", mib(kept), " less, forward peak ", mib(peak),
                     " less (one ReLU output = ", mib(one), ")"),
             per_relu ? "confirmed" : peak >= 0.9 * one ? "depends" : "refuted",
             per_relu ? "one activation saved per ReLU"
                      : "after BatchNorm (which saves its input) the out-of-place ReLU's input dies right "
                        "after the call: in place saves one ReLU output at the forward's peak, not one per "
                        "ReLU in what backward keeps");
}

json row_no_grad(const Points& P) {   // (5)
  if (P.ok("no_grad").empty()) return P.missing(5, "no_grad");
  const json& tot = (*P.ok("no_grad")[0])["metrics"]["totals"];
  const double fwd = tot["forward_only_peak_bytes"].get<double>(),
               trn = tot["training_forward_peak_bytes"].get<double>();
  return row(5, P.spec, str_cat("resnet18 batch 32 forward peak: no_grad ", mib(fwd), ", with grad ", mib(trn)),
             trn / fwd >= 1.5 ? "confirmed" : "refuted",
             str_cat("a forward with grad needs ", times(trn / fwd), " the no_grad one"));
}

json row_empty_cache(const Points& P) {   // (6)
  const json* t = P.trick_metrics("empty-cache");
  if (!t) return P.missing(6, "empty-cache");
  const json &b = (*t)["before_empty_cache"], &a = (*t)["after_empty_cache"], &n = (*t)["next_step"];
  const bool ok = a["allocated_bytes"] == b["allocated_bytes"] &&
                  a["reserved_bytes"].get<int64_t>() < b["reserved_bytes"].get<int64_t>() &&
                  n["reserved_peak_bytes"] == b["reserved_bytes"];
  return row(
      6, P.spec,
      str_cat("reserved ", mib(b["reserved_bytes"].get<double>()), " -> ", mib(a["reserved_bytes"].get<double>()),
              ", allocated ", mib(b["allocated_bytes"].get<double>()), " -> ", mib(a["allocated_bytes"].get<double>()),
              "; the next step reserves ", mib(n["reserved_peak_bytes"].get<double>()), " again with ",
              n["device_allocations"], " device allocations"),
      ok ? "confirmed" : "refuted",
      ok ? "reserved memory goes back, allocated does not move, and the next step takes the same "
           "peak back (at the price of new device allocations)"
         : "not as claimed");
}

json row_oom_skip(const Points& P) {   // (7)
  const json* raise = P.any.count("oom raise") ? P.any.at("oom raise") : nullptr;
  const json* skip = P.any.count("oom skip") ? P.any.at("oom skip") : nullptr;
  if (!raise || !skip || (*skip)["outcome"]["status"] != "ok") return P.missing(7, "oom");
  const json& oom = (*skip)["metrics"]["oom"];
  const int64_t batch = point_option(*skip, "batch").get<int64_t>();
  const bool ok = (*raise)["outcome"]["status"] == "oom" && oom["skipped_batches"].get<int64_t>() > 0 &&
                  oom["samples_lost"].get<int64_t>() == batch * oom["skipped_batches"].get<int64_t>();
  return row(7, P.spec,
             str_cat("bert-mini on a 512 MiB meta device: raise ", (*raise)["outcome"]["status"].get<std::string>(),
                     "; skip finished ", (*skip)["metrics"]["steps"], " steps, skipped ", oom["skipped_batches"],
                     " batches (", oom["samples_lost"], " samples, ",
                     std::round(oom["samples_lost_pct"].get<double>() * 100) / 100, "%)"),
             ok ? "confirmed" : "refuted", "see experiment 08 for split, time and accuracy");
}

json row_half(const Points& P) {   // (9)
  if (P.ok("half").size() != 2) return P.missing(9, "half");
  const json *f = nullptr, *h = nullptr;
  for (const json* p : P.ok("half")) (axis(*p, "precision") == "half" ? h : f) = p;
  if (!f || !h) return P.missing(9, "half");
  const json &ef = (*f)["metrics"]["exact"], &eh = (*h)["metrics"]["exact"];
  const double act = eh["activation_bytes"].get<double>() / ef["activation_bytes"].get<double>();
  const double peak = eh["peak_allocated_bytes"].get<double>() / ef["peak_allocated_bytes"].get<double>();
  return row(9, P.spec,
             str_cat("resnet20 batch 128 (BN in fp32): activations ", times(act), ", peak ", times(peak),
                     " of fp32 (speed: pending a GPU)"),
             act <= 0.6 ? "confirmed" : "refuted",
             str_cat("model.half() with BatchNorm kept in float32 runs and stores activations in ", times(act),
                     " the fp32 bytes (experiment 05 has accuracy and master weights)"));
}

// (10) workers: samples/s with 2 workers over 0, paired over the alternating runs (the "run"
// axis, outermost) and judged against source.workers_min_speedup (verdict_rule.h).
json row_workers(const Points& P) {
  std::map<std::string, std::vector<double>> ips;
  for (const json* p : P.ok("workers"))
    ips[axis(*p, "workers")].push_back((*p)["metrics"]["images_per_s"].get<double>());
  if (ips["0"].empty() || ips["0"].size() != ips["2"].size()) return P.missing(10, "workers");
  const Interval r = paired_ratio(ips["2"], ips["0"]);
  const double want = P.spec["source"]["workers_min_speedup"].get<double>();
  const Judged j = judge_threshold(r, want, true);
  const char* status = j == Judged::holds ? "confirmed" : j == Judged::fails ? "depends" : "inconclusive";
  return row(10, P.spec,
             str_cat("mlp on Fashion-MNIST (CPU): ", std::round(ips["0"][0]), " samples/s with 0 workers, ",
                     std::round(ips["2"][0]), " with 2 (first run); 2 over 0 workers ",
                     interval_text(r, "alternating pairs", 1.0, "x"), "; pinned memory: pending a GPU"),
             status,
             j == Judged::holds   ? "building batches in the background overlaps input with compute"
             : j == Judged::fails ? "here input is not the bottleneck (reading Fashion-MNIST from memory is cheap next "
                                    "to the step), so workers cannot help"
                                  : str_cat("the speed-up is inside the noise or the runs are too few (needs ",
                                            kMinTimingPairs, " pairs)"));
}

// (11) sequence length: least squares c0 + c1 s + c2 s^2.
json row_seq(const Points& P) {
  if (P.ok("seq").size() < 3) return P.missing(11, "seq");
  double A[3][3] = {}, B[3] = {}, c[3];
  std::string ours;
  double s_max = 0, act_max = 0;
  for (const json* p : P.ok("seq")) {
    const double s = std::stod(axis(*p, "seq-len")), y = (*p)["metrics"]["exact"]["activation_bytes"].get<double>();
    const double f[3] = {1, s, s * s};
    for (int i = 0; i < 3; ++i) {
      B[i] += f[i] * y;
      for (int j = 0; j < 3; ++j) A[i][j] += f[i] * f[j];
    }
    ours += str_cat(ours.empty() ? "" : ", ", "s=", s, ": ", mib(y));
    if (s > s_max) s_max = s, act_max = y;
  }
  if (!solve3(A, B, c)) return P.missing(11, "seq");
  const double quad = c[2] * s_max * s_max / act_max;
  return row(
      11, P.spec, str_cat("bert-mini batch 8 activations: ", ours), c[1] > 0 && c[2] > 0 ? "confirmed" : "refuted",
      str_cat("fit c0 + c1*s + c2*s^2: c1 = ", std::round(c[1]), " B/token, c2 = ", std::round(c[2] * 100) / 100,
              " B/token^2; the quadratic (attention) term is ", std::round(quad * 1000) / 10, "% at s = ", s_max));
}

json row_slim(const Points& P) {   // (12)
  if (P.ok("slim").size() != 4) return P.missing(12, "slim");
  std::map<std::string, std::pair<double, double>> m;   // shape -> (activations, peak)
  for (const json* p : P.ok("slim"))
    m[axis(*p, "shape")] = {(*p)["metrics"]["exact"]["activation_bytes"].get<double>(),
                            (*p)["metrics"]["exact"]["peak_allocated_bytes"].get<double>()};
  const bool ok = m["2x256"].first < m["4x256"].first && m["4x128"].first < m["4x256"].first &&
                  m["2x128"].first < std::min(m["2x256"].first, m["4x128"].first);
  return row(12, P.spec,
             str_cat("bert-mini (layers x hidden) activations / peak: 4x256 ", mib(m["4x256"].first), " / ",
                     mib(m["4x256"].second), ", 2x256 ", mib(m["2x256"].first), " / ", mib(m["2x256"].second),
                     ", 4x128 ", mib(m["4x128"].first), " / ", mib(m["4x128"].second), ", 2x128 ",
                     mib(m["2x128"].first), " / ", mib(m["2x128"].second)),
             ok ? "confirmed" : "refuted",
             "fewer layers and narrower layers each cut activations (the peak also holds the embedding "
             "table, which neither shrinks)");
}

json summarize_09(const json& spec, json& points) {
  Points P{spec, {}, {}, {}};
  for (const json& p : points) {
    P.any[block_of(p) + " " + axis(p, "on-oom")] = &p;
    if (p["outcome"].value("status", "") == "ok") P.by[block_of(p)].push_back(&p);
  }
  for (const json* p : P.ok("tricks")) P.trick[(*p)["metrics"]["trick"].get<std::string>()] = &(*p)["metrics"];
  json rows = json::array({row_batch(P), row_graph_history(P), row_del_intermediates(P), row_inplace_relu(P),
                           row_no_grad(P), row_empty_cache(P), row_oom_skip(P),
                           row(8, spec, "", "pending",
                               "needs a GPU (cuDNN): judged by the gpu profile's cudnn-benchmark points (its "
                               "gpu_claims, >= 5 alternating pairs); the GPU kit's earlier r50_tf32_bench records "
                               "are single pairs"), row_half(P),
                           row_workers(P), row_seq(P), row_slim(P)});
  return {{"rows", rows}, {"profile", spec.value("profile", "")}};
}

json verdict_09(const json&, const json& s) {
  std::map<std::string, int> n;
  std::string list;
  for (const json& r : s["rows"]) {
    n[r["status"].get<std::string>()] += 1;
    list += str_cat(list.empty() ? "" : "; ", "(", r["id"], ") ", r["status"].get<std::string>());
  }
  // Each row's own status as sub-claims of the shared rule: a row that depends on the setting
  // both holds and fails; a pending row is a GPU claim still open.
  std::vector<Judged> parts;
  for (const json& r : s["rows"]) {
    const std::string st = r["status"].get<std::string>();
    if (st == "confirmed") parts.push_back(Judged::holds);
    else if (st == "refuted") parts.push_back(Judged::fails);
    else if (st == "depends") parts.insert(parts.end(), {Judged::holds, Judged::fails});
    else if (st == "pending") parts.push_back(Judged::pending_gpu);
    else if (st == "inconclusive") parts.push_back(Judged::noise);
    else parts.push_back(Judged::noise);
  }
  const std::string status = verdict_status(parts);
  return {{"status", status},
          {"reason", str_cat("Of the ", s["rows"].size(), " tricks: ", n["confirmed"], " confirmed, ", n["depends"],
                             " depend on the setting, ", n["refuted"], " refuted, ", n["inconclusive"],
                             " inconclusive, ", n["pending"], " pending a GPU: ", list,
                             ". Each row's reason is in the table; the GPU tricks' own points (cudnn.benchmark, "
                             "pinned memory) are the gpu profile's.")}};
}

}  // namespace

OOMLAB_REGISTER_EXPERIMENT({"09_practical_tricks", summarize_09, verdict_09, {},
                            {{"source.tricks", "array"}, {"source.linear_tolerance", "positive"},
                             {"source.workers_min_speedup", "positive"}}});

}  // namespace oomlab
