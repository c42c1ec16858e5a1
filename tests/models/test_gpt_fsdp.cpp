// The GPT (axle/models/gpt.h) under FSDP v1 (issue 15 item 5): XlaFullyShardedDataParallel
// over 2 processes (launch + Gloo), one unit per GPTBlock, the head tied to tok.weight,
// against the plain model computing both ranks' halves of the batch.
//
// launch() re-executes this binary; a child runs only the test that launched it
// (tests/support/test_util.h launch_test_main). Parent-side code never touches the xla device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "axle/fsdp.h"
#include "axle/models/gpt.h"
#include "axle/nn/utils.h"
#include "axle/optim/adam.h"
#include "gpt_harness.h"
#include "lazy/lazy_internal.h"
#include "test_util.h"

using namespace axle;
using models::GPT;
using namespace axle::gpt_test;

namespace {

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The full parameters of an FSDP tree, consolidated from every rank's shards (cpu).
std::map<std::string, std::vector<float>> consolidate(const fsdp::FSDP& m) {
  std::map<std::string, std::vector<float>> out;
  const fsdp::ShardMetadata md = m.get_shard_metadata();
  std::map<std::string, Tensor> shards;
  for (const auto& [name, t] : m.named_parameters()) shards[name] = t;
  for (const auto& p : md.params) {
    EXPECT_TRUE(shards.count(p.shard_name)) << p.shard_name;
    if (!shards.count(p.shard_name)) continue;
    const Tensor whole = dist::all_gather(shards[p.shard_name].detach().cpu());  // rank order
    const std::vector<float> v = whole.contiguous().to_vector<float>();
    size_t off = 0;
    for (size_t i = 0; i < p.names.size(); ++i) {
      int64_t n = 1;
      for (int64_t d : p.shapes[i]) n *= d;
      out[p.names[i]] = std::vector<float>(v.begin() + long(off), v.begin() + long(off + size_t(n)));
      off += size_t(n);
    }
  }
  return out;
}

// `steps` steps on 2 ranks, each rank taking half of the global batch: the plain GPT on
// this rank computing both halves (the reference: the mean of the two halves' losses), or
// the GPT under FSDP v1 with one unit per GPTBlock. AdamW (weight decay on every parameter:
// FSDP's shards are flat, so the by-rank groups of param_groups do not apply) and
// gradient clipping (FSDP's own clip_grad_norm_, over every rank's shards). Returns this
// rank's half-batch losses; `graph` gets the last step's program text (AXLE_SAVE_GRAPHS).
TrainRun train_fsdp1(bool fsdp, int rank, int steps, std::string* graph = nullptr) {
  const Device dev = device();
  manual_seed(0);
  auto gpt = std::make_shared<GPT>(small());
  gpt->to(dev);
  std::shared_ptr<fsdp::FSDP> f;
  if (fsdp) f = std::make_shared<fsdp::FSDP>(gpt, fsdp::FSDPOptions{.auto_wrap_policy = fsdp::transformer_auto_wrap_policy({"GPTBlock"})});
  const std::vector<Tensor> params = f ? f->parameters() : gpt->parameters();
  optim::AdamW opt(params, {.lr = 3e-3, .weight_decay = 0.1});
  const int64_t per = kBatch / 2;
  TrainRun r;
  std::vector<Tensor> losses, norms;
  const std::string dir = "/tmp/axle-gpt-fsdp-" + std::to_string(::getpid());
  for (int s = 0; s < steps; ++s) {
    if (graph && s == steps - 1) {  // compiled anew (a cold cache) and saved
      lazy::clear_graph_cache();
      setenv("AXLE_SAVE_GRAPHS", dir.c_str(), 1);
    }
    const Batch b = batch_of(s);
    auto st = axle::step();
    opt.zero_grad();
    auto half = [&](const Tensor& t, int k) { return t.narrow(0, k * per, per).contiguous().to(dev); };
    auto loss_of = [&](nn::Module& m, int k) {
      return cross_entropy(reshape(m(half(b.x, k)), {-1, kVocab}), reshape(half(b.y, k), {-1}));
    };
    if (f) {
      Tensor loss = loss_of(*f, rank);
      loss.backward();
      norms.push_back(f->clip_grad_norm_(1.0));
      losses.push_back(loss);
    } else {
      Tensor l0 = loss_of(*gpt, 0), l1 = loss_of(*gpt, 1);
      mul(add(l0, l1), 0.5).backward();
      norms.push_back(nn::utils::clip_grad_norm_(params, 1.0));
      losses.push_back(rank == 0 ? l0 : l1);
    }
    opt.step();
  }
  for (const Tensor& l : losses) r.losses.push_back(l.item());
  for (const Tensor& n : norms) r.grad_norms.push_back(n.item());
  if (graph) {
    unsetenv("AXLE_SAVE_GRAPHS");
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().filename().string().ends_with(".00.input.txt")) *graph += axle::test::slurp(e.path().string());
    std::filesystem::remove_all(dir);
  }
  if (f) {
    r.params = consolidate(*f);
  } else {
    for (const auto& [name, t] : gpt->named_parameters()) r.params[name] = t.cpu().contiguous().to_vector<float>();
  }
  return r;
}

}  // namespace

TEST(GptFsdp1, PerBlockUnitsAndTiedHeadMatchOneDevice) {
  axle::test::run_ranks(2, [](int rank) {
    const TrainRun ref = train_fsdp1(false, rank, 5);
    std::string graph;
    const TrainRun got = train_fsdp1(true, rank, 5, &graph);
    expect_same(got, ref, 1e-5, "fsdp v1 rank " + std::to_string(rank));
    // 28 parameters (tok, pos, ln.{weight,bias} in the root unit; 12 per block): each
    // gradient is reduce-scattered once, tok.weight's too although the embedding and the
    // head both use it (its two contributions are summed first).
    EXPECT_EQ(count_of(graph, " = reduce_scatter("), 28) << graph;
    // tok.weight (768 elements, the only such parameter): one all-gather serves the embedding
    // and the head in forward, one re-gather serves backward (reshard_after_forward).
    EXPECT_EQ(count_of(graph, " = all_gather("), 42) << graph;
    int tok_gathers = 0, tok_scatters = 0;
    for (size_t at = graph.find(" = all_gather("); at != std::string::npos; at = graph.find(" = all_gather(", at + 1))
      tok_gathers += graph.compare(graph.find('\n', at) - 12, 12, "float32[768]") == 0 ? 1 : 0;
    for (size_t at = graph.find(" = reduce_scatter("); at != std::string::npos; at = graph.find(" = reduce_scatter(", at + 1))
      tok_scatters += graph.compare(graph.find('\n', at) - 12, 12, "float32[384]") == 0 ? 1 : 0;
    EXPECT_EQ(tok_gathers, 2) << graph;
    EXPECT_EQ(tok_scatters, 1) << graph;
  });
}

int main(int argc, char** argv) { return axle::test::launch_test_main(argc, argv); }
