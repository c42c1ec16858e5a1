// Character-level text data: the vocabulary and encode/decode (ASCII and multi-byte
// UTF-8), the deterministic split, windows against plain slices of the corpus, the seeded
// window sampler's purity, the DataLoader with workers, the real fortunes corpus, and every
// bad-input error (each checked for what it names).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "axle/data/dataloader.h"
#include "axle/data/text.h"
#include "axle/error.h"

namespace fs = std::filesystem;
using namespace axle;
using namespace axle::data;

namespace {

const std::string kFortunes = "/usr/share/games/fortunes";

// A fresh directory under gtest's temporary directory, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::path(::testing::TempDir()) / "axle_text_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// Runs f, expects an axle::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected an axle::Error";
  } catch (const axle::Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

std::vector<int64_t> row(const Tensor& t, int64_t r) {
  const int64_t n = t.size(t.dim() - 1);
  const int64_t* p = t.data<int64_t>() + r * n;
  return std::vector<int64_t>(p, p + n);
}

std::vector<int64_t> slice(const std::vector<int32_t>& v, int64_t from, int64_t n) {
  return std::vector<int64_t>(v.begin() + from, v.begin() + from + n);
}

}  // namespace

// ---- vocabulary, encode, decode ----

TEST(TextCorpus, AsciiVocabularyIsSortedDistinctCharacters) {
  auto c = TextCorpus::from_text("hello world", 0.5);
  const std::vector<char32_t> want{U' ', U'd', U'e', U'h', U'l', U'o', U'r', U'w'};
  EXPECT_EQ(c->vocab(), want);
  EXPECT_EQ(c->vocab_size(), 8);
  EXPECT_EQ(c->encode("hello"), (std::vector<int64_t>{3, 2, 4, 4, 5}));
  EXPECT_EQ(c->decode({7, 5, 6, 4, 1}), "world");
}

TEST(TextCorpus, MultiByteUtf8RoundTrip) {
  // 1-, 2-, 3- and 4-byte characters: ï é (2), € (3), 😀 (4).
  const std::string text = "naïve café 😀 costs 5€";
  auto c = TextCorpus::from_text(text, 0.5);
  const auto ids = c->encode(text);
  EXPECT_EQ(int64_t(ids.size()), 21);  // characters, not bytes (the text has 28 bytes)
  EXPECT_EQ(c->decode(ids), text);
  // The largest code point sorts last; ï (U+00EF) after é (U+00E9).
  EXPECT_EQ(c->vocab().back(), char32_t(0x1F600));
  EXPECT_EQ(c->encode("😀"), std::vector<int64_t>{c->vocab_size() - 1});
  EXPECT_LT(c->encode("é")[0], c->encode("ï")[0]);
  // The splits hold the same ids as encoding the text.
  std::vector<int64_t> all(c->tokens(Split::Train).begin(), c->tokens(Split::Train).end());
  all.insert(all.end(), c->tokens(Split::Val).begin(), c->tokens(Split::Val).end());
  EXPECT_EQ(all, ids);
}

// ---- split ----

TEST(TextCorpus, SplitSizesAndDeterminism) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char('a' + (i * 7) % 26);
  auto a = TextCorpus::from_text(text, 0.1);
  EXPECT_EQ(a->tokens(Split::Train).size(), 900u);  // floor(1000 * 0.9)
  EXPECT_EQ(a->tokens(Split::Val).size(), 100u);
  // The training split is the head of the text, validation the tail, in order.
  EXPECT_EQ(a->decode(slice(a->tokens(Split::Train), 0, 900)), text.substr(0, 900));
  EXPECT_EQ(a->decode(slice(a->tokens(Split::Val), 0, 100)), text.substr(900));
  auto b = TextCorpus::from_text(text, 0.1);
  EXPECT_EQ(a->tokens(Split::Train), b->tokens(Split::Train));
  EXPECT_EQ(a->tokens(Split::Val), b->tokens(Split::Val));
  auto q = TextCorpus::from_text(text.substr(0, 101), 0.25);
  EXPECT_EQ(q->tokens(Split::Train).size(), 75u);  // floor(101 * 0.75)
  EXPECT_EQ(q->tokens(Split::Val).size(), 26u);
}

TEST(TextCorpus, DirectoryReadsRegularFilesInNameOrder) {
  TempDir d;
  write_file(d / "b", "second ");
  write_file(d / "a", "first ");
  write_file(d / "c", "third");
  write_file(d / "a.dat", std::string("\xff\x00\x01", 3));  // an index file: not text
  write_file(d / ".hidden", "hidden");
  fs::create_symlink("a", d.path / "a.u8");
  fs::create_directory(d.path / "sub");
  write_file(d / "sub/x", "nested");
  auto c = TextCorpus::from_path(d.path.string(), 0.5);
  std::vector<int64_t> all(c->tokens(Split::Train).begin(), c->tokens(Split::Train).end());
  all.insert(all.end(), c->tokens(Split::Val).begin(), c->tokens(Split::Val).end());
  EXPECT_EQ(c->decode(all), "first second third");
  EXPECT_EQ(c->source(), d.path.string());
  // A single file reads the same as its text in memory.
  auto f = TextCorpus::from_path(d / "b", 0.5);
  auto m = TextCorpus::from_text("second ", 0.5);
  EXPECT_EQ(f->vocab(), m->vocab());
  EXPECT_EQ(f->tokens(Split::Train), m->tokens(Split::Train));
  EXPECT_EQ(f->tokens(Split::Val), m->tokens(Split::Val));
}

// ---- windows ----

TEST(TextWindows, WindowsAreCorpusSlicesShiftedByOne) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += char('!' + (i * i + 3 * i) % 90);
  auto c = TextCorpus::from_text(text, 0.2);
  const auto& tr = c->tokens(Split::Train);
  const auto& va = c->tokens(Split::Val);
  ASSERT_EQ(tr.size(), 240u);
  const int64_t T = 16;
  TextWindows w(c, Split::Train, T);
  EXPECT_EQ(w.size(), 240 - T);
  EXPECT_EQ(w.block_size(), T);
  const std::vector<int64_t> idx{0, 5, w.size() - 1, 5, 100};
  Example b = w.get_batch(idx);
  ASSERT_EQ(b.data.shape(), (Shape{5, T}));
  ASSERT_EQ(b.target.shape(), (Shape{5, T}));
  EXPECT_EQ(b.data.dtype(), kInt64);
  EXPECT_EQ(b.target.dtype(), kInt64);
  for (int64_t r = 0; r < 5; ++r) {
    const int64_t s = idx[size_t(r)];
    EXPECT_EQ(row(b.data, r), slice(tr, s, T)) << "row " << r;
    EXPECT_EQ(row(b.target, r), slice(tr, s + 1, T)) << "row " << r;
    // x shifted by one is y
    const auto x = row(b.data, r), y = row(b.target, r);
    EXPECT_TRUE(std::equal(x.begin() + 1, x.end(), y.begin()));
  }
  // get(i) is one row of get_batch, shape [T].
  Example e = w.get(w.size() - 1);
  ASSERT_EQ(e.data.shape(), (Shape{T}));
  EXPECT_EQ(row(e.data, 0), slice(tr, w.size() - 1, T));
  EXPECT_EQ(row(e.target, 0), slice(tr, w.size(), T));  // ends at the split's last token
  // The validation split's windows come from the validation tokens.
  TextWindows v(c, Split::Val, T);
  EXPECT_EQ(v.size(), 60 - T);
  Example ev = v.get(3);
  EXPECT_EQ(row(ev.data, 0), slice(va, 3, T));
  EXPECT_EQ(row(ev.target, 0), slice(va, 4, T));
  // A split of exactly block_size + 1 tokens has one window.
  TextWindows one(c, Split::Val, 59);
  EXPECT_EQ(one.size(), 1);
}

// ---- sampler ----

TEST(RandomWindowSampler, PureFunctionOfSeedRankEpochPosition) {
  const int64_t n = 1000, per = 257;
  RandomWindowSampler a(n, per, 42, 2, 0);
  RandomWindowSampler b(n, per, 42, 2, 0);
  const auto a0 = a.indices();
  ASSERT_EQ(int64_t(a0.size()), per);
  EXPECT_EQ(a.size(), per);
  for (int64_t i : a0) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, n);
  }
  // Another sampler, and the same one asked again after other epochs, repeat it.
  a.set_epoch(3);
  const auto a3 = a.indices();
  a.set_epoch(0);
  EXPECT_EQ(a.indices(), a0);
  b.set_epoch(3);
  EXPECT_EQ(b.indices(), a3);
  // A longer epoch starts with the shorter one's indices (position j depends on j only).
  RandomWindowSampler longer(n, per + 100, 42, 2, 0);
  const auto l0 = longer.indices();
  EXPECT_TRUE(std::equal(a0.begin(), a0.end(), l0.begin()));
  // Another epoch, rank or seed draws other windows.
  EXPECT_NE(a3, a0);
  RandomWindowSampler r1(n, per, 42, 2, 1);
  EXPECT_NE(r1.indices(), a0);
  RandomWindowSampler s(n, per, 43, 2, 0);
  EXPECT_NE(s.indices(), a0);
  // Roughly uniform: a draw of 257 from 1000 hits many distinct windows, and n = 1 gives 0.
  EXPECT_GT(std::set<int64_t>(a0.begin(), a0.end()).size(), 200u);
  RandomWindowSampler single(1, 5, 7);
  EXPECT_EQ(single.indices(), std::vector<int64_t>(5, 0));
}

TEST(RandomWindowSampler, RejectsBadArguments) {
  expect_error([] { RandomWindowSampler(0, 10, 1); }, {"at least one window", "n = 0"});
  expect_error([] { RandomWindowSampler(10, -1, 1); }, {"per_epoch", "-1"});
  expect_error([] { RandomWindowSampler(10, 10, 1, 0, 0); }, {"num_replicas", "got 0"});
  expect_error([] { RandomWindowSampler(10, 10, 1, 2, 2); }, {"rank in [0, 2)", "got 2"});
}

// ---- DataLoader ----

TEST(TextWindows, DataLoaderWithWorkersMatchesInline) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += char('a' + (i * 31 + i / 7) % 26);
  auto c = TextCorpus::from_text(text, 0.1);
  auto ds = std::make_shared<TextWindows>(c, Split::Train, 32);
  auto collect = [&](int workers) {
    auto sampler = std::make_shared<RandomWindowSampler>(ds->size(), 8 * 12, 5);
    DataLoader loader(ds, {.batch_size = 8, .num_workers = workers}, sampler);
    std::vector<std::vector<int64_t>> out;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      loader.set_epoch(epoch);
      for (const Example& b : loader) {
        EXPECT_EQ(b.data.shape(), (Shape{8, 32}));
        out.push_back(std::vector<int64_t>(b.data.data<int64_t>(), b.data.data<int64_t>() + 8 * 32));
        out.push_back(std::vector<int64_t>(b.target.data<int64_t>(), b.target.data<int64_t>() + 8 * 32));
      }
    }
    return out;
  };
  const auto inline_batches = collect(0);
  ASSERT_EQ(inline_batches.size(), 2u * 2 * 12);
  EXPECT_EQ(collect(2), inline_batches);
  // Epochs differ.
  EXPECT_NE(inline_batches[0], inline_batches[24]);
}

// ---- the real corpus ----

TEST(TextCorpus, FortunesCorpusLoads) {
  if (!fs::is_directory(kFortunes)) GTEST_SKIP() << kFortunes << " is absent (Debian package fortunes)";
  auto c = TextCorpus::from_path(kFortunes);
  const int64_t n = int64_t(c->tokens(Split::Train).size() + c->tokens(Split::Val).size());
  EXPECT_GT(n, 1000000);                                  // about 2.5 MB of text
  EXPECT_EQ(int64_t(c->tokens(Split::Val).size()), n - int64_t(std::floor(double(n) * 0.9)));
  EXPECT_GE(c->vocab_size(), 90);                         // printable ASCII and more
  EXPECT_LE(c->vocab_size(), 300);
  EXPECT_EQ(c->decode(c->encode("The quick brown fox.\n")), "The quick brown fox.\n");
  TextWindows w(c, Split::Val, 128);
  EXPECT_EQ(w.size(), int64_t(c->tokens(Split::Val).size()) - 128);
}

// ---- errors ----

TEST(TextErrors, MissingUnreadableEmpty) {
  TempDir d;
  expect_error([&] { TextCorpus::from_path(d / "nope.txt"); }, {d / "nope.txt", "no such file"});
  // Readable as a regular file but every read fails (EIO), also as root.
  expect_error([] { TextCorpus::from_path("/proc/self/mem"); }, {"/proc/self/mem", "cannot read"});
  expect_error([] { TextCorpus::from_path("/dev/null"); }, {"/dev/null", "expected a regular file", "character device"});
  write_file(d / "empty.txt", "");
  expect_error([&] { TextCorpus::from_path(d / "empty.txt"); }, {d / "empty.txt", "at least one character", "empty file"});
  expect_error([] { TextCorpus::from_text("", 0.1, "my text"); }, {"my text", "at least one character", "empty"});
  TempDir e;
  expect_error([&] { TextCorpus::from_path(e.path.string()); }, {e.path.string(), "expected text files", "found none"});
  write_file(e / "x", "");
  expect_error([&] { TextCorpus::from_path(e.path.string()); }, {e.path.string(), "empty directory"});
  write_file(d / "ok.txt", "abc");
  expect_error([&] { TextCorpus::from_path(d / "ok.txt", 1.0); }, {"validation fraction in (0, 1)", "got 1"});
  expect_error([&] { TextCorpus::from_path(d / "ok.txt", 0.0); }, {"validation fraction in (0, 1)", "got 0"});
}

TEST(TextErrors, InvalidUtf8NamesTheByteOffset) {
  TempDir d;
  // A lone continuation byte at offset 3.
  write_file(d / "a.txt", "abc\x80xyz");
  expect_error([&] { TextCorpus::from_path(d / "a.txt"); },
               {d / "a.txt", "invalid UTF-8 at byte offset 3", "first byte", "found 0x80"});
  // In a directory the message names the file and the offset inside it.
  TempDir dir;
  write_file(dir / "1good", "fine text\n");
  write_file(dir / "2bad", "caf\xc3(");  // a 2-byte lead byte followed by '('
  expect_error([&] { TextCorpus::from_path(dir.path.string()); },
               {dir / "2bad", "invalid UTF-8 at byte offset 4", "0x80-0xBF", "found 0x28"});
  // Overlong, surrogate, above U+10FFFF, truncated at the end.
  expect_error([] { TextCorpus::from_text("x\xc0\xaf", 0.1, "t"); }, {"byte offset 1", "found 0xC0", "overlong"});
  expect_error([] { TextCorpus::from_text("\xe0\x80\xaf", 0.1, "t"); }, {"byte offset 1", "0xA0-0xBF", "found 0x80"});
  expect_error([] { TextCorpus::from_text("\xf0\x80\x80\xaf", 0.1, "t"); }, {"byte offset 1", "0x90-0xBF", "found 0x80"});
  expect_error([] { TextCorpus::from_text("ab\xed\xa0\x80", 0.1, "t"); }, {"byte offset 3", "0x80-0x9F", "found 0xA0"});
  expect_error([] { TextCorpus::from_text("\xf4\x90\x80\x80", 0.1, "t"); }, {"byte offset 1", "0x80-0x8F", "found 0x90"});
  expect_error([] { TextCorpus::from_text("ok \xf0\x9f\x98", 0.1, "t"); }, {"byte offset 3", "4 bytes", "end of the text"});
  expect_error([] { TextCorpus::from_text("\xff", 0.1, "t"); }, {"byte offset 0", "found 0xFF", "never valid"});
  // encode checks its input too.
  auto c = TextCorpus::from_text("abc", 0.5);
  expect_error([&] { c->encode("a\xe2\x82"); }, {"encode", "byte offset 1", "end of the text"});
}

TEST(TextErrors, TooShortForOneWindow) {
  auto c = TextCorpus::from_text("0123456789", 0.3, "digits");  // 7 train, 3 val tokens
  expect_error([&] { TextWindows(c, Split::Val, 3); },
               {"validation split of digits", "block_size + 1 = 4", "found 3"});
  expect_error([&] { TextWindows(c, Split::Train, 7); },
               {"training split of digits", "block_size + 1 = 8", "found 7"});
  EXPECT_NO_THROW(TextWindows(c, Split::Train, 6));
  expect_error([&] { TextWindows(c, Split::Train, 0); }, {"block_size >= 1", "got 0"});
  expect_error([&] { TextWindows(c, Split::Train, INT64_MAX); }, {"block_size >= 1", "got 9223372036854775807"});
  TextWindows w(c, Split::Train, 4);  // 3 windows
  expect_error([&] { w.get(3); }, {"window indices in [0, 3)", "got 3"});
  expect_error([&] { w.get_batch({0, -1}); }, {"window indices in [0, 3)", "got -1"});
  expect_error([&] { w.get_batch({}); }, {"at least one index"});
}

TEST(TextErrors, EncodeAndDecodeOutsideTheVocabulary) {
  auto c = TextCorpus::from_text("hello", 0.5, "greeting");
  expect_error([&] { c->encode("help"); }, {"vocabulary of greeting", "4 characters", "'p' (U+0070)", "byte offset 3"});
  expect_error([&] { c->encode("hé"); }, {"'é' (U+00E9)", "byte offset 1"});
  expect_error([&] { c->encode("h\n"); }, {"U+000A", "byte offset 1"});
  expect_error([&] { c->decode({0, 4}); }, {"[0, 4)", "found 4", "position 1"});
  expect_error([&] { c->decode({-1}); }, {"[0, 4)", "found -1", "position 0"});
}
