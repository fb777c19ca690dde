// driver.cpp — experiment 14_recipe (T10's recipe elements): summary and verdict (registered
// with the runner). Points, all `train` on the CPU (MLP, Fashion-MNIST):
//  * lambda_lr: two parameter groups (--lr-groups 5.=0.1: the head at a tenth of the lr) under
//    the source's LambdaLR (lambda-warmup-cosine) and under warmup-cosine (an absolute lr_min);
//  * ema_tta: --ema, evaluated with and without --tta flip, per seed (the same training: the
//    evaluation alone differs);
//  * dist_eval: one device at global batch 96 and DDP over 3 rank threads x 32 (10,000 test
//    samples: the sampler pads 2);
//  * checkpoint: 4 ranks save at step 6 ({scratch}), then resume to step 12 on 4, 2 and 1
//    device(s) at the same global batch, and an uninterrupted 4-rank run.
// Summary: per element its measurements (below). Verdict (verdict_rule.h): one row per
// element, each judged holds / fails / noise, the experiment's status from the rows.
#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>

#include "experiments/runner/driver_util.h"
#include "experiments/runner/registry.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

std::string label(const json& p, const char* axis) {
  const json& v = p["axes"][axis];
  return v.is_string() ? v.get<std::string>() : v.dump();
}
std::string block(const json& p) { const std::string n = p["name"]; return n.substr(0, n.find(' ')); }

// The source's lambda (T10), the factor of each group's base lr after t scheduler steps.
double source_lambda(const json& L, int64_t t) {
  const double W = L["warm_up_iter"], T = L["t_max"], M = L["lr_max"], m = L["lr_min"];
  if (double(t) < W) return double(t) / W;
  return (m + 0.5 * (M - m) * (1.0 + std::cos((double(t) - W) / (T - W) * std::numbers::pi))) / M;
}

// lambda_lr: each group's lr history (history.lr_groups[i] is the lr after step i + 1, the
// one step i + 2 uses: base x lambda(i + 1)) against the formula; the largest relative miss
// per group, and warmup-cosine's largest absolute difference from it.
json lambda_summary(const std::map<std::string, const json*>& runs, const json& L) {
  json out = json::object();
  const json* lam = runs.count("lambda") ? runs.at("lambda") : nullptr;
  OOMLAB_CHECK(lam, "experiment 14: the lambda_lr point with the source's schedule is missing");
  const json& hist = (*lam)["metrics"]["history"]["lr_groups"];
  OOMLAB_CHECK(!hist.empty(), "experiment 14: the lambda_lr point recorded no per-group lr");
  const double lr = point_option(*lam, "lr").get<double>();
  const std::vector<double> factors = {1.0, 0.1};   // group 0 (the rest) and --lr-groups 5.=0.1
  json groups = json::array();
  for (size_t g = 0; g < hist[0].size(); ++g) {
    const double base = lr * (g < factors.size() ? factors[g] : 1.0);
    double worst = 0, vs_cos = 0;
    for (size_t i = 0; i < hist.size(); ++i) {
      const double want = base * source_lambda(L, int64_t(i) + 1), got = hist[i][g].get<double>();
      worst = std::max(worst, std::abs(got - want) / std::max(want, 1e-300));
      if (runs.count("warmup-cosine"))
        vs_cos = std::max(
            vs_cos, std::abs((*runs.at("warmup-cosine"))["metrics"]["history"]["lr_groups"][i][g].get<double>() - got));
    }
    groups.push_back(
        {{"base_lr", base}, {"max_rel_miss", worst}, {"warmup_cosine_max_abs_diff", vs_cos}, {"lrs", [&] {
                                                                                                json v = json::array();
                                                                                                for (const json& h :
                                                                                                     hist)
                                                                                                  v.push_back(h[g]);
                                                                                                return v;
                                                                                              }()}});
  }
  out["groups"] = groups;
  out["steps"] = hist.size();
  return out;
}

// ema_tta: per seed, the EMA's and the raw weights' accuracy (no TTA), TTA's and plain
// evaluation's (EMA weights), and whether the two runs of a seed trained identically.
json ema_tta_summary(const std::vector<const json*>& pts) {
  std::map<int64_t, std::map<std::string, const json*>> by;
  for (const json* p : pts) by[(*p)["axes"]["seed"].get<int64_t>()][label(*p, "tta")] = p;
  json rows = json::array();
  std::vector<double> ema_gain, tta_gain;
  bool same_training = true;
  for (const auto& [seed, m] : by) {
    if (!m.count("none") || !m.count("flip")) continue;
    const json &plain = (*m.at("none"))["metrics"], &tta = (*m.at("flip"))["metrics"];
    const double ema = plain["final_test_accuracy"], raw = plain["final_test_accuracy_raw"];
    const double flip = tta["final_test_accuracy"];
    same_training = same_training && plain["history"]["train_loss"] == tta["history"]["train_loss"];
    ema_gain.push_back(ema - raw);
    tta_gain.push_back(flip - ema);
    rows.push_back({{"seed", seed},
                    {"ema", ema},
                    {"raw", raw},
                    {"tta_flip", flip},
                    {"tta_flip_raw", tta["final_test_accuracy_raw"]}});
  }
  return {{"rows", rows}, {"ema_minus_raw", interval_json(seed_mean(ema_gain))},
          {"tta_minus_plain", interval_json(seed_mean(tta_gain))}, {"same_training", same_training}};
}

json eval_row(const json& p) {
  const json& e = p["metrics"]["history"]["epochs"].back();
  json r = {{"test_samples", e["test_samples"]}, {"test_accuracy", e["test_accuracy"]}, {"test_loss", e["test_loss"]}};
  for (const char* k : {"test_padding_samples", "test_accuracy_padding_kept"})
    if (e.contains(k)) r[k] = e[k];
  return r;
}

json checkpoint_summary(const std::vector<const json*>& pts) {
  json rows = json::object();
  for (const json* p : pts) rows[label(*p, "run")] = eval_row(*p);
  const std::string ref = "4 ranks, uninterrupted";
  OOMLAB_CHECK(rows.contains(ref), "experiment 14: the uninterrupted 4-rank run is missing");
  const double want = rows[ref]["test_loss"].get<double>();
  for (auto& [k, r] : rows.items())
    r["test_loss_rel_diff"] = std::abs(r["test_loss"].get<double>() - want) / std::abs(want);
  return rows;
}

json summarize_14(const json& spec, json& points) {
  std::map<std::string, const json*> lam;
  std::vector<const json*> ema, ck;
  json dist = json::object();
  for (const json* p : ok_points(points, "train")) {
    const std::string b = block(*p);
    if (b == "lambda_lr") lam[label(*p, "schedule")] = p;
    if (b == "ema_tta") ema.push_back(p);
    if (b == "dist_eval") dist[label(*p, "mode")] = eval_row(*p);
    if (b == "checkpoint") ck.push_back(p);
  }
  return {{"lambda_lr", lambda_summary(lam, spec["source"]["lambda_lr"])}, {"ema_tta", ema_tta_summary(ema)},
          {"dist_eval", dist}, {"checkpoint", checkpoint_summary(ck)}, {"profile", spec.value("profile", "")}};
}

// One row of the verdict: the element, the source's claim, ours, the judgement and why.
json row(const char* element, const char* claim, const std::string& ours, Judged j, const std::string& why) {
  return {{"element", element}, {"claim", claim}, {"ours", ours}, {"status", judged_name(j)}, {"reason", why}};
}

json lambda_row(const json& src, const json& L) {
  double worst = 0, floor_diff = 0;
  std::string bases;
  for (const json& g : L["groups"]) {
    worst = std::max(worst, g["max_rel_miss"].get<double>());
    floor_diff = std::max(floor_diff, g["warmup_cosine_max_abs_diff"].get<double>());
    bases += str_cat(bases.empty() ? "" : ", ", g["base_lr"].get<double>());
  }
  const Judged j = judge_exact(worst <= src["lr_rel_tolerance"].get<double>() && L["groups"].size() >= 2);
  return row(
      "per-group lr, LambdaLR warm-up + cosine",
      "each group follows its base lr x the source's lambda (warm_up_iter 10, T_max 50, lr_max 0.1, lr_min 1e-5)",
      str_cat(L["groups"].size(), " groups (base lr ", bases, "), ", L["steps"].get<int64_t>(),
              " steps: largest relative miss ", worst),
      j,
      str_cat("exact (tolerance ", src["lr_rel_tolerance"].get<double>(),
              "); warmup-cosine's absolute lr_min "
              "(CosineAnnealingLR's eta_min) differs from the lambda's relative floor by up to ",
              floor_diff, " in lr for the group below lr_max"));
}

std::pair<Judged, Judged> ema_tta_rows(const json& E, json& rows) {
  const Interval ema = interval_from_json(E["ema_minus_raw"]), tta = interval_from_json(E["tta_minus_plain"]);
  const Judged ej = judge_threshold(ema, 0.0, true);
  const bool same = E["same_training"].get<bool>();
  rows.push_back(row("weight EMA swapped in for evaluation",
                     "the EMA (decay 0.999) evaluates better than the raw weights",
                     str_cat("EMA minus raw test accuracy ", interval_text(ema, "seeds", 100, " points")), ej,
                     "paired by seed (the same run evaluated twice), under the recipe's warm-up + cosine schedule "
                     "(the EMA's ~1/(1-decay)-step window then averages weights the annealed lr barely moves); the "
                     "quick profile uses decay 0.99 over 200 steps"));
  // TTA averages over copies the model was trained to see: oomlab trains without flips, so the
  // mirror image is off the training distribution and cannot show the claim (measured, shown,
  // not judged).
  rows.push_back(
      row("test-time augmentation (mirror)", "averaging predictions over augmented copies raises accuracy",
          str_cat("flip-TTA minus plain test accuracy (EMA weights) ", interval_text(tta, "seeds", 100, " points")),
          Judged::too_few,
          str_cat("NOT JUDGED: this setup cannot test the claim -- TTA averages over the augmentation the "
                  "model trained with, and oomlab trains without flips (no training-time augmentation yet), "
                  "so the mirror image is off the training distribution; ",
                  same ? "paired by seed: the two runs of a seed trained identically (same loss history), "
                         "only the evaluation differs"
                       : "NOT paired: the runs of a seed trained differently")));
  return {ej, Judged::too_few};
}

json dist_row(const json& src, const json& D, Judged& j) {
  const json *one = D.contains("1 device b96") ? &D["1 device b96"] : nullptr;
  const json *ddp = D.contains("ddp 3 ranks 3x32") ? &D["ddp 3 ranks 3x32"] : nullptr;
  if (!one || !ddp) {
    j = Judged::too_few;
    return row("distributed evaluation", "gathering every rank's outputs gives the single-process metric",
               "points missing", j, "");
  }
  const double d_acc = std::abs((*ddp)["test_accuracy"].get<double>() - (*one)["test_accuracy"].get<double>());
  const bool same_n = (*ddp)["test_samples"] == (*one)["test_samples"];
  j = judge_exact(same_n && d_acc <= 1.0 / (*one)["test_samples"].get<double>());
  const int64_t pad = ddp->value("test_padding_samples", int64_t(0));
  return row("distributed evaluation", "gathering every rank's outputs gives the single-process metric",
             str_cat("3 ranks score ", (*ddp)["test_samples"].get<int64_t>(), " samples (1 device: ",
                     (*one)["test_samples"].get<int64_t>(), "), accuracy ", (*ddp)["test_accuracy"].get<double>(),
                     " vs ", (*one)["test_accuracy"].get<double>(), "; keeping the sampler's ", pad,
                     " padding samples would count ", (*ddp)["test_samples"].get<int64_t>() + pad, " and report ",
                     ddp->value("test_accuracy_padding_kept", (*ddp)["test_accuracy"].get<double>())),
             j,
             "the sample count exact and the accuracy within one sample (the two models differ only by float "
             "rounding: the same global batch); the padding is the DistributedSampler's repeat of the first samples");
}

json checkpoint_row(const json& src, const json& C, Judged& j) {
  const double tol = src["equal_rel_tolerance"].get<double>();
  const bool exact_same_world = C.contains("4 ranks, resumed") && C["4 ranks, resumed"]["test_loss_rel_diff"] == 0.0;
  double worst_other = 0;
  for (const char* k : {"2 ranks, resumed", "1 device, resumed"})
    worst_other = std::max(worst_other, C.contains(k) ? C[k]["test_loss_rel_diff"].get<double>() : INFINITY);
  j = judge_exact(exact_same_world && worst_other <= tol);
  return row("DDP checkpoint: rank 0 saves, barrier, load on another world size",
             "a checkpoint rank 0 saves loads and continues on any world size",
             str_cat("resumed on 4 ranks: final test loss ", exact_same_world ? "bit-equal to" : "NOT equal to",
                     " the uninterrupted run's; on 2 ranks and 1 device (same global batch): within ", worst_other,
                     " (relative)"),
             j, str_cat("same world size exact; others within ", tol, " (float rounding of the gradient sums)"));
}

json verdict_14(const json& spec, const json& s) {
  const json& src = spec["source"];
  json rows = json::array();
  rows.push_back(lambda_row(src, s["lambda_lr"]));
  const auto [ej, tj] = ema_tta_rows(s["ema_tta"], rows);
  Judged dj, cj;
  rows.push_back(dist_row(src, s["dist_eval"], dj));
  rows.push_back(checkpoint_row(src, s["checkpoint"], cj));
  const std::vector<Judged> parts = {judge_exact(rows[0]["status"] == "holds"), ej, tj, dj, cj};
  std::string reason;
  for (const json& r : rows)
    reason += str_cat(reason.empty() ? "" : " ", r["element"].get<std::string>(), ": ", r["ours"].get<std::string>(),
                      " -- ", r["reason"].get<std::string>().rfind("NOT JUDGED", 0) == 0
                                  ? "not judged: this setup cannot test it (no training-time flips)"
                                  : r["status"].get<std::string>(), ".");
  return {{"status", verdict_status(parts)}, {"reason", reason}};
}

}  // namespace

OOMLAB_REGISTER_EXPERIMENT({"14_recipe", summarize_14, verdict_14, {},
                            {{"source.lambda_lr", "object"}, {"source.ema_decay", "positive"},
                             {"source.lr_rel_tolerance", "positive"}, {"source.equal_rel_tolerance", "positive"}}});

}  // namespace oomlab
