// json_count.h — a count read from a state file: a JSON integer that is >= 0 and fits int64.
// Contract: anything else (2.5, "x", -1, JSON's unsigned 2^64 - 1) throws ValueError naming
// `what` and the value as the file spells it, never a truncated or wrapped number.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace oomlab {

inline bool is_json_count(const nlohmann::json& j) {
  // parsed text holds 2 as unsigned; a json built in memory from an int64_t holds it as signed
  return j.is_number_unsigned() ? j.get<uint64_t>() <= uint64_t(INT64_MAX)
                                : j.is_number_integer() && j.get<int64_t>() >= 0;
}

inline int64_t json_count(const nlohmann::json& j, const std::string& what) {
  if (!is_json_count(j)) {
    std::string got = j.dump();
    if (got.size() > 40) got = got.substr(0, 40) + "...";
    throw ValueError(what + " must be a non-negative integer (got " + got + ")");
  }
  return j.get<int64_t>();
}

}  // namespace oomlab
