// The persistent compilation cache (AXLE_CACHE_DIR): optimised programs stored by
// graph hash and backend (its passes made them), so a second process skips compilation. A corrupt or foreign file is
// discarded with a warning, never trusted.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "compiler/program.h"

namespace axle::compiler {

/// The cache directory from AXLE_CACHE_DIR, or empty when unset.
std::string disk_cache_dir();
/// The key a graph's program is stored under: its hash mixed with the backend's cache tag
/// (backend::Backend::cache_tag(): its name, and version or ISA where it has one), so one
/// backend never loads a program another backend's passes made.
uint64_t disk_cache_key(uint64_t graph_hash, const std::string& backend_tag);
/// The program stored for `hash` (a disk_cache_key), if a valid file exists.
std::optional<Program> disk_cache_load(const std::string& dir, uint64_t hash);
/// Stores atomically (temporary file, then rename).
void disk_cache_store(const std::string& dir, uint64_t hash, const Program& p);

/// The format version this build writes and reads: a hash of the op table's text
/// (ops::schema_text()) and the pass pipeline's version, so a file written by a build with
/// another table or pipeline is never loaded.
uint64_t cache_format_version();
/// The format version a build whose ops.def reads `table_text` would have (for tests).
uint64_t format_version_of(const std::string& table_text);

/// Binary form of a program (exposed for tests); `version`: the format version to write.
std::string serialize(const Program& p, uint64_t hash, uint64_t version = cache_format_version());
/// Throws axle::Error on any inconsistency.
Program deserialize(const std::string& bytes, uint64_t expect_hash);

}  // namespace axle::compiler
