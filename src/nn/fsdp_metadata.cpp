// ShardMetadata <-> JSON, the text each FSDP v1 rank file carries under the checkpoint
// metadata key "shard_metadata" (src/serialize/fsdp_checkpoint.cpp) and consolidation reads:
//
//   {"version": 1, "world_size": 2, "rank": 0,
//    "params": [{"shard_name": "...", "names": ["fc1.weight"], "shapes": [[256, 784]],
//                "dim0": false, "padded_numel": 200704}, ...],
//    "buffer_names": ["bn.running_mean", ...]}
//
// from_json reads files, so it trusts nothing: every field is checked for presence and type,
// and the values for the consistency consolidation relies on (one shape per name, a padded
// size that holds the parameters and splits evenly over the ranks).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "axle/error.h"
#include "axle/fsdp.h"

namespace axle::fsdp {

namespace {

using json = nlohmann::ordered_json;
constexpr int kVersion = 1;
constexpr int kMaxDepth = 16;  // a valid text needs 4

const char* type_name(const json& j) { return j.type_name(); }

// Nesting deeper than kMaxDepth is refused before parsing (brackets outside strings).
void check_depth(const std::string& text, const std::string& what) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      AXLE_CHECK(++depth <= kMaxDepth, what, ": expected JSON nested at most ", kMaxDepth, " deep");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

const json& field(const json& obj, const char* key, const std::string& where, const std::string& what) {
  auto it = obj.find(key);
  AXLE_CHECK(it != obj.end(), what, ": expected a field \"", key, "\" in ", where);
  return *it;
}

int64_t get_int(const json& obj, const char* key, const std::string& where, const std::string& what) {
  const json& v = field(obj, key, where, what);
  AXLE_CHECK(v.is_number_integer(), what, ": expected \"", key, "\" in ", where, " to be an integer, got ",
             type_name(v), " ", v.dump());
  return v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : v.get<int64_t>();
}

std::string get_string(const json& v, const std::string& where, const std::string& what) {
  AXLE_CHECK(v.is_string(), what, ": expected ", where, " to be a string, got ", type_name(v));
  return v.get<std::string>();
}

const json& get_array(const json& obj, const char* key, const std::string& where, const std::string& what) {
  const json& v = field(obj, key, where, what);
  AXLE_CHECK(v.is_array(), what, ": expected \"", key, "\" in ", where, " to be an array, got ", type_name(v));
  return v;
}

}  // namespace

std::string ShardMetadata::to_json() const {
  json j = json::object();
  j["version"] = kVersion;
  j["world_size"] = world_size;
  j["rank"] = rank;
  json ps = json::array();
  for (const Param& p : params) {
    json shapes = json::array();
    for (const Shape& s : p.shapes) shapes.push_back(s);
    ps.push_back(json{{"shard_name", p.shard_name},
                      {"names", p.names},
                      {"shapes", std::move(shapes)},
                      {"dim0", p.dim0},
                      {"padded_numel", p.padded_numel}});
  }
  j["params"] = std::move(ps);
  j["buffer_names"] = buffer_names;
  return j.dump();
}

ShardMetadata ShardMetadata::from_json(const std::string& text) {
  const std::string what = "[ShardMetadata::from_json]";
  check_depth(text, what);
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  AXLE_CHECK(!j.is_discarded(), what, ": expected JSON text, got \"", text.substr(0, 60),
             text.size() > 60 ? "...\"" : "\"");
  AXLE_CHECK(j.is_object(), what, ": expected a JSON object, got ", type_name(j));
  const int64_t version = get_int(j, "version", "the object", what);
  AXLE_CHECK(version == kVersion, what, ": expected version ", kVersion, ", got ", version);

  ShardMetadata m;
  const int64_t world = get_int(j, "world_size", "the object", what);
  AXLE_CHECK(world >= 1 && world <= INT32_MAX, what, ": expected world_size >= 1, got ", world);
  const int64_t rank = get_int(j, "rank", "the object", what);
  AXLE_CHECK(rank >= 0 && rank < world, what, ": expected rank in [0, ", world, "), got ", rank);
  m.world_size = int(world);
  m.rank = int(rank);

  const json& ps = get_array(j, "params", "the object", what);
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::string where = "params[" + std::to_string(i) + "]";
    const json& pj = ps[i];
    AXLE_CHECK(pj.is_object(), what, ": expected ", where, " to be an object, got ", type_name(pj));
    Param p;
    p.shard_name = get_string(field(pj, "shard_name", where, what), where + ".shard_name", what);
    AXLE_CHECK(!p.shard_name.empty(), what, ": expected a non-empty ", where, ".shard_name");
    const json& names = get_array(pj, "names", where, what);
    for (size_t k = 0; k < names.size(); ++k)
      p.names.push_back(get_string(names[k], where + ".names[" + std::to_string(k) + "]", what));
    const json& shapes = get_array(pj, "shapes", where, what);
    AXLE_CHECK(shapes.size() == names.size(), what, ": expected one shape per name in ", where, " (",
               names.size(), " names), got ", shapes.size(), " shapes");
    AXLE_CHECK(!names.empty(), what, ": expected at least one name in ", where);
    int64_t numel = 0;
    for (size_t k = 0; k < shapes.size(); ++k) {
      const std::string sw = where + ".shapes[" + std::to_string(k) + "]";
      AXLE_CHECK(shapes[k].is_array(), what, ": expected ", sw, " to be an array, got ", type_name(shapes[k]));
      Shape s;
      int64_t n = 1;
      for (const json& d : shapes[k]) {
        AXLE_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= (int64_t(1) << 40), what,
                   ": expected ", sw, " to hold sizes in [0, 2^40], got ", d.dump());
        s.push_back(d.get<int64_t>());
        n = s.back() == 0 || n <= (int64_t(1) << 50) / s.back() ? n * s.back() : (int64_t(1) << 50) + 1;
      }
      AXLE_CHECK(n <= (int64_t(1) << 50), what, ": expected ", sw, " to hold at most 2^50 elements");
      numel += n;
      p.shapes.push_back(std::move(s));
    }
    const json& dim0 = field(pj, "dim0", where, what);
    AXLE_CHECK(dim0.is_boolean(), what, ": expected ", where, ".dim0 to be a boolean, got ", type_name(dim0));
    p.dim0 = dim0.get<bool>();
    p.padded_numel = get_int(pj, "padded_numel", where, what);
    AXLE_CHECK(p.padded_numel >= 0 && p.padded_numel % world == 0, what, ": expected ", where,
               ".padded_numel to be a non-negative multiple of world_size ", world, ", got ", p.padded_numel);
    if (p.dim0) {
      AXLE_CHECK(p.names.size() == 1 && !p.shapes[0].empty(), what, ": expected ", where,
                 " (dim0) to hold one parameter of at least one dimension");
      AXLE_CHECK(p.padded_numel >= p.shapes[0][0], what, ": expected ", where, ".padded_numel (the padded dim 0) >= ",
                 p.shapes[0][0], ", got ", p.padded_numel);
    } else {
      AXLE_CHECK(p.padded_numel >= numel, what, ": expected ", where, ".padded_numel >= ", numel,
                 " (the elements of its parameters), got ", p.padded_numel);
    }
    m.params.push_back(std::move(p));
  }
  const json& bs = get_array(j, "buffer_names", "the object", what);
  for (size_t k = 0; k < bs.size(); ++k)
    m.buffer_names.push_back(get_string(bs[k], "buffer_names[" + std::to_string(k) + "]", what));
  return m;
}

}  // namespace axle::fsdp
