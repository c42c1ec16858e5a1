// A decoder-only transformer language model (GPT-2 style, pre-LayerNorm), the transformer
// workload of axle-train (`--model gpt`). Parameter names follow the PyTorch peer model
// (shared/reference/peers/gpt_pt2.py), so its state dicts load strictly:
//   tok.weight [vocab, C], pos.weight [block, C],
//   blocks.<i>.{ln1, qkv, proj, ln2, fc, out}.{weight, bias}, ln.{weight, bias};
// the output projection `head` is tied to tok.weight (not a separate entry).
//
//   axle::models::GPT model({.vocab_size = corpus->vocab_size()});
//   axle::Tensor loss = model.loss(x, y);          // x, y int64 [B, T], T <= block_size
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "axle/generator.h"
#include "axle/nn/modules.h"
#include "axle/optim/optimizer.h"
#include "axle/xs.h"

namespace axle::models {

struct GPTConfig {
  int64_t vocab_size = 96;
  int64_t block_size = 128;  ///< the longest sequence (position embeddings)
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;      ///< a multiple of n_head
  double dropout = 0.1;      ///< embeddings, attention weights and both residual branches
};

/// One pre-LayerNorm block: x + proj(attention(ln1(x))), then x + out(gelu_tanh(fc(ln2(x)))).
class GPTBlock : public nn::Module {
 public:
  explicit GPTBlock(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  ///< [B, T, C] -> [B, T, C]
  std::string name() const override { return "GPTBlock"; }
  std::string extra_repr() const override;

  int64_t n_head;
  double dropout;
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::Linear> qkv, proj, fc, out;  ///< qkv packs q, k, v: [3C, C]
};

class GPT : public nn::Module {
 public:
  /// Initialised as GPT-2: weights ~ N(0, 0.02) (proj and out: 0.02 / sqrt(2 n_layer)),
  /// biases 0, LayerNorms 1 and 0, from axle's default generator (seed it first).
  /// Throws axle::Error for a non-positive size or n_embd not a multiple of n_head.
  explicit GPT(GPTConfig c);
  /// Logits [B, T, vocab] of int64 tokens idx [B, T] (T <= block_size).
  Tensor forward(const Tensor& idx) override;
  /// Mean cross entropy of forward(idx) against int64 targets [B, T].
  Tensor loss(const Tensor& idx, const Tensor& targets);
  std::string name() const override { return "GPT"; }
  std::string extra_repr() const override;

  /// AdamW's usual groups for GPT training: matrices (the >= 2-D parameters: embeddings and
  /// Linear weights) with `weight_decay`, vectors (biases, LayerNorm) with none.
  std::vector<optim::ParamGroup> param_groups(double weight_decay) const;

  /// Tensor parallelism over the mesh axis `axis` (Megatron's split, for `spmd`): qkv and fc
  /// column-parallel (weights sharded on dim 0), proj and out row-parallel (on dim 1),
  /// embeddings and LayerNorms replicated. Call after to("xla") under SPMD.
  void shard_tensor_parallel(const xs::Mesh& mesh, const std::string& axis = "model");

  /// Samples n tokens after `prompt` (ids; empty: starts from id 0): each step feeds the last
  /// block_size tokens, divides the last logits by `temperature` (> 0), keeps the top_k most
  /// likely (0: all) and draws from their softmax with `gen`. Runs in eval mode (restoring the
  /// mode after) and without gradients; returns prompt + the n new ids. Deterministic for a
  /// seeded generator.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t n, double temperature, int64_t top_k,
                                Generator& gen);

  const GPTConfig& config() const { return cfg_; }
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::Sequential> blocks;
  std::shared_ptr<nn::LayerNorm> ln;

 private:
  GPTConfig cfg_;
};

}  // namespace axle::models
