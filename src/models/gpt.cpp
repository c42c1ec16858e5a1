// The GPT language model (axle/models/gpt.h): modules, initialisation, parameter groups,
// tensor-parallel shardings and sampling.
#include "axle/models/gpt.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "axle/autograd.h"
#include "axle/error.h"
#include "axle/ops.h"
#include "core/tensor_impl.h"

namespace axle::models {
namespace {

/// Replaces t's value by N(0, std) samples from the default generator (keeping its identity).
void normal_init(const Tensor& t, double std) {
  NoGradGuard g;
  t.set_data(mul(randn(t.shape()), std));
}

void zero_init(const Tensor& t) {
  if (!t.defined()) return;
  NoGradGuard g;
  t.set_data(zeros(t.shape()));
}

}  // namespace

// ---------------------------------------------------------------- GPTBlock

GPTBlock::GPTBlock(const GPTConfig& c) : n_head(c.n_head), dropout(c.dropout) {
  const int64_t C = c.n_embd;
  ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(C));
  qkv = register_module("qkv", std::make_shared<nn::Linear>(C, 3 * C));
  proj = register_module("proj", std::make_shared<nn::Linear>(C, C));
  ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(C));
  fc = register_module("fc", std::make_shared<nn::Linear>(C, 4 * C));
  out = register_module("out", std::make_shared<nn::Linear>(4 * C, C));
}

Tensor GPTBlock::forward(const Tensor& x) {
  AXLE_CHECK(x.dim() == 3, "[GPTBlock] expected an input of shape [B, T, C], got ", shape_str(x.shape()));
  const int64_t B = x.shape()[0], T = x.shape()[1], C = x.shape()[2], H = n_head;
  const bool train = is_training() && dropout > 0;
  // [B, T, 3C] -> three [B, H, T, C/H]
  Tensor packed = (*qkv)((*ln1)(x));
  auto heads = [&](int64_t i) { return transpose(reshape(slice(packed, 2, i * C, (i + 1) * C), {B, T, H, C / H}), 1, 2); };
  Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2),
                                          {.is_causal = true, .dropout_p = train ? dropout : 0.0});
  y = reshape(transpose(y, 1, 2), {B, T, C});
  Tensor h = axle::dropout((*proj)(y), dropout, is_training());
  Tensor r = add(x, h);
  Tensor m = (*out)(gelu((*fc)((*ln2)(r)), "tanh"));
  return add(r, axle::dropout(m, dropout, is_training()));
}

std::string GPTBlock::extra_repr() const {
  return "n_head=" + std::to_string(n_head) + ", dropout=" + std::to_string(dropout);
}

// ---------------------------------------------------------------- GPT

GPT::GPT(GPTConfig c) : cfg_(c) {
  AXLE_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0,
             "[GPT] expected positive sizes, got vocab_size=", c.vocab_size, ", block_size=", c.block_size,
             ", n_layer=", c.n_layer, ", n_head=", c.n_head, ", n_embd=", c.n_embd);
  AXLE_CHECK(c.n_embd % c.n_head == 0, "[GPT] expected n_embd a multiple of n_head, got n_embd=", c.n_embd,
             ", n_head=", c.n_head);
  AXLE_CHECK(c.dropout >= 0 && c.dropout < 1, "[GPT] expected dropout in [0, 1), got ", c.dropout);
  tok = register_module("tok", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd));
  pos = register_module("pos", std::make_shared<nn::Embedding>(c.block_size, c.n_embd));
  blocks = register_module("blocks", std::make_shared<nn::Sequential>());
  for (int64_t i = 0; i < c.n_layer; ++i) blocks->push_back(std::make_shared<GPTBlock>(c));
  ln = register_module("ln", std::make_shared<nn::LayerNorm>(c.n_embd));
  // GPT-2's initialisation; the residual projections scaled down by the depth.
  const double resid_std = 0.02 / std::sqrt(2.0 * double(c.n_layer));
  normal_init(tok->weight, 0.02);
  normal_init(pos->weight, 0.02);
  for (const auto& m : blocks->modules()) {
    auto& b = static_cast<GPTBlock&>(*m);
    normal_init(b.qkv->weight, 0.02);
    normal_init(b.fc->weight, 0.02);
    normal_init(b.proj->weight, resid_std);
    normal_init(b.out->weight, resid_std);
    for (const auto& l : {b.qkv, b.proj, b.fc, b.out}) zero_init(l->bias);
  }
}

Tensor GPT::forward(const Tensor& idx) {
  AXLE_CHECK(idx.defined() && idx.dim() == 2, "[GPT] expected token ids of shape [B, T], got ",
             idx.defined() ? shape_str(idx.shape()) : std::string("an undefined tensor"));
  AXLE_CHECK(idx.dtype() == kInt64, "[GPT] expected int64 token ids, got ", idx.dtype());
  const int64_t T = idx.shape()[1];
  AXLE_CHECK(T >= 1 && T <= cfg_.block_size, "[GPT] expected a sequence of 1..", cfg_.block_size,
             " tokens (block_size), got ", T);
  Tensor positions = arange(T, {.dtype = kInt64, .device = idx.device()});
  Tensor x = add((*tok)(idx), (*pos)(positions));
  x = dropout(x, cfg_.dropout, is_training());
  x = (*ln)((*blocks)(x));
  return linear(x, tok->weight);  // the head, tied to the token embedding
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) {
  Tensor logits = forward(idx);
  AXLE_CHECK(targets.defined() && targets.shape() == idx.shape(), "[GPT.loss] expected targets of shape ",
             shape_str(idx.shape()), ", got ", targets.defined() ? shape_str(targets.shape()) : std::string("none"));
  AXLE_CHECK(targets.dtype() == kInt64, "[GPT.loss] expected int64 targets (token ids), got ", targets.dtype());
  return cross_entropy(reshape(logits, {-1, cfg_.vocab_size}), reshape(targets, {-1}));
}

std::string GPT::extra_repr() const {
  return "vocab_size=" + std::to_string(cfg_.vocab_size) + ", block_size=" + std::to_string(cfg_.block_size) +
         ", n_layer=" + std::to_string(cfg_.n_layer) + ", n_head=" + std::to_string(cfg_.n_head) +
         ", n_embd=" + std::to_string(cfg_.n_embd);
}

std::vector<optim::ParamGroup> GPT::param_groups(double weight_decay) const {
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  return {optim::ParamGroup(decay, -1, {{"weight_decay", weight_decay}}),
          optim::ParamGroup(no_decay, -1, {{"weight_decay", 0.0}})};
}

void GPT::shard_tensor_parallel(const xs::Mesh& mesh, const std::string& axis) {
  AXLE_CHECK(mesh.get_axis_name_idx(axis).has_value(), "[GPT.shard_tensor_parallel] expected a mesh with axis '",
             axis, "', got ", mesh.str());
  // Per block, the partitioner then all-reduces the [B, T, C] activation after proj and
  // after out in forward, and at the inputs of qkv and fc in backward; no weight is ever
  // gathered. qkv packs q, k, v one after the other ([3C, C]): its contiguous split does not
  // give a device whole heads of all three (no tiled sharding can), so its [B, T, 3C]
  // output is gathered once per block in forward, and dq, dk, dv in backward (docs/spmd.md).
  for (const auto& m : blocks->modules()) {
    auto& b = static_cast<GPTBlock&>(*m);
    for (const auto& col : {b.qkv, b.fc}) {  // column-parallel: output features split
      xs::mark_sharding(col->weight, mesh, {axis, xs::None});
      xs::mark_sharding(col->bias, mesh, {axis});
    }
    for (const auto& row : {b.proj, b.out})  // row-parallel: input features split
      xs::mark_sharding(row->weight, mesh, {xs::None, axis});
  }
}

std::vector<int64_t> GPT::generate(const std::vector<int64_t>& prompt, int64_t n, double temperature, int64_t top_k,
                                   Generator& gen) {
  AXLE_CHECK(n >= 0, "[GPT.generate] expected n >= 0, got ", n);
  AXLE_CHECK(temperature > 0, "[GPT.generate] expected temperature > 0, got ", temperature);
  AXLE_CHECK(top_k >= 0, "[GPT.generate] expected top_k >= 0 (0: all), got ", top_k);
  for (int64_t id : prompt)
    AXLE_CHECK(id >= 0 && id < cfg_.vocab_size, "[GPT.generate] expected prompt ids in [0, ", cfg_.vocab_size,
               "), got ", id);
  // Eval mode for the sampling, the caller's mode restored after (also on an error).
  struct ModeGuard {
    Module& m;
    bool was = m.is_training();
    ~ModeGuard() { m.train(was); }
  } mode{*this};
  eval();
  NoGradGuard no_grad;
  const Device dev = tok->weight.device();
  std::vector<int64_t> ids = prompt.empty() ? std::vector<int64_t>{0} : prompt;
  const int64_t T = cfg_.block_size, V = cfg_.vocab_size;
  for (int64_t step = 0; step < n; ++step) {
    // A full window of block_size tokens (zero-padded after the last one): one shape, so the
    // lazy device compiles one graph; causal attention makes the padding invisible.
    const int64_t len = std::min<int64_t>(int64_t(ids.size()), T);
    std::vector<int64_t> window(size_t(T), 0);
    std::copy(ids.end() - len, ids.end(), window.begin());
    Tensor logits = forward(from_vector(window, {1, T}).to(dev));
    // The last real position's logits, picked by an index tensor (data, not an attribute),
    // so the graph stays the same while the window fills.
    Tensor last = from_vector(std::vector<int64_t>{len - 1}, {1}).to(dev);
    std::vector<float> l = reshape(index_select(logits, 1, last), {V}).cpu().to_vector<float>();
    std::vector<double> w(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) w[size_t(v)] = double(l[size_t(v)]) / temperature;
    if (top_k > 0 && top_k < V) {  // keep the k largest (ties at the k-th all kept)
      std::vector<double> sorted = w;
      std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
      const double kth = sorted[size_t(top_k - 1)];
      for (double& x : w)
        if (x < kth) x = -std::numeric_limits<double>::infinity();
    }
    const double mx = *std::max_element(w.begin(), w.end());
    double total = 0;
    for (double& x : w) total += (x = std::exp(x - mx));
    // One uniform draw in [0, total) from the generator's next 64 random bits.
    const double u = double(gen.next_u64() >> 11) * 0x1.0p-53 * total;
    double acc = 0;
    int64_t pick = V - 1;
    for (int64_t v = 0; v < V; ++v) {
      acc += w[size_t(v)];
      if (u < acc && w[size_t(v)] > 0) { pick = v; break; }
    }
    ids.push_back(pick);
  }
  if (prompt.empty()) ids.erase(ids.begin());
  return ids;
}

}  // namespace axle::models
