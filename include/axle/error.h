// axle::Error and AXLE_CHECK: every user error in axle is an exception, never an abort.
//
//   AXLE_CHECK(x.dim() == 2, "[matmul] expected a 2-D tensor, got ", x.dim(), "-D");
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace axle {

/// The one exception type axle throws for bad input or a failed operation.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(std::string msg);
}  // namespace detail
}  // namespace axle

/// Throws axle::Error with the concatenated message when `cond` is false.
#define AXLE_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) [[unlikely]]                                              \
      ::axle::detail::throw_error(::axle::detail::str_cat(__VA_ARGS__));   \
  } while (0)

/// Throws axle::Error unconditionally.
#define AXLE_FAIL(...) ::axle::detail::throw_error(::axle::detail::str_cat(__VA_ARGS__))
