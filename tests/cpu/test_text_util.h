// test_text_util.h — helpers of the text tests: small byte-level BPE tokenizer.json documents built in
// memory (the 256 byte tokens under GPT-2's byte-to-unicode names, "<|endoftext|>" as id 0, given merges).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer.h"

namespace ft::test {

// GPT-2's byte-to-unicode name of byte b, as UTF-8.
inline std::string byte_name(int b) {
  int cp = b;
  if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
    int n = 0;
    for (int c = 0; c < b; ++c)
      n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF));
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// A tokenizer.json: "<|endoftext|>" = 0, bytes = 1 + byte, then the merges' tokens in order.
inline nlohmann::json make_json(const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  vocab["<|endoftext|>"] = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_name(b)] = 1 + b;
  nlohmann::json merge_list = nlohmann::json::array();
  int next = 257;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back(nlohmann::json::array({a, b}));
  }
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array({{{"id", 0},
                                               {"content", "<|endoftext|>"},
                                               {"single_word", false},
                                               {"lstrip", false},
                                               {"rstrip", false},
                                               {"normalized", false},
                                               {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", merge_list}}},
  };
}

inline text::Tokenizer make_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges) {
  return text::Tokenizer::from_json(make_json(merges).dump(), "test.json");
}

// The id make_json gives byte c.
inline std::int32_t byte_id(char c) { return 1 + static_cast<std::uint8_t>(c); }

}  // namespace ft::test
