// test_text_tokenizer.cpp — the byte-level BPE tokenizer on small hand-made tokenizer.json files: the GPT-2
// pre-tokenisation split (contractions, letter/number/other runs with one leading space, whitespace runs
// giving up their last character, Unicode classes), the ill-formed UTF-8 replacement, merge order (lowest
// rank, leftmost first), added tokens, decode, batch encoding over threads, and the errors of files that are
// malformed or not byte-level BPE. (tests/python/test_tokenizer_matches_hf.py checks ids against the
// `tokenizers` package itself.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "core/error.h"
#include "test_text_util.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"
#include "text/unicode_classes.h"

namespace {

using ft::test::make_json;
using ft::test::make_tokenizer;
using ft::testing_util::error_of;
using ft::text::Tokenizer;

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = ft::text::gpt2_piece_end(text, begin);
    out.emplace_back(text.substr(begin, end - begin));
    begin = end;
  }
  return out;
}

using Pieces = std::vector<std::string>;

TEST(Pretokenizer, ContractionsAndRuns) {
  EXPECT_EQ(pieces("Hello's world"), (Pieces{"Hello", "'s", " world"}));
  EXPECT_EQ(pieces("don't we'll they're I'M"), (Pieces{"don", "'t", " we", "'ll", " they", "'re", " I", "'", "M"}));
  EXPECT_EQ(pieces("3.14 x2 !!"), (Pieces{"3", ".", "14", " x", "2", " !!"}));
  EXPECT_EQ(pieces("'sa"), (Pieces{"'s", "a"}));
}

TEST(Pretokenizer, WhitespaceRuns) {
  EXPECT_EQ(pieces("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(pieces("a \tb"), (Pieces{"a", " ", "\t", "b"}));
  EXPECT_EQ(pieces("x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(pieces("\n\n    def"), (Pieces{"\n\n   ", " def"}));
  EXPECT_EQ(pieces("  \nfoo"), (Pieces{"  ", "\n", "foo"}));
  EXPECT_EQ(pieces(" "), (Pieces{" "}));
}

TEST(Pretokenizer, UnicodeClasses) {
  EXPECT_EQ(pieces("日本語 テキスト"), (Pieces{"日本語", " テキスト"}));
  EXPECT_EQ(pieces("cafe\xCC\x81 ok"), (Pieces{"cafe", "\xCC\x81", " ok"}));  // U+0301 is a mark
  EXPECT_EQ(pieces("x \xC2\xBD"), (Pieces{"x", " \xC2\xBD"}));                // U+00BD is a number
  EXPECT_EQ(pieces("a\xC2\xA0"
                   "b"),
            (Pieces{"a", "\xC2\xA0", "b"}));                                        // no-break space
  EXPECT_EQ(pieces("hi \xF0\x9F\x98\x80!"), (Pieces{"hi", " \xF0\x9F\x98\x80!"}));  // emoji are "other"
}

TEST(Utf8, ReplacesMaximalSubparts) {
  using ft::text::replace_invalid_utf8;
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(replace_invalid_utf8("a\xFF"
                                 "b"),
            "a" + r + "b");
  EXPECT_EQ(replace_invalid_utf8("\xE2\x82"), r);              // truncated: one subpart
  EXPECT_EQ(replace_invalid_utf8("\xED\xA0\x80"), r + r + r);  // a surrogate: three
  EXPECT_EQ(replace_invalid_utf8("\xC0\xAF"), r + r);          // overlong
  EXPECT_EQ(replace_invalid_utf8("\xF0\x9F\x98"
                                 "x"),
            r + "x");
  EXPECT_TRUE(ft::text::is_valid_utf8("\xF0\x9F\x98\x80 \xE2\x82\xAC"));
  EXPECT_FALSE(ft::text::is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
}

using Ids = std::vector<std::int32_t>;
using ft::test::byte_id;

TEST(Tokenizer, MergesLowestRankLeftmostFirst) {
  // 257 he, 258 ll, 259 hell, 260 hello, 261 aa; the space is "Ġ".
  const Tokenizer t = make_tokenizer({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"a", "a"}});
  EXPECT_EQ(t.vocab_size(), 262);
  EXPECT_EQ(t.encode("hello"), (Ids{260}));
  EXPECT_EQ(t.encode("aaa"), (Ids{261, byte_id('a')}));
  EXPECT_EQ(t.encode("hello hello"), (Ids{260, byte_id(' '), 260}));  // the piece " hello": no merge takes the space
  EXPECT_EQ(t.encode("hellhe"), (Ids{259, 257}));
  EXPECT_EQ(t.encode(""), Ids{});
}

TEST(Tokenizer, AddedTokensAreCutOutFirst) {
  const Tokenizer t = make_tokenizer({{"h", "e"}});
  EXPECT_EQ(t.end_of_text_id(), 0);
  EXPECT_EQ(t.encode("he<|endoftext|>he"), (Ids{257, 0, 257}));
  EXPECT_EQ(t.encode("<|endoftext|><|endoftext|>"), (Ids{0, 0}));
  EXPECT_EQ(t.decode(Ids{257, 0, byte_id('!')}), "he<|endoftext|>!");
}

TEST(Tokenizer, IllFormedUtf8IsReadAsReplaced) {
  const Tokenizer t = make_tokenizer({});
  EXPECT_EQ(t.encode("a\xFF"
                     "b"),
            t.encode("a\xEF\xBF\xBD"
                     "b"));
  EXPECT_EQ(t.decode(t.encode("a\xFF"
                              "b")),
            "a\xEF\xBF\xBD"
            "b");
  // A token that ends inside a character decodes to U+FFFD.
  EXPECT_EQ(t.decode(Ids{byte_id('\xE2'), byte_id('\x82')}), "\xEF\xBF\xBD");
}

TEST(Tokenizer, DecodeInvertsEncode) {
  const Tokenizer t = make_tokenizer({{"Ġ", "t"}, {"Ġt", "h"}, {"Ġth", "e"}, {"e", "r"}});
  const std::string text = "the  other\tthere 日本語 \xF0\x9F\x98\x80 cafe\xCC\x81 123\n\n  x";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  EXPECT_EQ(t.encode(" the"), (Ids{259}));
}

TEST(Tokenizer, BatchEncodingMatchesOneByOne) {
  const Tokenizer t = make_tokenizer({{"h", "e"}, {"l", "l"}});
  std::vector<std::string> docs;
  for (int i = 0; i < 50; ++i) docs.push_back("hello " + std::to_string(i * 7919) + std::string(i % 5, ' ') + "he");
  const std::vector<std::string_view> views(docs.begin(), docs.end());
  std::vector<int> done(docs.size(), 0);
  const auto batch = t.encode_batch(views, 3, [&](std::size_t i) { done[i] += 1; });
  ASSERT_EQ(batch.size(), docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(batch[i], t.encode(docs[i])) << i;
    EXPECT_EQ(done[i], 1) << i;
  }
}

TEST(Tokenizer, MalformedOrOtherFilesAreClearErrors) {
  const auto load = [](const nlohmann::json& j) { return Tokenizer::from_json(j.dump(), "t.json"); };
  ft::Error e = error_of([] { Tokenizer::from_json("{\"model\": ", "t.json"); });
  EXPECT_EQ(e.kind(), ft::ErrorKind::io);
  EXPECT_NE(e.message().find("not valid JSON"), std::string::npos) << e.message();

  e = error_of([&] { load(nlohmann::json{{"version", "1.0"}}); });
  EXPECT_EQ(e.kind(), ft::ErrorKind::io);
  EXPECT_NE(e.message().find("\"model\""), std::string::npos) << e.message();

  nlohmann::json j = make_json({});
  j["model"]["type"] = "WordPiece";
  e = error_of([&] { load(j); });
  EXPECT_EQ(e.kind(), ft::ErrorKind::unsupported);
  EXPECT_NE(e.message().find("model type is 'WordPiece'"), std::string::npos) << e.message();

  j = make_json({});
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  e = error_of([&] { load(j); });
  EXPECT_NE(e.message().find("pre_tokenizer is 'Metaspace'"), std::string::npos) << e.message();

  j = make_json({});
  j["model"]["merges"] = nlohmann::json::array({"h q z"});
  e = error_of([&] { load(j); });
  EXPECT_NE(e.message().find("merge 0 'h q z'"), std::string::npos) << e.message();

  j = make_json({});
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"h", "zz"})});
  e = error_of([&] { load(j); });
  EXPECT_NE(e.message().find("'zz', which is not in the vocabulary"), std::string::npos) << e.message();

  j = make_json({});
  j["model"]["vocab"]["a b"] = 900;  // a plain space is not a byte-level name
  e = error_of([&] { load(j); });
  EXPECT_NE(e.message().find("not a byte-level name"), std::string::npos) << e.message();

  j = make_json({});
  j["model"]["vocab"] = "oops";
  e = error_of([&] { load(j); });
  EXPECT_EQ(e.kind(), ft::ErrorKind::io);

  e = error_of([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); });
  EXPECT_EQ(e.kind(), ft::ErrorKind::io);
}

TEST(Tokenizer, DecodeAndEndOfTextErrors) {
  const Tokenizer t = make_tokenizer({});
  const ft::Error e = error_of([&] { t.decode(Ids{1, 5000}); });
  EXPECT_NE(e.message().find("id 5000 at position 1"), std::string::npos) << e.message();
  nlohmann::json j = make_json({});
  j["added_tokens"] = nlohmann::json::array();
  const Tokenizer plain = Tokenizer::from_json(j.dump(), "plain.json");
  EXPECT_NE(error_of([&] { plain.end_of_text_id(); }).message().find("no end-of-text token"), std::string::npos);
}

}  // namespace
