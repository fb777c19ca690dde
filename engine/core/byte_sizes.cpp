// byte_sizes.cpp — sizes and integer lists as people write them (byte_sizes.h).
#include "engine/core/byte_sizes.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"

namespace oomlab {

uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit(end);
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB" || unit == "K") mult = 1024.0;
  else if (unit == "MiB" || unit == "M") mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  OOMLAB_CHECK(end != s.c_str() && mult > 0 && std::isfinite(v) && v > 0,
               "invalid size '", s, "' (examples: 11GiB, 512MiB, 16GB, 1048576)");
  const double bytes = v * mult;
  OOMLAB_CHECK(bytes >= 1, "invalid size '", s, "': it is less than 1 byte (examples: 11GiB, 512MiB, 16GB, 1048576)");
  OOMLAB_CHECK(bytes < 9223372036854775808.0, "invalid size '", s, "': too large (at most 2^63 - 1 bytes, 8 EiB)");
  return uint64_t(bytes);
}

std::vector<int64_t> parse_int_list(const std::string& s, const std::string& what) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string tok = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(tok.c_str(), &end, 10);
    OOMLAB_CHECK(errno != ERANGE, "invalid ", what, " '", s, "': ", tok, " is out of range");
    OOMLAB_CHECK(!tok.empty() && *end == '\0' && v > 0, "invalid ", what, " '", s,
                 "': expected positive integers separated by commas, e.g. 3,224,224");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024.0 && u < 4) { b /= 1024.0; ++u; }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

}  // namespace oomlab
