// byte_sizes.h — sizes and integer lists as people write them ("11GiB", "3,224,224") and
// bytes as people read them ("1.23 GiB"): the parsers every layer above shares, so that a
// value is parsed once, where it is made (the command line, an experiment spec).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace oomlab {

// "11GiB", "512MiB", "1.5GB", "4096" (bytes) -> bytes; ValueError on bad input, on a
// result below 1 byte ("0.5") and on one of 2^63 bytes or more. get_int: ValueError on
// a value outside int64 (naming the flag).
uint64_t parse_size(const std::string& s);
// "3,224,224" -> {3,224,224}; ValueError on bad input.
std::vector<int64_t> parse_int_list(const std::string& s, const std::string& what);
std::string format_bytes(double bytes);   // "1.23 GiB"

}  // namespace oomlab
