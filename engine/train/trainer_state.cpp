// trainer_state.cpp — validated reads of trainer_state.json (trainer_state.h).
#include "engine/train/trainer_state.h"

#include <cmath>
#include <initializer_list>

#include "engine/core/error.h"
#include "engine/io/json_count.h"

namespace oomlab {
using json = nlohmann::json;

namespace {
enum class Want { object, array, count, u64, number };

const json& field(const json& root, const std::string& file, std::initializer_list<const char*> path, Want want) {
  const json* j = &root;
  std::string name;
  for (const char* k : path) {
    if (!name.empty()) name += '.';
    name += k;
    OOMLAB_CHECK_T(IoError, j->is_object() && j->contains(k), "resume: ", file, ": field \"", name, "\" is missing");
    j = &(*j)[k];
  }
  bool ok = false;
  const char* what = "";
  switch (want) {
    case Want::object: ok = j->is_object(); what = "an object"; break;
    case Want::array: ok = j->is_array(); what = "an array"; break;
    case Want::count:   // non-negative, fits int64
      ok = is_json_count(*j);
      what = "a non-negative integer"; break;
    case Want::u64: ok = j->is_number_unsigned(); what = "a non-negative integer"; break;
    case Want::number: ok = j->is_number() && std::isfinite(j->get<double>()); what = "a finite number"; break;
  }
  if (!ok) {
    std::string got = j->dump();
    if (got.size() > 40) got = got.substr(0, 40) + "...";
    throw IoError(str_cat("resume: ", file, ": field \"", name, "\" must be ", what, " (got ", got, ")"));
  }
  return *j;
}
}  // namespace

TrainerState parse_trainer_state(const json& st, const std::string& file) {
  OOMLAB_CHECK_T(IoError, st.is_object(), "resume: ", file, ": not a JSON object");
  TrainerState s;
  s.step = field(st, file, {"step"}, Want::count).get<int64_t>();
  s.config = field(st, file, {"config"}, Want::object);
  s.history = field(st, file, {"history"}, Want::object);
  for (const char* k : {"train_loss", "lr"}) {
    const json& h = field(st, file, {"history", k}, Want::array);
    OOMLAB_CHECK_T(IoError, int64_t(h.size()) == s.step, "resume: ", file, ": field \"history.", k, "\" has ",
                   h.size(), " entries for step ", s.step);
  }
  field(st, file, {"history", "epochs"}, Want::array);
  for (const char* k : {"skipped", "oom_splits"}) {   // older checkpoints lack them
    if (!s.history.contains(k)) s.history[k] = json::array();
    field(s.history, file, {k}, Want::array);
  }
  s.rng.seed = field(st, file, {"rng", "seed"}, Want::u64).get<uint64_t>();
  s.rng.offset = field(st, file, {"rng", "offset"}, Want::u64).get<uint64_t>();
  s.loader.epoch = field(st, file, {"loader", "epoch"}, Want::count).get<int64_t>();
  s.loader.cursor = field(st, file, {"loader", "cursor"}, Want::count).get<int64_t>();
  s.epoch_loss = field(st, file, {"epoch_sums", "loss"}, Want::number).get<double>();
  s.epoch_correct = field(st, file, {"epoch_sums", "correct"}, Want::count).get<int64_t>();
  s.epoch_samples = field(st, file, {"epoch_sums", "samples"}, Want::count).get<int64_t>();
  if (st["epoch_sums"].contains("scored"))
    s.epoch_scored = field(st, file, {"epoch_sums", "scored"}, Want::count).get<int64_t>();
  s.optimizer = field(st, file, {"optimizer"}, Want::object);
  s.scheduler = field(st, file, {"scheduler"}, Want::object);
  if (st.contains("ema")) s.ema = field(st, file, {"ema"}, Want::object);
  if (st.contains("divergence")) {
    s.divergence = field(st, file, {"divergence"}, Want::object);
    field(st, file, {"divergence", "step"}, Want::count);
  }
  return s;
}

}  // namespace oomlab
