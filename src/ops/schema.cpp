// The op table's schema: queries that need more than a constexpr lookup (see schema.h).
#include "ops/schema.h"

#include "axle/error.h"

namespace axle::ops {

std::vector<OpKind> ops_with(uint32_t traits) {
  std::vector<OpKind> out;
  for (const OpInfo* i = op_infos_begin(); i != op_infos_end(); ++i)
    if ((i->traits & traits) == traits) out.push_back(i->kind);
  return out;
}

bool attrs_match(OpKind k, const Attrs& a, std::string* why) {
  const OpInfo& info = op_info(k);
  size_t ints = 0, floats = 0;
  bool tail = false, flag = false;
  for (size_t j = 0; j < info.num_attrs; ++j) {
    switch (info.attrs[j].type) {
      case AttrType::Int: case AttrType::Bool: case AttrType::DType: ++ints; break;
      case AttrType::Ints: tail = true; break;
      case AttrType::Float: ++floats; break;
      case AttrType::Flag: flag = true; break;
    }
  }
  auto fail = [&](const std::string& m) {
    if (why) *why = std::string("[") + info.name + "] " + m;
    return false;
  };
  // A compiler-made op's program (INTS) also carries its member ops' float attributes.
  const bool program = tail && info.has(kCompilerMade);
  if (program ? a.floats.size() < floats : a.floats.size() != floats)
    return fail("expected " + std::to_string(floats) + " float attributes, got " + std::to_string(a.floats.size()));
  if (a.ints.size() < ints)
    return fail("expected " + std::to_string(ints) + " int attributes, got " + std::to_string(a.ints.size()));
  if (!tail && a.ints.size() > ints + (flag ? 1 : 0))
    return fail("expected " + std::to_string(ints) + (flag ? " (+1 flag)" : "") + " int attributes, got " +
                std::to_string(a.ints.size()));
  if (flag && a.ints.size() == ints + 1 && a.ints.back() != 1)
    return fail("expected the fused-epilogue flag to be 1, got " + std::to_string(a.ints.back()));
  return true;
}

const char* schema_text() {
  // Each entry as the preprocessor spells its arguments (comments dropped, whitespace folded).
  static const char text[] =
#define AXLE_OP(...) "AXLE_OP(" #__VA_ARGS__ ")\n"
#include "ops/ops.def"
#undef AXLE_OP
      ;
  return text;
}

uint64_t hash_text(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001B3ull;
  return h;
}

uint64_t schema_hash() {
  static const uint64_t h = hash_text(schema_text());
  return h;
}

namespace schema_detail {

int64_t take_int(OpKind k, const char* field, const Attrs& a, size_t& i) {
  AXLE_CHECK(i < a.ints.size(), "[", op_info(k).name, "] expected attribute '", field, "' (int ", i, "), got ",
             a.ints.size(), " int attributes");
  return a.ints[i++];
}

double take_float(OpKind k, const char* field, const Attrs& a, size_t& f) {
  AXLE_CHECK(f < a.floats.size(), "[", op_info(k).name, "] expected attribute '", field, "' (float ", f, "), got ",
             a.floats.size(), " float attributes");
  return a.floats[f++];
}

bool take_flag(OpKind k, const char* field, const Attrs& a, size_t& i) {
  if (i >= a.ints.size()) return false;
  AXLE_CHECK(a.ints[i] == 1, "[", op_info(k).name, "] expected flag '", field, "' to be 1 when present, got ",
             a.ints[i]);
  ++i;
  return true;
}

void check_consumed(OpKind k, const Attrs& a, size_t i, size_t f) {
  AXLE_CHECK(i == a.ints.size() && f == a.floats.size(), "[", op_info(k).name, "] expected ", i,
             " int and ", f, " float attributes, got ", a.ints.size(), " and ", a.floats.size());
}

}  // namespace schema_detail
}  // namespace axle::ops
