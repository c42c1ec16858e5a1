// The persistent compilation cache (AXLE_CACHE_DIR): optimised programs stored by
// graph hash, so a second process skips compilation. A corrupt or foreign file is
// discarded with a warning, never trusted.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "compiler/program.h"

namespace axle::compiler {

/// The cache directory from AXLE_CACHE_DIR, or empty when unset.
std::string disk_cache_dir();
/// The program stored for `hash`, if a valid file exists.
std::optional<Program> disk_cache_load(const std::string& dir, uint64_t hash);
/// Stores atomically (temporary file, then rename).
void disk_cache_store(const std::string& dir, uint64_t hash, const Program& p);

/// Binary form of a program (exposed for tests).
std::string serialize(const Program& p, uint64_t hash);
/// Throws axle::Error on any inconsistency.
Program deserialize(const std::string& bytes, uint64_t expect_hash);

}  // namespace axle::compiler
