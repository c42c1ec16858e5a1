// libFuzzer target for the safetensors reader: any byte string must either parse into a
// header whose every tensor lies inside the buffer, or throw axle::Error; never crash, hang,
// read out of bounds or allocate more than the input holds. Built with clang
// (-fsanitize=fuzzer,address,undefined) by tests/fuzz/CMakeLists.txt; `make test` runs it
// for 20 s over tests/fuzz/corpus/.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "axle/error.h"
#include "serialize/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace axle;
  try {
    st::Header h = st::parse_buffer(data, size, "fuzz");
    // The guarantees the loader relies on: entries tile the data section exactly, and
    // each one's byte count is numel * itemsize.
    uint64_t pos = h.data_start;
    for (const st::Entry& e : h.entries) {
      if (h.data_start + e.begin != pos || e.end < e.begin || h.data_start + e.end > size) __builtin_trap();
      uint64_t numel = 1;
      for (int64_t d : e.shape) numel *= uint64_t(d);
      if (numel * st::dtype_size(e.dtype) != e.end - e.begin) __builtin_trap();
      // Copy the bytes as load() does (ASan checks the range).
      std::vector<unsigned char> buf(e.end - e.begin);
      if (!buf.empty()) std::memcpy(buf.data(), data + h.data_start + e.begin, buf.size());
      if (e.dtype == kBool) st::check_bool_bytes(buf.data(), buf.size(), e.name, "fuzz");
      pos = h.data_start + e.end;
    }
    if (pos != size) __builtin_trap();
    // A header built from what was parsed parses back to the same entries.
    std::string again = st::build_header(h.entries, h.metadata);
    st::Header h2 = st::parse_header(std::string_view(again).substr(8), size - h.data_start, "fuzz");
    if (h2.entries.size() != h.entries.size() || h2.metadata != h.metadata) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
