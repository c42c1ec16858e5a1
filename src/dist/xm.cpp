// xm::master_print and rendezvous (xm::optimizer_step is in src/optim/optimizer_step.cpp).
#include <cstdio>
#include <cstring>

#include "axle/dist.h"
#include "axle/xm.h"
#include "dist/dist_internal.h"

namespace axle::xm {

void master_print(const std::string& line) {
  if (runtime::global_ordinal() != 0) return;
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::vector<std::string> rendezvous(const std::string& tag, const std::string& payload) {
  const int world = runtime::world_size();
  if (world == 1) return {payload};
  dist::ProcessGroup& g = dist::default_group();
  // Exchange lengths, then the padded (tag, payload) records.
  const std::string rec = tag + '\0' + payload;
  std::vector<int64_t> lens(static_cast<size_t>(world));
  int64_t mine = int64_t(rec.size());
  g.all_gather(&mine, lens.data(), 1, kInt64);
  int64_t max_len = 0;
  for (int64_t l : lens) max_len = std::max(max_len, l);
  std::vector<uint8_t> in(size_t(max_len), 0), all(size_t(max_len) * size_t(world));
  std::memcpy(in.data(), rec.data(), rec.size());
  g.all_gather(in.data(), all.data(), max_len, kUInt8);
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) {
    std::string s(reinterpret_cast<const char*>(all.data()) + size_t(r) * size_t(max_len), size_t(lens[size_t(r)]));
    const size_t z = s.find('\0');
    const std::string their_tag = s.substr(0, z);
    AXLE_CHECK(their_tag == tag, "[rendezvous] rank ", g.rank(), " reached rendezvous '", tag, "' but rank ", r,
               " reached '", their_tag, "': every rank must pass the same rendezvous points in the same order");
    out.push_back(z == std::string::npos ? std::string() : s.substr(z + 1));
  }
  return out;
}

}  // namespace axle::xm
