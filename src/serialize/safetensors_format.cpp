// safetensors header parsing/validation and building (no tensors; see safetensors.h).
#include "serialize/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "axle/error.h"

namespace axle::st {

namespace {

using json = nlohmann::json;

struct DTypeCode {
  const char* code;
  DType dtype;
  uint64_t size;
};
constexpr DTypeCode kCodes[] = {
    {"F32", DType::Float32, 4}, {"I64", DType::Int64, 8},     {"I32", DType::Int32, 4},    {"BOOL", DType::Bool, 1},
    {"U8", DType::UInt8, 1},    {"BF16", DType::BFloat16, 2}, {"F16", DType::Float16, 2},
};
constexpr const char* kSupported = "F32, I64, I32, BOOL, U8, BF16, F16";

// Rejects JSON nested deeper than kMaxJsonDepth before handing it to the parser.
void check_depth(std::string_view s, const std::string& what) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (char c : s) {
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') {
      AXLE_CHECK(++depth <= kMaxJsonDepth, what, ": malformed header: JSON nested deeper than ", kMaxJsonDepth,
                 " levels (a safetensors header needs 3)");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

std::string excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 40) out += "...";
  return out;
}

uint64_t get_u64(const json& v, const std::string& what, const std::string& name, const char* field) {
  AXLE_CHECK(v.is_number_unsigned(), what, ": tensor \"", name, "\": ", field,
             " must hold non-negative integers, got ", v.dump());
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& name, const json& v, uint64_t data_size, const std::string& what) {
  AXLE_CHECK(v.is_object(), what, ": tensor \"", name, "\": expected an object {dtype, shape, data_offsets}, got ",
             v.type_name());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    AXLE_CHECK(v.contains(field), what, ": tensor \"", name, "\": header entry has no \"", field, "\"");
  Entry e;
  e.name = name;
  const json& dt = v["dtype"];
  AXLE_CHECK(dt.is_string(), what, ": tensor \"", name, "\": dtype must be a string, got ", dt.dump());
  const std::string& code = dt.get_ref<const std::string&>();
  const DTypeCode* found = nullptr;
  for (const auto& c : kCodes)
    if (code == c.code) found = &c;
  AXLE_CHECK(found, what, ": tensor \"", name, "\": unknown or unsupported dtype \"", excerpt(code),
             "\" (axle reads ", kSupported, ")");
  e.dtype = found->dtype;

  const json& shape = v["shape"];
  AXLE_CHECK(shape.is_array(), what, ": tensor \"", name, "\": shape must be an array, got ", shape.type_name());
  uint64_t numel = 1;
  bool overflow = false, any_zero = false;
  for (const json& d : shape) {
    uint64_t n = get_u64(d, what, name, "shape");
    AXLE_CHECK(n <= uint64_t(std::numeric_limits<int64_t>::max()), what, ": tensor \"", name, "\": dimension ", n,
               " is too large");
    e.shape.push_back(int64_t(n));
    any_zero = any_zero || n == 0;
    overflow = overflow || __builtin_mul_overflow(numel, n, &numel);
  }
  if (any_zero) numel = 0, overflow = false;
  uint64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, found->size, &nbytes);

  const json& off = v["data_offsets"];
  AXLE_CHECK(off.is_array() && off.size() == 2, what, ": tensor \"", name,
             "\": data_offsets must be [begin, end], got ", excerpt(off.dump()));
  e.begin = get_u64(off[0], what, name, "data_offsets");
  e.end = get_u64(off[1], what, name, "data_offsets");
  AXLE_CHECK(e.begin <= e.end, what, ": tensor \"", name, "\": data_offsets [", e.begin, ", ", e.end,
             "] end before they begin");
  AXLE_CHECK(e.end <= data_size, what, ": tensor \"", name, "\": data_offsets [", e.begin, ", ", e.end,
             "] run past the end of the data section (", data_size, " bytes): the file is truncated or the header lies");
  AXLE_CHECK(!overflow && nbytes == e.end - e.begin, what, ": tensor \"", name, "\": shape ",
             excerpt(shape.dump()), " of ", code, " needs ",
             overflow ? std::string("more than 2^64") : std::to_string(nbytes), " bytes, data_offsets [", e.begin,
             ", ", e.end, "] hold ", e.end - e.begin);
  return e;
}

}  // namespace

const char* dtype_code(DType t) {
  for (const auto& c : kCodes)
    if (c.dtype == t) return c.code;
  return "?";
}

uint64_t dtype_size(DType t) {
  for (const auto& c : kCodes)
    if (c.dtype == t) return c.size;
  return 0;
}

uint64_t parse_prefix(const unsigned char prefix[8], uint64_t file_size, const std::string& what) {
  AXLE_CHECK(file_size >= 8, what, ": file is ", file_size,
             " bytes, too short for a safetensors file (8-byte header length, JSON header, data)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  AXLE_CHECK(n <= kMaxHeaderBytes, what, ": header length ", n, " exceeds the ", kMaxHeaderBytes,
             "-byte limit (not a safetensors file?)");
  AXLE_CHECK(n >= 2, what, ": header length ", n, " is too small for a JSON object");
  AXLE_CHECK(n <= file_size - 8, what, ": header length ", n, " runs past the end of the file (", file_size,
             " bytes): the file is truncated");
  return n;
}

Header parse_header(std::string_view text, uint64_t data_size, const std::string& what) {
  AXLE_CHECK(!text.empty() && text.front() == '{', what, ": malformed header: expected a JSON object, got \"",
             excerpt(text), "\"");
  check_depth(text, what);
  // Duplicate keys: nlohmann keeps the last one silently; a header that names a tensor twice lies.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    else if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.empty() && parsed.is_string() &&
             !keys.back().insert(parsed.get_ref<const std::string&>()).second && duplicate.empty())
      duplicate = parsed.get_ref<const std::string&>();
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& ex) {
    AXLE_FAIL(what, ": malformed JSON header: ", ex.what());
  }
  AXLE_CHECK(duplicate.empty(), what, ": malformed header: key \"", excerpt(duplicate), "\" appears twice");
  AXLE_CHECK(j.is_object(), what, ": malformed header: expected a JSON object, got ", j.type_name());

  Header h;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      const json& m = it.value();
      if (m.is_null()) continue;
      AXLE_CHECK(m.is_object(), what, ": __metadata__ must be an object of strings, got ", m.type_name());
      for (auto mi = m.begin(); mi != m.end(); ++mi) {
        AXLE_CHECK(mi.value().is_string(), what, ": __metadata__ value of \"", excerpt(mi.key()),
                   "\" must be a string, got ", mi.value().type_name());
        h.metadata[mi.key()] = mi.value().get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(name, it.value(), data_size, what));
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : h.entries) {
    AXLE_CHECK(e.begin >= pos, what, ": tensor \"", e.name, "\" (data_offsets [", e.begin, ", ", e.end,
               "]) overlaps tensor \"", prev ? prev->name : "", "\" (ending at ", pos, ")");
    AXLE_CHECK(e.begin == pos, what, ": gap in the data section: bytes [", pos, ", ", e.begin,
               ") belong to no tensor (before tensor \"", e.name, "\")");
    pos = e.end;
    prev = &e;
  }
  AXLE_CHECK(pos == data_size, what, ": the data section holds ", data_size, " bytes but the header describes ", pos,
             " (", data_size - pos, " trailing bytes belong to no tensor)");
  return h;
}

Header parse_buffer(const unsigned char* data, uint64_t size, const std::string& what) {
  uint64_t n = parse_prefix(data, size, what);
  Header h = parse_header(std::string_view(reinterpret_cast<const char*>(data) + 8, n), size - 8 - n, what);
  h.data_start = 8 + n;
  return h;
}

void check_bool_bytes(const unsigned char* p, uint64_t n, const std::string& name, const std::string& what) {
  unsigned char bad = 0;
  for (uint64_t i = 0; i < n; ++i) bad |= p[i];
  if (!(bad & 0xfe)) return;
  for (uint64_t i = 0; i < n; ++i)
    AXLE_CHECK(p[i] <= 1, what, ": tensor \"", name, "\" (BOOL) holds the byte ", int(p[i]), " at element ", i,
               "; BOOL elements must be 0 or 1");
}

std::string build_header(const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  for (const Entry& e : entries) {
    AXLE_CHECK(e.name != "__metadata__", "[save] \"__metadata__\" is reserved and can't name a tensor");
    AXLE_CHECK(!j.contains(e.name), "[save] the tensor name \"", e.name, "\" appears twice");
    j[e.name] = {{"dtype", dtype_code(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string text;
  try {
    text = j.dump();
  } catch (const nlohmann::ordered_json::exception& ex) {
    AXLE_FAIL("[save] tensor names and metadata must be valid UTF-8: ", ex.what());
  }
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + text;
}

}  // namespace axle::st
