// Linked into every test program (tests/CMakeLists.txt): the compiler's verifier runs before
// the first pass and after every pass in tests and CI, whatever the build type (both CI builds
// define NDEBUG). Set before main, and inherited by every process a test launches (the CLI,
// multi-process runs); AXLE_VERIFY=0 on the command line still turns it off.
#include <cstdlib>

namespace {
[[maybe_unused]] const bool kVerifyOn = (::setenv("AXLE_VERIFY", "1", /*overwrite=*/0), true);
}  // namespace
