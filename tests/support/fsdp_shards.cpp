#include "fsdp_shards.h"

#include <gtest/gtest.h>

#include "axle/dist.h"

namespace axle::test {

std::map<std::string, Tensor> gather_full_params(const fsdp::FSDP& model) {
  const fsdp::ShardMetadata md = model.get_shard_metadata();
  std::map<std::string, Tensor> shards;
  for (const auto& [name, t] : model.named_parameters()) shards[name] = t;
  std::map<std::string, Tensor> out;
  for (const auto& p : md.params) {
    EXPECT_TRUE(shards.count(p.shard_name)) << p.shard_name;
    if (!shards.count(p.shard_name)) continue;
    // [world * shard, ...] in rank order, gathered on the cpu (no graph on the device).
    const Tensor whole = dist::all_gather(shards[p.shard_name].detach().cpu());
    if (p.dim0) {  // one parameter split along its dim 0: the padded rows come last
      out[p.names[0]] = whole.narrow(0, 0, p.shapes[0][0]).contiguous();
      continue;
    }
    int64_t off = 0;  // a flattened unit: its parameters in order, then the padding
    for (size_t k = 0; k < p.names.size(); ++k) {
      int64_t n = 1;
      for (int64_t d : p.shapes[k]) n *= d;
      out[p.names[k]] = whole.narrow(0, off, n).reshape(p.shapes[k]).contiguous();
      off += n;
    }
  }
  return out;
}

}  // namespace axle::test
