// error.h — oomlab's typed exceptions and the OOMLAB_CHECK macro family.
// Contract: every failure a user can cause (bad shape, bad flag, corrupt file, OOM)
// surfaces as a subclass of oomlab::Error whose what() is one clear sentence; the CLI
// maps any Error to a non-zero exit. Destructors never throw.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace oomlab {

struct Error : std::runtime_error { using std::runtime_error::runtime_error; };
struct ValueError : Error { using Error::Error; };       // bad argument / config value
struct ShapeError : Error { using Error::Error; };       // shape mismatch; message names op and shapes
struct DTypeError : Error { using Error::Error; };
struct DeviceError : Error { using Error::Error; };     // unknown/unavailable device
struct IoError : Error { using Error::Error; };         // missing / corrupt file; message names the file
struct AutogradError : Error { using Error::Error; };   // e.g. saved tensor modified in place
struct NotImplementedError : Error { using Error::Error; };  // e.g. missing kernel
struct OutOfMemoryError : Error { using Error::Error; };

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... R> void append(std::ostringstream& os, const T& v, const R&... r) {
  os << v; append(os, r...);
}
}  // namespace detail

template <class... A> std::string str_cat(const A&... a) {
  std::ostringstream os; detail::append(os, a...); return os.str();
}

// Internal invariant violation (a bug in oomlab, not user input): carries statement/file/line.
struct InternalError : Error { using Error::Error; };

// Runs parse() (an engine parser, which speaks in its own terms) and names the flag in the
// ValueError / IoError it raises: "--checkpoint: 'x' is not a checkpoint policy; ...".
template <class F> auto with_flag_name(const std::string& flag, F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const IoError& e) {
    throw IoError("--" + flag + ": " + e.what());
  } catch (const ValueError& e) {
    throw ValueError("--" + flag + ": " + e.what());
  }
}

}  // namespace oomlab

// OOMLAB_CHECK(cond, msg...): throws ExcType (default ValueError) with the message.
#define OOMLAB_CHECK_T(ExcType, cond, ...)                                          \
  do {                                                                              \
    if (!(cond)) throw ExcType(::oomlab::str_cat(__VA_ARGS__));                    \
  } while (0)
#define OOMLAB_CHECK(cond, ...) OOMLAB_CHECK_T(::oomlab::ValueError, cond, __VA_ARGS__)
#define OOMLAB_ASSERT(cond)                                                         \
  do {                                                                              \
    if (!(cond))                                                                    \
      throw ::oomlab::InternalError(::oomlab::str_cat("internal check failed: ", #cond, \
                                                      " at ", __FILE__, ":", __LINE__)); \
  } while (0)
