// driver.cpp — experiment 08_oom_recovery: summary and verdict (registered with the runner).
// Points: bert-mini on synthetic-seq (sequences of 32-64 tokens, with probability
// long-seq-prob one of 512) trained with the same seed four ways: uncapped (the reference),
// and on a capped device (--device-memory) with --on-oom raise, skip and split.
// Summary, per policy: outcome (ok / oom and its message), optimizer steps, final test
// accuracy, training seconds (every batch, skipped ones and failed attempts included),
// skipped batches and samples lost, split batches; the batch indices (0-based, in the
// loader's order) skip dropped and split retried, and the step raise died at.
// Verdict, from the numbers:
//  * raise dies at the first batch holding a long sequence (its step = the first batch
//    skip dropped), while the uncapped run finishes;
//  * skip finishes all its steps and loses exactly batch x skipped samples (> 0);
//  * split finishes, loses nothing, and retried exactly the long batches among its steps
//    (the batches skip dropped, as far as split's steps reach).
// All three: confirmed; no long batch in the run: depends; otherwise refuted.
#include <cmath>
#include <cstdio>
#include <regex>
#include <set>

#include "experiments/runner/driver_util.h"
#include "experiments/runner/registry.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

json summarize_08(const json& spec, json& points) {
  json rows = json::object();
  for (const json& p : points) {
    if (!p.contains("axes") || !p["axes"].contains("policy")) continue;
    const std::string policy = p["axes"]["policy"].get<std::string>();
    const json& oc = p["outcome"];
    json r = {{"status", oc.value("status", "")}, {"seconds", oc.value("seconds", 0.0)}};
    if (r["status"] != "ok") {
      const std::string msg = oc.value("message", "");
      r["message"] = msg;
      std::smatch m;
      if (std::regex_search(msg, m, std::regex("step ([0-9]+) \\(a batch of shape \\[([0-9]+), ([0-9]+)\\]")))
        r["died_at_step"] = std::stoll(m[1]), r["died_on_seq_len"] = std::stoll(m[3]);
      rows[policy] = r;
      continue;
    }
    const json& met = p["metrics"];
    const json& oom = met["oom"];
    r["steps"] = met["steps"];
    r["batch"] = point_option(p, "batch");
    r["final_test_accuracy"] = met.value("final_test_accuracy", json());
    r["train_seconds"] = met["train_seconds"];
    for (const char* k : {"skipped_batches", "samples_lost", "samples_lost_pct", "split_batches"}) r[k] = oom[k];
    json skipped = json::array(), split = json::array(), micro = json::array();
    int64_t i = 0;
    for (const json& e : met["history"]["skipped"]) skipped.push_back(e["after_step"].get<int64_t>() + i++);
    for (const json& e : met["history"]["oom_splits"]) {
      split.push_back(e["step"].get<int64_t>() - 1);   // no batch skipped under split: index = step - 1
      micro.push_back(e["micro_batches"]);
    }
    r["skipped_batch_indices"] = skipped;
    r["split_batch_indices"] = split;
    r["split_micro_batches"] = micro;
    rows[policy] = r;
  }
  return {{"policies", rows}, {"profile", spec.value("profile", "")}};
}

json verdict_08(const json& spec, const json& s) {
  const json& P = s["policies"];
  for (const char* k : {"uncapped", "raise", "skip", "split"})
    OOMLAB_CHECK(P.contains(k), "experiment 08: the ", k, " point is missing");
  const json &ref = P["uncapped"], &raise = P["raise"], &skip = P["skip"], &split = P["split"];
  OOMLAB_CHECK(ref["status"] == "ok" && skip["status"] == "ok",
               "experiment 08: the uncapped and skip runs must finish (", ref["status"].dump(), ", ",
               skip["status"].dump(), ")");
  const std::vector<int64_t> dropped = skip["skipped_batch_indices"].get<std::vector<int64_t>>();
  if (dropped.empty())
    return {{"status", "depends"},
            {"reason", "no batch held a long sequence within the run's steps: nothing to recover from"}};
  const int64_t first_long_step = dropped.front() + 1;
  const bool raise_ok = raise["status"] == "oom" && raise.value("died_at_step", int64_t(-1)) == first_long_step;
  const int64_t batch = skip["batch"].get<int64_t>();
  const int64_t lost = skip["samples_lost"].get<int64_t>();
  const bool skip_ok = skip["steps"] == ref["steps"] && lost == batch * int64_t(dropped.size());
  bool split_ok = split["status"] == "ok" && split["samples_lost"] == 0 && split["steps"] == ref["steps"];
  if (split_ok) {
    std::set<int64_t> want;
    for (int64_t d : dropped)
      if (d < split["steps"].get<int64_t>()) want.insert(d);
    const std::vector<int64_t> got = split["split_batch_indices"].get<std::vector<int64_t>>();
    split_ok = !got.empty() && std::set<int64_t>(got.begin(), got.end()) == want;
  }
  auto pct = [](const json& v) {
    return v.is_number() ? str_cat(std::round(1000 * v.get<double>()) / 10, "%") : std::string("n/a");
  };
  auto ratio = [&](const json& r) {
    return r["status"] == "ok"
               ? str_cat(std::round(100 * r["train_seconds"].get<double>() / ref["train_seconds"].get<double>()) / 100,
                         "x")
               : std::string("n/a");
  };
  char buf[2000];
  std::snprintf(
      buf, sizeof buf,
      "With %s, raise %s at step %lld (%s; the first batch holding a %s-token sequence is step %lld) -- %s. skip "
      "finished %lld steps and lost %lld samples (%.2f%% of those it drew; %zu batches) -- %s. split finished with "
      "%lld samples lost, retrying %lld batches as micro-batches -- %s. Training time against the uncapped run: skip "
      "%s, split %s; final test accuracy: uncapped %s, skip %s, split %s.",
      spec["source"]["capacity"].get<std::string>().c_str(), raise["status"] == "oom" ? "died" : "did not die",
      (long long)raise.value("died_at_step", int64_t(-1)), raise["status"].get<std::string>().c_str(),
      raise.contains("died_on_seq_len") ? std::to_string(raise["died_on_seq_len"].get<int64_t>()).c_str() : "long",
      (long long)first_long_step, raise_ok ? "as claimed" : "NOT as claimed", (long long)skip["steps"].get<int64_t>(),
      (long long)lost, skip["samples_lost_pct"].get<double>(), dropped.size(),
      skip_ok ? "the count is exact" : "the count is NOT exact",
      split["status"] == "ok" ? (long long)split["samples_lost"].get<int64_t>() : -1LL,
      split["status"] == "ok" ? (long long)split["split_batches"].get<int64_t>() : -1LL,
      split_ok ? "exactly the long batches, none lost" : "NOT as claimed", ratio(skip).c_str(), ratio(split).c_str(),
      pct(ref["final_test_accuracy"]).c_str(), pct(skip["final_test_accuracy"]).c_str(),
      pct(split.value("final_test_accuracy", json())).c_str());
  // Exact claims (which step dies, which batches are skipped or split, samples lost); the
  // training-time ratios are single runs, reported and not judged.
  return {{"status", verdict_status({judge_exact(raise_ok), judge_exact(skip_ok), judge_exact(split_ok)})},
          {"reason", std::string(buf) + " The time ratios are single runs: not judged."}};
}

}  // namespace

OOMLAB_REGISTER_EXPERIMENT({"08_oom_recovery", summarize_08, verdict_08, {}, {{"source.capacity", "string"}}});

}  // namespace oomlab
