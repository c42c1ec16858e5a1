#include "axle/error.h"

namespace axle::detail {
void throw_error(std::string msg) { throw Error(std::move(msg)); }
}  // namespace axle::detail
