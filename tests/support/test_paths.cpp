// The one file that sees the build's paths (tests/CMakeLists.txt defines them here only).
#include "test_paths.h"

namespace axle::test {
const std::string& data_dir() { static const std::string s = AXLE_PATH_TEST_DATA; return s; }
const std::string& train_bin() { static const std::string s = AXLE_PATH_TRAIN_BIN; return s; }
const std::string& fsdp_consolidate_bin() { static const std::string s = AXLE_PATH_FSDP_CONSOLIDATE_BIN; return s; }
const std::string& run_bin() { static const std::string s = AXLE_PATH_RUN_BIN; return s; }
}  // namespace axle::test
