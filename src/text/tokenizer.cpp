// tokenizer.cpp — byte-level BPE encode (added-token split, GPT-2 pieces, cached heap merges), batch
// encoding over threads, and decode. Loading the tokenizer.json is tokenizer_json.cpp.
#include "text/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <queue>
#include <thread>

#include "core/error.h"
#include "text/pretokenizer.h"
#include "text/unicode_classes.h"

namespace ft::text {

// ---- word cache ------------------------------------------------------------------------------------------

const std::vector<std::int32_t>* WordCache::find(std::string_view word) const {
  const auto it = map_.find(word);
  return it == map_.end() ? nullptr : &it->second;
}

void WordCache::insert(std::string_view word, std::vector<std::int32_t> ids) {
  if (map_.size() >= max_entries_) map_.clear();  // a bounded memory, rebuilt from the pieces that recur
  map_.emplace(std::string(word), std::move(ids));
}

// ---- encode ------------------------------------------------------------------------------------------

const Tokenizer::Merge* Tokenizer::find_merge(std::int32_t left, std::int32_t right) const {
  const auto it = merges_.find((static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
                               static_cast<std::uint32_t>(right));
  return it == merges_.end() ? nullptr : &it->second;
}

void Tokenizer::merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
  // Symbols in a doubly linked list over the word's bytes; a symbol of length 0 was merged into its left.
  struct Symbol {
    std::int32_t id;
    int prev, next, length;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (const char ch : word) {
    std::int32_t id = byte_ids_[static_cast<std::uint8_t>(ch)];
    if (id < 0) {
      if (!unk_id_) continue;  // a byte without a token and no unknown token: dropped, as the package does
      id = *unk_id_;
    }
    const int i = static_cast<int>(symbols.size());
    symbols.push_back({id, i - 1, i + 1, 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Candidate merges, lowest rank first, then leftmost.
  struct Candidate {
    std::int32_t rank;
    int pos;
    std::int32_t id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) {
    if (const Merge* m = find_merge(symbols[i].id, symbols[i + 1].id)) heap.push({m->rank, i, m->id});
  }
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (left.length == 0 || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    // A candidate is stale when either side changed since it was pushed (the package checks the same way:
    // the pair now there must still make the candidate's token).
    const Merge* now = find_merge(left.id, right.id);
    if (!now || now->id != top.id) continue;
    left.id = top.id;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<std::size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* m = find_merge(symbols[static_cast<std::size_t>(left.prev)].id, left.id))
        heap.push({m->rank, left.prev, m->id});
    }
    if (left.next >= 0) {
      if (const Merge* m = find_merge(left.id, symbols[static_cast<std::size_t>(left.next)].id))
        heap.push({m->rank, top.pos, m->id});
    }
  }
  for (int i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) out.push_back(symbols[i].id);
}

void Tokenizer::encode_word(std::string_view word, WordCache& cache, std::vector<std::int32_t>& out) const {
  if (const std::vector<std::int32_t>* hit = cache.find(word)) {
    out.insert(out.end(), hit->begin(), hit->end());
    return;
  }
  std::vector<std::int32_t> ids;
  const auto whole = ignore_merges_ ? token_ids_.find(std::string(word)) : token_ids_.end();
  if (whole != token_ids_.end()) {
    ids.push_back(whole->second);
  } else {
    merge_word(word, ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  cache.insert(word, std::move(ids));
}

void Tokenizer::encode_span(std::string_view span, WordCache& cache, std::vector<std::int32_t>& out) const {
  if (span.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && span.front() != ' ') {
    prefixed = " ";
    prefixed.append(span);
    span = prefixed;
  }
  for (std::size_t begin = 0; begin < span.size();) {
    const std::size_t end = gpt2_piece_end(span, begin);
    encode_word(span.substr(begin, end - begin), cache, out);
    begin = end;
  }
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, WordCache* cache) const {
  WordCache local;
  WordCache& words = cache ? *cache : local;
  std::string replaced;
  if (!is_valid_utf8(text)) {
    replaced = replace_invalid_utf8(text);
    text = replaced;
  }
  // Added tokens: every occurrence, then leftmost first, the longest at one start, none overlapping.
  struct Match {
    std::size_t begin, length;
    std::int32_t id;
  };
  std::vector<Match> matches;
  for (const AddedToken& token : added_) {
    for (std::size_t at = text.find(token.content); at != std::string_view::npos; at = text.find(token.content, at + 1))
      matches.push_back({at, token.content.size(), token.id});
  }
  std::sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.length > b.length;
  });
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::size_t done = 0;
  for (const Match& m : matches) {
    if (m.begin < done) continue;
    encode_span(text.substr(done, m.begin - done), words, ids);
    ids.push_back(m.id);
    done = m.begin + m.length;
  }
  encode_span(text.substr(done), words, ids);
  return ids;
}

std::vector<std::vector<std::int32_t>> Tokenizer::encode_batch(const std::vector<std::string_view>& documents,
                                                               int threads,
                                                               const std::function<void(std::size_t)>& on_done) const {
  std::vector<std::vector<std::int32_t>> out(documents.size());
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads), documents.size()));
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto work = [&] {
    WordCache cache;
    try {
      for (std::size_t i = next++; i < documents.size(); i = next++) {
        out[i] = encode(documents[i], &cache);
        if (on_done) on_done(i);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next = documents.size();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  if (threads >= 1) work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return out;
}

// ---- decode ------------------------------------------------------------------------------------------

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string bytes;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    FT_CHECK(id >= 0 && id < vocab_size() && id_defined_[static_cast<std::size_t>(id)], "tokenizer ", origin_,
             ": cannot decode id ", id, " at position ", i, ": no token has it (vocabulary size ", vocab_size(), ")");
    bytes.append(id_bytes_[static_cast<std::size_t>(id)]);
  }
  return is_valid_utf8(bytes) ? bytes : replace_invalid_utf8(bytes);
}

std::optional<std::int32_t> Tokenizer::added_token_id(std::string_view content) const {
  for (const AddedToken& token : added_) {
    if (token.content == content) return token.id;
  }
  return std::nullopt;
}

std::int32_t Tokenizer::end_of_text_id() const {
  const std::optional<std::int32_t> id = added_token_id("<|endoftext|>");
  FT_CHECK(id.has_value(), "tokenizer ", origin_,
           " has no end-of-text token: expected an added token \"<|endoftext|>\" (train it with "
           "tools/train_tokenizer.py, which adds one)");
  return *id;
}

}  // namespace ft::text
