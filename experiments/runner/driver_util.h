// driver_util.h — helpers the experiment drivers share for reading matrix points (the
// children's results: outcome, axes, options, config, metrics, memory).
#pragma once
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace oomlab {

// The points run with `command` whose outcome is ok, in order. A point of that command
// that did not finish ok is a ValueError naming it and its outcome (the driver needs it).
inline std::vector<const nlohmann::json*> ok_points(const nlohmann::json& points, const std::string& command) {
  std::vector<const nlohmann::json*> out;
  for (const auto& p : points) {
    if (p.value("command", "") != command) continue;
    const nlohmann::json& o = p["outcome"];
    OOMLAB_CHECK(o.value("status", "") == "ok", "point '", p.value("name", "?"), "' did not finish: ",
                 o.value("status", "?"), " (", o.value("message", ""), ")");
    out.push_back(&p);
  }
  return out;
}

// A fraction as a percentage with one decimal ("12.9%"), for verdict reasons.
inline std::string pct_text(double fraction) { return str_cat(std::round(1000 * fraction) / 10, "%"); }

// The option `flag` a point ran with (its json value), or `def`.
inline nlohmann::json point_option(const nlohmann::json& p, const std::string& flag, const nlohmann::json& def = {}) {
  return p.contains("options") && p["options"].contains(flag) ? p["options"][flag] : def;
}

}  // namespace oomlab
