// test_text_prepare.cpp — text files to token files (text/prepare.h): every document after the end-of-text
// id, in path order, the evenly spaced validation split, uint16 ids and uint32 ones for a vocabulary over
// 65536, folder search with a glob and excluded folders, and the errors of an empty corpus, a missing
// input and a split of one document.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error_of.h"
#include "common/temp_folder.h"
#include "core/error.h"
#include "test_text_util.h"
#include "text/prepare.h"
#include "text/token_file_writer.h"

namespace ft {
namespace {

using testing_util::error_of;

namespace fs = std::filesystem;
using Ids = std::vector<std::int64_t>;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The ids of a 1-D .npy file of '<u2' or '<u4' and its descr.
Ids read_npy(const std::string& path, std::string* descr) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const std::size_t header = 10 + (static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ(header % 64, 0u);
  const std::string dict = bytes.substr(10, header - 10);
  *descr = dict.substr(dict.find("'descr': '") + 10, 3);
  const int width = (*descr)[2] - '0';
  const std::size_t count = (bytes.size() - header) / static_cast<std::size_t>(width);
  EXPECT_NE(dict.find("'shape': (" + std::to_string(count) + ",)"), std::string::npos) << dict;
  Ids ids;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t v = 0;
    std::memcpy(&v, bytes.data() + header + i * static_cast<std::size_t>(width), static_cast<std::size_t>(width));
    ids.push_back(v);
  }
  return ids;
}

Ids with_eot(const text::Tokenizer& t, const std::string& doc) {
  Ids ids{t.end_of_text_id()};
  for (std::int32_t id : t.encode(doc)) ids.push_back(id);
  return ids;
}

TEST(Prepare, DocumentsAfterEndOfTextWithAnEvenValidationSplit) {
  testing_util::TempFolder dir;
  const text::Tokenizer t = test::make_tokenizer({{"h", "e"}});
  std::vector<std::string> docs;
  for (int i = 0; i < 10; ++i) {
    docs.push_back("doc " + std::to_string(i) + " he said");
    write(dir.path() / "corpus" / ("d" + std::to_string(i) + ".txt"), docs.back());
  }
  write(dir.path() / "corpus" / "empty.txt", "");
  write(dir.path() / "corpus" / "skip" / "x.txt", "not taken");
  write(dir.path() / "corpus" / "notes.md", "not matched");
  text::PrepareOptions o;
  o.inputs = {(dir.path() / "corpus").string()};
  o.glob = "*.txt";
  o.exclude_folders = {"skip"};
  o.output = (dir.path() / "tokens.npy").string();
  o.val_fraction = 0.2;
  o.threads = 2;
  o.chunk_bytes = 40;  // several chunks
  std::int64_t last_done = 0;
  const text::PrepareSummary s = text::prepare_tokens(t, o, [&](std::int64_t done, std::int64_t total) {
    EXPECT_GT(done, last_done);
    EXPECT_LE(done, total);
    last_done = done;
  });
  EXPECT_EQ(s.files, 11);
  EXPECT_EQ(s.train.documents, 8);
  EXPECT_EQ(s.val.documents, 2);
  Ids train, val;
  for (int i = 0; i < 10; ++i) {
    const Ids ids = with_eot(t, docs[static_cast<std::size_t>(i)]);
    Ids& to = (i == 4 || i == 9) ? val : train;  // floor((i + 1) 0.2) > floor(i 0.2)
    to.insert(to.end(), ids.begin(), ids.end());
  }
  std::string descr;
  EXPECT_EQ(read_npy((dir.path() / "tokens_train.npy").string(), &descr), train);
  EXPECT_EQ(descr, "<u2");
  EXPECT_EQ(read_npy((dir.path() / "tokens_val.npy").string(), &descr), val);
  EXPECT_EQ(s.train.tokens, static_cast<std::int64_t>(train.size()));
  EXPECT_EQ(last_done, s.train.bytes + s.val.bytes);
}

TEST(Prepare, LargeVocabulariesWriteUint32) {
  testing_util::TempFolder dir;
  nlohmann::json j = test::make_json({});
  j["added_tokens"].push_back({{"id", 70000}, {"content", "<|big|>"}, {"special", true}});
  const text::Tokenizer t = text::Tokenizer::from_json(j.dump(), "big.json");
  EXPECT_EQ(text::token_bytes_for_vocab(t.vocab_size()), 4);
  write(dir.path() / "a.txt", "x<|big|>");
  text::PrepareOptions o;
  o.inputs = {(dir.path() / "a.txt").string()};
  o.output = (dir.path() / "big.npy").string();
  o.val_fraction = 0;
  text::prepare_tokens(t, o);
  std::string descr;
  EXPECT_EQ(read_npy(o.output, &descr), (Ids{0, test::byte_id('x'), 70000}));
  EXPECT_EQ(descr, "<u4");
}

TEST(Prepare, EmptyCorporaAndBadSplitsAreClearErrors) {
  testing_util::TempFolder dir;
  const text::Tokenizer t = test::make_tokenizer({});
  write(dir.path() / "empty" / "a.txt", "");
  text::PrepareOptions o;
  o.inputs = {(dir.path() / "empty").string()};
  o.output = (dir.path() / "out.npy").string();
  EXPECT_NE(error_of([&] { text::prepare_tokens(t, o); }).message().find("empty corpus: 1 files"), std::string::npos);
  o.inputs = {(dir.path() / "nothing-here").string()};
  EXPECT_NE(error_of([&] { text::prepare_tokens(t, o); }).message().find("no such file or folder"), std::string::npos);
  write(dir.path() / "one" / "a.txt", "text");
  o.inputs = {(dir.path() / "one").string()};
  o.val_fraction = 0.1;
  EXPECT_NE(error_of([&] { text::prepare_tokens(t, o); }).message().find("at least 2 documents, given 1"),
            std::string::npos);
  o.val_fraction = 1.0;
  EXPECT_NE(error_of([&] { text::prepare_tokens(t, o); }).message().find("in [0, 1)"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "out_train.npy"));
}

}  // namespace
}  // namespace ft
