// The safetensors container format, without tensors: header parsing with full
// validation, header building, and the raw-byte checks. Depends only on
// nlohmann-json and axle/error.h + axle/dtype.h (no Tensor), so the libFuzzer
// target (tests/fuzz/) compiles it with clang on its own.
//
// Layout: u64 little-endian N | N bytes of JSON header | data bytes.
// Header: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//          "__metadata__": {"key": "value", ...}}   (offsets relative to the data start)
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "axle/dtype.h"

namespace axle::st {

/// Header sizes above this are rejected before any allocation (as the reference reader).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// JSON nesting deeper than this is rejected before parsing (a valid header needs 3).
inline constexpr int kMaxJsonDepth = 64;

struct Entry {
  std::string name;
  DType dtype = kFloat32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  ///< byte range relative to the data start
};

struct Header {
  std::vector<Entry> entries;  ///< sorted by data offset (the file's data order)
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  ///< absolute file offset of the data section (8 + header length)
};

/// "F32", "I64", ... for a dtype.
const char* dtype_code(DType t);
/// Bytes per element of a safetensors dtype (same as axle::itemsize, kept local for the fuzz build).
uint64_t dtype_size(DType t);

/// Checks the 8-byte prefix against the file size and returns the header length.
/// `what` names the file in messages.
uint64_t parse_prefix(const unsigned char prefix[8], uint64_t file_size, const std::string& what);
/// Parses and validates the JSON header; `data_size` = file size - 8 - header length.
/// Checks: JSON object, known dtypes, non-negative integer shapes, size == numel * itemsize
/// (without overflow), offsets within the data, no overlap, no gap, full coverage, string metadata,
/// no duplicate keys. Throws axle::Error naming `what` and the offending tensor.
Header parse_header(std::string_view json, uint64_t data_size, const std::string& what);
/// The whole file held in memory: prefix + header (both validated).
Header parse_buffer(const unsigned char* data, uint64_t size, const std::string& what);
/// BOOL tensors must hold only 0/1 bytes (any other byte is not a C++ bool).
void check_bool_bytes(const unsigned char* p, uint64_t n, const std::string& name, const std::string& what);

/// Builds a header for `entries` (their begin/end already set, in data order) padded with
/// spaces so the data starts 8-byte aligned; returns prefix + header bytes.
std::string build_header(const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata);

}  // namespace axle::st

// ---- file I/O helpers (src/serialize/serialize.cpp; not part of the fuzz build) ----
namespace axle::st {

/// xm::save and save_checkpoint write only on the master ordinal (global ordinal 0,
/// torch_xla's xm.is_master_ordinal()). Tests may override who counts as master;
/// nullptr restores the runtime's answer.
void set_master_ordinal_hook(bool (*is_master)());
bool is_master_ordinal();

/// Test hook: the next writes fail after `bytes` bytes have been written to the temporary
/// file: mode 1 throws (an I/O error), mode 2 calls _exit(3) (a crash); mode 0 turns it off.
void set_write_fault_for_testing(uint64_t bytes, int mode);

}  // namespace axle::st
