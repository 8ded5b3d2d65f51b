// tokenizer_json.cpp — reads a Hugging Face tokenizer.json into a Tokenizer: checks that it is byte-level
// BPE as tokenizer.h lists, turns the vocabulary's byte-to-unicode names back into raw bytes, and ranks
// the merges ("a b" strings or ["a", "b"] pairs, as the package writes either).
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "text/tokenizer.h"
#include "text/unicode_classes.h"

namespace ft::text {

class TokenizerJsonReader {
 public:
  TokenizerJsonReader(Tokenizer& t, std::string origin) : t_(t), origin_(std::move(origin)) {
    // GPT-2's byte-to-unicode map: printable Latin-1 bytes name themselves, the other 68 bytes take the
    // code points from U+0100 on, in byte order.
    char_to_byte_.fill(-1);
    std::uint32_t next = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char_to_byte_[printable ? b : next++] = static_cast<int>(b);
    }
  }

  void read(const nlohmann::json& j) {
    t_.origin_ = origin_;
    require(j.is_object() && j.contains("model") && j["model"].is_object(),
            "is not a tokenizer.json: expected a JSON object with a \"model\" object");
    const nlohmann::json& model = j["model"];
    const std::string type = model.value("type", std::string("BPE"));
    supported(type == "BPE", "model type is '", type, "'");
    supported(null_or(j, "normalizer"), "it has a normalizer (", j["normalizer"].dump(), ")");
    check_pre_tokenizer(j);
    supported(null_or(j, "decoder") || component_type(j["decoder"]) == "ByteLevel", "decoder is '",
              component_type(j["decoder"]), "', not ByteLevel");
    supported(null_or(j, "post_processor") || component_type(j["post_processor"]) == "ByteLevel", "post_processor is '",
              component_type(j["post_processor"]), "' (it would add tokens to every encoding)");
    supported(null_or(model, "dropout") || model["dropout"].get<double>() == 0.0, "BPE dropout is set");
    supported(null_or(model, "continuing_subword_prefix") || model["continuing_subword_prefix"] == "",
              "BPE continuing_subword_prefix is set");
    supported(null_or(model, "end_of_word_suffix") || model["end_of_word_suffix"] == "",
              "BPE end_of_word_suffix is set");
    supported(!model.value("byte_fallback", false), "BPE byte_fallback is set");
    t_.ignore_merges_ = model.value("ignore_merges", false);

    read_added_tokens(j);
    read_vocab(model);
    read_merges(model);
    if (!null_or(model, "unk_token")) {
      const std::string unk = model["unk_token"].get<std::string>();
      const auto it = t_.token_ids_.find(to_bytes(unk, "unk_token"));
      require(it != t_.token_ids_.end(), "unk_token '", unk, "' is not in the vocabulary");
      t_.unk_id_ = it->second;
    }
  }

 private:
  template <class... Args>
  void require(bool ok, Args&&... parts) const {
    if (!ok) FT_THROW(io, "tokenizer file ", origin_, " ", std::forward<Args>(parts)...);
  }
  template <class... Args>
  void supported(bool ok, Args&&... parts) const {
    if (!ok)
      FT_THROW(unsupported, "tokenizer file ", origin_,
               " is not byte-level BPE as flashtrain reads it: ", std::forward<Args>(parts)...,
               " (expected model BPE, pre_tokenizer ByteLevel with use_regex, decoder ByteLevel, no normalizer)");
  }
  static bool null_or(const nlohmann::json& j, const char* key) { return !j.contains(key) || j[key].is_null(); }
  static std::string component_type(const nlohmann::json& j) {
    return j.is_object() ? j.value("type", std::string("(none)")) : j.dump();
  }

  void check_pre_tokenizer(const nlohmann::json& j) {
    supported(!null_or(j, "pre_tokenizer"), "it has no pre_tokenizer");
    const nlohmann::json& pre = j["pre_tokenizer"];
    supported(component_type(pre) == "ByteLevel", "pre_tokenizer is '", component_type(pre), "'");
    supported(pre.value("use_regex", true), "its ByteLevel pre_tokenizer has use_regex false");
    t_.add_prefix_space_ = pre.value("add_prefix_space", false);
  }

  // The raw bytes a vocabulary name stands for (each of its characters one byte).
  std::string to_bytes(const std::string& name, const char* what) const {
    std::string bytes;
    for (std::size_t i = 0; i < name.size();) {
      const DecodedChar c = decode_utf8(name, i);
      require(c.cp < char_to_byte_.size() && char_to_byte_[c.cp] >= 0, what, " '", name,
              "' is not a byte-level name: character U+", std::hex, c.cp, " is not in the byte-to-unicode alphabet");
      bytes.push_back(static_cast<char>(char_to_byte_[c.cp]));
      i += static_cast<std::size_t>(c.length);
    }
    return bytes;
  }

  void define(std::int32_t id, std::string bytes, const std::string& name) {
    require(id >= 0 && id < (1 << 30), "token '", name, "' has id ", id, ", expected 0 <= id < 2^30");
    const auto index = static_cast<std::size_t>(id);
    if (index >= t_.id_bytes_.size()) {
      t_.id_bytes_.resize(index + 1);
      t_.id_defined_.resize(index + 1, false);
    }
    t_.id_bytes_[index] = std::move(bytes);
    t_.id_defined_[index] = true;
  }

  void read_added_tokens(const nlohmann::json& j) {
    if (null_or(j, "added_tokens")) return;
    require(j["added_tokens"].is_array(), "has added_tokens that are not a list");
    for (const nlohmann::json& token : j["added_tokens"]) {
      const std::string content = token.at("content").get<std::string>();
      const auto id = token.at("id").get<std::int32_t>();
      require(!content.empty(), "has an empty added token (id ", id, ")");
      supported(!token.value("lstrip", false) && !token.value("rstrip", false) && !token.value("single_word", false),
                "added token '", content, "' sets lstrip, rstrip or single_word");
      t_.added_.push_back({content, id});
      define(id, content, content);
    }
  }

  void read_vocab(const nlohmann::json& model) {
    require(model.contains("vocab") && model["vocab"].is_object() && !model["vocab"].empty(),
            "has no model.vocab object of tokens and ids");
    std::fill(std::begin(t_.byte_ids_), std::end(t_.byte_ids_), -1);
    for (const auto& [name, value] : model["vocab"].items()) {
      const auto id = value.get<std::int32_t>();
      if (t_.added_token_id(name) == id) continue;  // an added token kept in the vocabulary too
      std::string bytes = to_bytes(name, "vocabulary token");
      if (bytes.size() == 1) t_.byte_ids_[static_cast<std::uint8_t>(bytes[0])] = id;
      require(t_.token_ids_.emplace(bytes, id).second, "has the vocabulary token '", name, "' twice");
      define(id, std::move(bytes), name);
    }
  }

  void read_merges(const nlohmann::json& model) {
    if (null_or(model, "merges")) return;
    require(model["merges"].is_array(), "has model.merges that are not a list");
    std::int32_t rank = 0;
    for (const nlohmann::json& merge : model["merges"]) {
      std::string left, right;
      if (merge.is_string()) {
        const std::string pair = merge.get<std::string>();
        const std::size_t space = pair.find(' ');
        require(space != std::string::npos && pair.find(' ', space + 1) == std::string::npos, "has merge ", rank, " '",
                pair, "', expected two tokens separated by one space");
        left = pair.substr(0, space);
        right = pair.substr(space + 1);
      } else {
        require(merge.is_array() && merge.size() == 2, "has merge ", rank, " ", merge.dump(),
                ", expected a pair of tokens");
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      }
      const std::int32_t a = vocab_id(left, rank), b = vocab_id(right, rank), ab = vocab_id(left + right, rank);
      // A pair listed twice keeps its last rank, as the package's map of merges does.
      t_.merges_.insert_or_assign(
          (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b),
          Tokenizer::Merge{rank, ab});
      ++rank;
    }
  }

  std::int32_t vocab_id(const std::string& name, std::int32_t rank) const {
    const auto it = t_.token_ids_.find(to_bytes(name, "merge token"));
    require(it != t_.token_ids_.end(), "has merge ", rank, " naming '", name, "', which is not in the vocabulary");
    return it->second;
  }

  Tokenizer& t_;
  std::string origin_;
  std::array<int, 324> char_to_byte_;  // code point -> byte (-1: not a byte-level character)
};

Tokenizer Tokenizer::from_json(std::string_view json, const std::string& origin) {
  Tokenizer t;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    FT_THROW(io, "tokenizer file ", origin, " is not valid JSON: ", e.what());
  }
  try {
    TokenizerJsonReader(t, origin).read(j);
  } catch (const nlohmann::json::exception& e) {
    FT_THROW(io, "tokenizer file ", origin, " is malformed: ", e.what());
  }
  return t;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK_KIND(io, in.good(), "cannot read tokenizer file ", path, " (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path);
}

}  // namespace ft::text
