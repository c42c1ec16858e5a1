// Replica-group handles (replica_groups.h): an interned, append-only list.
#include "ops/replica_groups.h"

#include <map>
#include <memory>
#include <mutex>

#include "axle/error.h"

namespace axle::ops {
namespace {

struct Interned {
  std::mutex mu;
  std::vector<std::unique_ptr<const std::vector<std::vector<int>>>> list;
  std::map<std::vector<std::vector<int>>, int64_t> ids;
};

Interned& interned() {
  static Interned* i = new Interned();  // leaked on purpose: programs outlive static destruction
  return *i;
}

int64_t handle_of(size_t index) { return -2 - int64_t(index); }

}  // namespace

int64_t replica_groups_attr(const std::vector<std::vector<int>>& groups) {
  AXLE_CHECK(!groups.empty() && !groups[0].empty(), "[spmd] expected at least one non-empty replica group");
  size_t n = 0;
  for (const auto& g : groups) {
    AXLE_CHECK(g.size() == groups[0].size(), "[spmd] expected replica groups of one size, got sizes ",
               groups[0].size(), " and ", g.size());
    n += g.size();
  }
  std::vector<char> seen(n, 0);
  for (const auto& g : groups)
    for (int d : g) {
      AXLE_CHECK(d >= 0 && size_t(d) < n, "[spmd] expected replica groups partitioning devices 0..", n - 1,
                 ", got device ", d);
      AXLE_CHECK(!seen[size_t(d)], "[spmd] device ", d, " is in more than one replica group");
      seen[size_t(d)] = 1;
    }
  Interned& in = interned();
  std::lock_guard<std::mutex> lock(in.mu);
  if (auto it = in.ids.find(groups); it != in.ids.end()) return it->second;
  const int64_t id = handle_of(in.list.size());
  in.list.push_back(std::make_unique<const std::vector<std::vector<int>>>(groups));
  in.ids[groups] = id;
  return id;
}

const std::vector<std::vector<int>>* replica_groups_of(int64_t group) {
  if (group > -2) return nullptr;
  const size_t index = size_t(-2 - group);
  Interned& in = interned();
  std::lock_guard<std::mutex> lock(in.mu);
  return index < in.list.size() ? in.list[index].get() : nullptr;
}

}  // namespace axle::ops
