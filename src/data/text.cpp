// Character-level text data: UTF-8 decoding with byte-offset errors, the corpus and its
// vocabulary, windows of a split as a Dataset, and the seeded window sampler.
#include "axle/data/text.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "axle/error.h"
#include "axle/generator.h"
#include "core/tensor_impl.h"

namespace axle::data {

namespace {

namespace fs = std::filesystem;

constexpr char32_t kMaxCodePoint = 0x10FFFF;

std::string hex_byte(unsigned char b) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02X", unsigned(b));
  return s;
}

std::string code_point_name(char32_t c) {
  char s[16];
  std::snprintf(s, sizeof s, "U+%04X", unsigned(c));
  return s;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

// A character as a message shows it: 'c' (U+0063), or just U+000A for control characters.
std::string char_name(char32_t c) {
  if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0)) return code_point_name(c);
  std::string s = "'";
  append_utf8(s, c);
  return s + "' (" + code_point_name(c) + ")";
}

// Decodes well-formed UTF-8 (Unicode 15, table 3-7: no overlong forms, no surrogates,
// nothing above U+10FFFF) and calls emit(code point, byte offset) per character. Throws
// axle::Error "[who] source: invalid UTF-8 at byte offset K: expected ..., found ...".
template <class Emit>
void decode_utf8(std::string_view s, const char* who, const std::string& source, Emit&& emit) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  auto fail = [&](size_t off, const std::string& expected, const std::string& found) {
    AXLE_FAIL("[", who, "] ", source, ": invalid UTF-8 at byte offset ", off, ": expected ", expected, ", found ",
              found);
  };
  size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {  // the common case: runs of ASCII
      emit(char32_t(b), i);
      ++i;
      continue;
    }
    int len;
    char32_t c;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2, c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3, c = b & 0x0F;
      if (b == 0xE0) lo = 0xA0;  // overlong below U+0800
      if (b == 0xED) hi = 0x9F;  // surrogates U+D800..U+DFFF
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4, c = b & 0x07;
      if (b == 0xF0) lo = 0x90;  // overlong below U+10000
      if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      fail(i, "a character's first byte (0x00-0x7F, 0xC2-0xF4)",
           hex_byte(b) + (b >= 0x80 && b <= 0xBF ? " (a continuation byte without a first byte)"
                          : b <= 0xC1          ? " (an overlong encoding)"
                                               : " (never valid in UTF-8)"));
    }
    for (int k = 1; k < len; ++k) {
      const unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
      if (i + k >= n)
        fail(i, std::to_string(len) + " bytes for the character starting with " + hex_byte(b),
             "the end of the text after " + std::to_string(k));
      const unsigned char t = p[i + k];
      if (t < lo_k || t > hi_k)
        fail(i + k, "byte " + std::to_string(k + 1) + " of the character starting with " + hex_byte(b) + " at offset " +
                        std::to_string(i) + " in " + hex_byte(lo_k) + "-" + hex_byte(hi_k),
             hex_byte(t));
      c = (c << 6) | (t & 0x3F);
    }
    emit(c, i);
    i += size_t(len);
  }
}

// The bytes of a regular file. Throws naming the path and the OS's reason.
std::string read_file(const fs::path& path, const char* who) {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  errno = 0;
  std::unique_ptr<std::FILE, Closer> f(std::fopen(path.c_str(), "rb"));
  AXLE_CHECK(f != nullptr, "[", who, "] cannot open ", path.string(), ": ", errno ? std::strerror(errno) : "unknown error");
  std::error_code ec;
  const auto hint = fs::file_size(path, ec);
  std::string out;
  if (!ec && hint > 0) out.reserve(size_t(hint));
  char buf[1 << 16];
  for (;;) {
    const size_t got = std::fread(buf, 1, sizeof buf, f.get());
    out.append(buf, got);
    if (got < sizeof buf) {
      AXLE_CHECK(!std::ferror(f.get()), "[", who, "] cannot read ", path.string(), " after ", out.size(),
                 " bytes: ", errno ? std::strerror(errno) : "read error");
      break;
    }
  }
  return out;
}

}  // namespace

// ---- TextCorpus ----

std::shared_ptr<TextCorpus> TextCorpus::from_path(const std::string& path, double val_fraction) {
  constexpr const char* who = "TextCorpus";
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  AXLE_CHECK(fs::exists(st), "[", who, "] cannot open ", path,
             ": no such file or directory (expected a UTF-8 text file or a directory of them)");
  // Each file is decoded on its own so that an error names the file and the offset in it.
  std::vector<std::pair<std::string, std::string>> files;  // (name, bytes)
  if (fs::is_directory(st)) {
    std::vector<fs::path> names;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.empty() || name[0] == '.') continue;                               // hidden
      if (name.size() >= 4 && name.compare(name.size() - 4, 4, ".dat") == 0) continue;  // strfile indexes
      std::error_code ec2;
      if (!fs::is_regular_file(it->symlink_status(ec2))) continue;  // symlinks (*.u8), directories, devices
      names.push_back(it->path());
    }
    AXLE_CHECK(!ec, "[", who, "] cannot read directory ", path, ": ", ec.message());
    AXLE_CHECK(!names.empty(), "[", who, "] ", path,
               ": expected text files in the directory (regular files, not hidden, not *.dat), found none");
    std::sort(names.begin(), names.end(), [](const fs::path& a, const fs::path& b) {
      return a.filename().string() < b.filename().string();
    });
    for (const fs::path& p : names) files.emplace_back(p.string(), read_file(p, who));
  } else {
    AXLE_CHECK(fs::is_regular_file(st), "[", who, "] cannot read ", path,
               ": expected a regular file or a directory, found ",
               fs::is_character_file(st) ? "a character device"
               : fs::is_block_file(st)   ? "a block device"
               : fs::is_fifo(st)         ? "a FIFO"
               : fs::is_socket(st)       ? "a socket"
                                         : "another kind of file");
    files.emplace_back(path, read_file(path, who));
  }
  size_t bytes = 0;
  for (const auto& f : files) bytes += f.second.size();
  AXLE_CHECK(bytes > 0, "[", who, "] ", path, ": expected at least one character of text, found an empty ",
             files.size() == 1 && files[0].first == path ? "file" : "directory (every text file is empty)");

  auto c = std::shared_ptr<TextCorpus>(new TextCorpus());
  c->source_ = path;
  std::vector<char32_t> chars;
  chars.reserve(bytes);
  for (const auto& f : files)
    decode_utf8(f.second, who, f.first, [&](char32_t ch, size_t) { chars.push_back(ch); });
  c->build(chars, val_fraction);
  return c;
}

std::shared_ptr<TextCorpus> TextCorpus::from_text(std::string_view utf8, double val_fraction,
                                                  const std::string& source) {
  AXLE_CHECK(!utf8.empty(), "[TextCorpus] ", source, ": expected at least one character of text, found an empty text");
  auto c = std::shared_ptr<TextCorpus>(new TextCorpus());
  c->source_ = source;
  std::vector<char32_t> chars;
  chars.reserve(utf8.size());
  decode_utf8(utf8, "TextCorpus", source, [&](char32_t ch, size_t) { chars.push_back(ch); });
  c->build(chars, val_fraction);
  return c;
}

void TextCorpus::build(const std::vector<char32_t>& chars, double val_fraction) {
  AXLE_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "[TextCorpus] ", source_,
             ": expected a validation fraction in (0, 1), got ", val_fraction);
  // The vocabulary: distinct code points in increasing order, through a dense table (the
  // whole code space is 1.1 M entries; one pass marks, one numbers, one encodes).
  std::vector<int32_t> id(size_t(kMaxCodePoint) + 1, -1);
  for (char32_t ch : chars) id[ch] = 0;
  vocab_.clear();
  for (char32_t ch = 0; ch <= kMaxCodePoint; ++ch)
    if (id[ch] == 0) {
      id[ch] = int32_t(vocab_.size());
      vocab_.push_back(ch);
    }
  const int64_t n = int64_t(chars.size());
  const int64_t n_train = std::clamp<int64_t>(int64_t(std::floor(double(n) * (1.0 - val_fraction))), 0, n);
  train_.resize(size_t(n_train));
  val_.resize(size_t(n - n_train));
  for (int64_t i = 0; i < n_train; ++i) train_[size_t(i)] = id[chars[size_t(i)]];
  for (int64_t i = n_train; i < n; ++i) val_[size_t(i - n_train)] = id[chars[size_t(i)]];
}

std::vector<int64_t> TextCorpus::encode(std::string_view utf8) const {
  std::vector<int64_t> ids;
  ids.reserve(utf8.size());
  decode_utf8(utf8, "TextCorpus::encode", "text to encode", [&](char32_t ch, size_t off) {
    const auto it = std::lower_bound(vocab_.begin(), vocab_.end(), ch);
    AXLE_CHECK(it != vocab_.end() && *it == ch, "[TextCorpus::encode] expected characters of the vocabulary of ",
               source_, " (", vocab_.size(), " characters), found ", char_name(ch), " at byte offset ", off);
    ids.push_back(int64_t(it - vocab_.begin()));
  });
  return ids;
}

std::string TextCorpus::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  const int64_t v = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    AXLE_CHECK(ids[i] >= 0 && ids[i] < v, "[TextCorpus::decode] expected token ids in [0, ", v, ") (the vocabulary of ",
               source_, "), found ", ids[i], " at position ", i);
    append_utf8(out, vocab_[size_t(ids[i])]);
  }
  return out;
}

// ---- TextWindows ----

namespace {
const char* split_name(Split s) { return s == Split::Train ? "training" : "validation"; }
}  // namespace

TextWindows::TextWindows(std::shared_ptr<const TextCorpus> corpus, Split split, int64_t block_size)
    : corpus_(std::move(corpus)), split_(split), block_(block_size) {
  AXLE_CHECK(corpus_ != nullptr, "[TextWindows] expected a corpus, got null");
  AXLE_CHECK(block_size >= 1, "[TextWindows] expected block_size >= 1, got ", block_size);
  const int64_t len = int64_t(corpus_->tokens(split_).size());
  AXLE_CHECK(len >= block_size + 1, "[TextWindows] the ", split_name(split_), " split of ", corpus_->source(),
             " is too short for one window: expected at least block_size + 1 = ", block_size + 1, " tokens, found ",
             len);
}

int64_t TextWindows::size() const { return int64_t(corpus_->tokens(split_).size()) - block_; }

namespace {
// Rows r of x and y are the window starting at starts[r] and the one after it by a token.
void fill_windows(const int32_t* tok, const std::vector<int64_t>& starts, int64_t t, int64_t* x, int64_t* y) {
  for (size_t r = 0; r < starts.size(); ++r) {
    const int32_t* src = tok + starts[r];
    int64_t* xr = x + int64_t(r) * t;
    int64_t* yr = y + int64_t(r) * t;
    for (int64_t j = 0; j < t; ++j) xr[j] = src[j];
    for (int64_t j = 0; j < t; ++j) yr[j] = src[j + 1];
  }
}
}  // namespace

void TextWindows::check_index(int64_t k) const {
  AXLE_CHECK(k >= 0 && k < size(), "[TextWindows] expected window indices in [0, ", size(), ") (the ",
             split_name(split_), " split's windows of ", block_, " tokens), got ", k);
}

Example TextWindows::get(int64_t i) const {
  check_index(i);
  Tensor x = make_tensor({block_}, kInt64), y = make_tensor({block_}, kInt64);
  fill_windows(corpus_->tokens(split_).data(), {i}, block_, x.data<int64_t>(), y.data<int64_t>());
  return {x, y};
}

Example TextWindows::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t b = int64_t(indices.size());
  AXLE_CHECK(b > 0, "[TextWindows::get_batch] expected at least one index, got none");
  for (int64_t k : indices) check_index(k);
  // Only reads the corpus and writes tensors of its own: safe from several threads at once.
  Tensor x = make_tensor({b, block_}, kInt64), y = make_tensor({b, block_}, kInt64);
  fill_windows(corpus_->tokens(split_).data(), indices, block_, x.data<int64_t>(), y.data<int64_t>());
  return {x, y};
}

// ---- RandomWindowSampler ----

namespace {
// Philox counter layout (the key is the seed): bits 44..63 the epoch, 32..43 the rank,
// 0..31 the block within the epoch; a block gives two uint64 draws.
constexpr int kEpochShift = 44, kRankShift = 32;
constexpr int64_t kMaxEpochs = int64_t(1) << (64 - kEpochShift);
constexpr int64_t kMaxReplicas = int64_t(1) << (kEpochShift - kRankShift);
constexpr int64_t kMaxPerEpoch = int64_t(2) << kRankShift;
}  // namespace

RandomWindowSampler::RandomWindowSampler(int64_t n, int64_t per_epoch, uint64_t seed, int num_replicas, int rank)
    : n_(n), per_epoch_(per_epoch), seed_(seed), replicas_(num_replicas), rank_(rank) {
  AXLE_CHECK(n >= 1, "[RandomWindowSampler] expected at least one window to draw from, got n = ", n);
  AXLE_CHECK(per_epoch >= 0 && per_epoch <= kMaxPerEpoch, "[RandomWindowSampler] expected per_epoch in [0, ",
             kMaxPerEpoch, "], got ", per_epoch);
  AXLE_CHECK(num_replicas >= 1 && num_replicas <= kMaxReplicas, "[RandomWindowSampler] expected num_replicas in [1, ",
             kMaxReplicas, "], got ", num_replicas);
  AXLE_CHECK(rank >= 0 && rank < num_replicas, "[RandomWindowSampler] expected a rank in [0, ", num_replicas,
             "), got ", rank);
}

std::vector<int64_t> RandomWindowSampler::indices() {
  AXLE_CHECK(epoch_ < kMaxEpochs, "[RandomWindowSampler] expected an epoch below ", kMaxEpochs, ", got ", epoch_);
  const Generator g(seed_);
  const uint64_t base = (uint64_t(epoch_) << kEpochShift) | (uint64_t(rank_) << kRankShift);
  std::vector<int64_t> v(static_cast<size_t>(per_epoch_));
  uint32_t blk[4];
  for (int64_t j = 0; j < per_epoch_; ++j) {
    if (j % 2 == 0) g.block(base + uint64_t(j / 2), blk);
    const uint64_t r = (uint64_t(blk[2 * (j % 2)]) << 32) | blk[2 * (j % 2) + 1];
    // floor(r * n / 2^64): uniform on [0, n) up to n / 2^64, with no division.
    v[size_t(j)] = int64_t((unsigned __int128)r * uint64_t(n_) >> 64);
  }
  return v;
}

}  // namespace axle::data
