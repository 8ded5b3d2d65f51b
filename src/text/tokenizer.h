// tokenizer.h — byte-level BPE (GPT-2 style) read from a Hugging Face `tokenizers` tokenizer.json, with
// encode and decode giving the ids and text that package gives:
//   encode  1. added tokens (e.g. "<|endoftext|>") are cut out of the text first, leftmost-longest;
//           2. each remaining span is split by the GPT-2 pattern (pretokenizer.h), after a leading U+0020
//              when the pre-tokenizer says add_prefix_space;
//           3. each piece's bytes start as one symbol per byte (the vocabulary holds the bytes under
//              GPT-2's byte-to-unicode names; here they are kept as raw bytes), and the adjacent pair of
//              lowest merge rank is merged, leftmost first, until no pair merges (a heap over the pairs).
//           Pieces seen before come from a word cache. Text that is not valid UTF-8 is read as Python's
//           bytes.decode("utf-8", "replace") reads it: each ill-formed subpart becomes U+FFFD.
//   decode  the bytes of each id's token joined, ill-formed UTF-8 replaced by U+FFFD (as the package's
//           ByteLevel decoder does); added tokens give their content.
// Supported: model BPE (no dropout, no subword prefix/suffix, no byte fallback; ignore_merges honoured),
// pre_tokenizer ByteLevel with use_regex, decoder ByteLevel or none, post_processor ByteLevel or none, no
// normalizer, added tokens without lstrip/rstrip/single_word. Anything else is a clear ft::Error.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ft::text {

// Token ids of pieces already encoded (a piece's bytes -> its ids), kept per thread.
class WordCache {
 public:
  explicit WordCache(std::size_t max_entries = 1 << 18) : max_entries_(max_entries) {}
  const std::vector<std::int32_t>* find(std::string_view word) const;
  void insert(std::string_view word, std::vector<std::int32_t> ids);

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<std::int32_t>, Hash, std::equal_to<>> map_;
  std::size_t max_entries_;
};

class Tokenizer {
 public:
  // Reads path (ft::Error kind io when missing or not JSON; invalid_argument or unsupported naming the
  // field when it is not a tokenizer this class implements).
  static Tokenizer from_file(const std::string& path);
  // The same from the JSON text; `origin` names it in errors.
  static Tokenizer from_json(std::string_view json, const std::string& origin);

  // The ids of text. cache may be null (a cache local to the call is used).
  std::vector<std::int32_t> encode(std::string_view text, WordCache* cache = nullptr) const;
  // The ids of every document, encoded by `threads` threads (0 = one per hardware thread), each with its
  // own word cache; on_done(i) (may be empty) is called, from a worker thread, as document i finishes.
  std::vector<std::vector<std::int32_t>> encode_batch(const std::vector<std::string_view>& documents, int threads = 0,
                                                      const std::function<void(std::size_t)>& on_done = {}) const;
  // The text of ids (valid UTF-8). Ids outside [0, vocab_size()) or naming no token are an ft::Error.
  std::string decode(std::span<const std::int32_t> ids) const;

  // One more than the largest id of the vocabulary and the added tokens.
  std::int64_t vocab_size() const { return static_cast<std::int64_t>(id_bytes_.size()); }
  // The id of an added token's content (e.g. "<|endoftext|>"), if there is one.
  std::optional<std::int32_t> added_token_id(std::string_view content) const;
  // The id of "<|endoftext|>"; an ft::Error naming the tokenizer file when it has no such added token.
  std::int32_t end_of_text_id() const;
  const std::string& origin() const { return origin_; }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t id;  // the merged token
  };
  struct AddedToken {
    std::string content;
    std::int32_t id;
  };

  void encode_span(std::string_view span, WordCache& cache, std::vector<std::int32_t>& out) const;
  void encode_word(std::string_view word, WordCache& cache, std::vector<std::int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const;
  const Merge* find_merge(std::int32_t left, std::int32_t right) const;

  std::string origin_;
  std::vector<std::string> id_bytes_;  // id -> the token's raw bytes (added tokens: their content)
  std::vector<bool> id_defined_;       // ids that name a token
  std::unordered_map<std::string, std::int32_t> token_ids_;  // raw bytes -> id (the BPE vocabulary)
  std::int32_t byte_ids_[256];                               // the single-byte tokens (-1: none)
  std::unordered_map<std::uint64_t, Merge> merges_;          // (left << 32 | right) -> merge
  std::vector<AddedToken> added_;
  std::optional<std::int32_t> unk_id_;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;

  friend class TokenizerJsonReader;
};

}  // namespace ft::text
