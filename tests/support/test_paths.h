#pragma once
// Where the tests find their data and the binaries they drive. The absolute paths of this
// checkout and build are compiled into one file (test_paths.cpp), not into every test: the
// other tests then compile the same in any clone, and a compile cache (CI's ccache) hits.
#include <string>

namespace axle::test {
const std::string& data_dir();            // tests/data of the source tree
const std::string& train_bin();           // axle-train
const std::string& fsdp_consolidate_bin();// axle-fsdp-consolidate
const std::string& run_bin();             // axle-run
}  // namespace axle::test

#define AXLE_TEST_DATA (::axle::test::data_dir())
#define AXLE_TRAIN_BIN (::axle::test::train_bin())
#define AXLE_FSDP_CONSOLIDATE_BIN (::axle::test::fsdp_consolidate_bin())
#define AXLE_RUN_BIN (::axle::test::run_bin())
