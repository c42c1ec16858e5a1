// Character-level language-modelling data: a UTF-8 corpus, its vocabulary, and random
// windows of it as a map-style Dataset, so the DataLoader, the samplers and the device
// loaders work on text exactly as on images.
//
//   auto corpus = axle::data::TextCorpus::from_path("/usr/share/games/fortunes");
//   auto train = std::make_shared<axle::data::TextWindows>(corpus, axle::data::Split::Train, 128);
//   auto sampler = std::make_shared<axle::data::RandomWindowSampler>(train->size(), 32 * 100, seed);
//   axle::data::DataLoader loader(train, {.batch_size = 32}, sampler);   // x, y: int64 [32, 128]
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "axle/data/dataset.h"
#include "axle/data/sampler.h"

namespace axle::data {

enum class Split { Train, Val };

/// A UTF-8 text, split into characters (Unicode code points) and encoded as token ids: the
/// vocabulary is the sorted set of distinct code points of the whole text. The first
/// floor(n * (1 - val_fraction)) of the n tokens (in double arithmetic, as Python's
/// int(n * (1 - f))) are the training split, the rest the validation split (deterministic:
/// no shuffling). Either split may be too short for a window; TextWindows reports that.
class TextCorpus {
 public:
  /// Reads `path`: a UTF-8 text file, or a directory whose regular files (not hidden, not
  /// `*.dat`, not symlinks such as fortunes' `*.u8`, not subdirectories; in byte order of
  /// their names) are concatenated as they are. Throws axle::Error naming the path for a
  /// missing or unreadable path (or one that is neither a regular file nor a directory), a
  /// directory without text files, an empty text, invalid UTF-8 (naming the file and the
  /// byte offset in it: each file is decoded on its own), or a val_fraction outside (0, 1).
  /// Strict UTF-8: no overlong forms, surrogates or code points above U+10FFFF.
  static std::shared_ptr<TextCorpus> from_path(const std::string& path, double val_fraction = 0.1);
  /// The same from text in memory (`source` names it in messages).
  static std::shared_ptr<TextCorpus> from_text(std::string_view utf8, double val_fraction = 0.1,
                                               const std::string& source = "text");

  int64_t vocab_size() const { return int64_t(vocab_.size()); }
  /// Token id -> code point.
  const std::vector<char32_t>& vocab() const { return vocab_; }
  /// Ids of the characters of `utf8`; throws axle::Error for a character outside the
  /// vocabulary (naming it and its byte offset) or invalid UTF-8.
  std::vector<int64_t> encode(std::string_view utf8) const;
  /// UTF-8 text of token ids; throws axle::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids) const;

  /// The tokens of a split.
  const std::vector<int32_t>& tokens(Split s) const { return s == Split::Train ? train_ : val_; }
  const std::string& source() const { return source_; }

 private:
  /// Numbers the vocabulary and splits the decoded text (checks val_fraction).
  void build(const std::vector<char32_t>& chars, double val_fraction);

  std::string source_;
  std::vector<char32_t> vocab_;
  std::vector<int32_t> train_, val_;
};

/// Every window of block_size + 1 consecutive tokens of one split: example i is
/// (data = tokens[i, i + block_size), target = tokens[i + 1, i + block_size + 1)), int64
/// [block_size] each; size() = tokens - block_size. Throws axle::Error (naming the split, its
/// length and block_size) when the split is too short for one window. get_batch fills the
/// [B, block_size] data and target tensors in one pass over the windows; it only reads the
/// corpus, so DataLoader workers may call it at once.
class TextWindows : public Dataset {
 public:
  TextWindows(std::shared_ptr<const TextCorpus> corpus, Split split, int64_t block_size);
  int64_t size() const override;
  Example get(int64_t i) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  int64_t block_size() const { return block_; }
  const TextCorpus& corpus() const { return *corpus_; }

 private:
  void check_index(int64_t k) const;

  std::shared_ptr<const TextCorpus> corpus_;
  Split split_;
  int64_t block_;
};

/// Window starts drawn uniformly with replacement from [0, n): `per_epoch` indices per
/// epoch, index j of epoch e a pure function of (seed, rank, e, j), so that the batch of
/// any step is known without replaying the run (resume is bit-identical) and each rank
/// (0 <= rank < num_replicas) draws its own windows. Index j is floor(r * n / 2^64), r the
/// 64-bit half j % 2 of Philox block (e << 44 | rank << 32 | j / 2) keyed by `seed` (so
/// epochs < 2^20, num_replicas <= 4096, per_epoch <= 2^33; checked).
class RandomWindowSampler : public Sampler {
 public:
  RandomWindowSampler(int64_t n, int64_t per_epoch, uint64_t seed, int num_replicas = 1, int rank = 0);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return per_epoch_; }

 private:
  int64_t n_, per_epoch_;
  uint64_t seed_;
  int replicas_, rank_;
};

}  // namespace axle::data
