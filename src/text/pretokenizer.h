// pretokenizer.h — the GPT-2 pre-tokenisation split that Hugging Face's ByteLevel pre-tokenizer applies
// (use_regex = true), written by hand instead of with a regex engine. The pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// tried leftmost-first at each position comes down to: a contraction; else an optional U+0020 and a run of
// one class (letters, numbers, or neither-space-letter-nor-number); else a whitespace run, less its last
// character when a non-space follows and the run is longer than one character.
#pragma once

#include <cstddef>
#include <string_view>

namespace ft::text {

// The end (byte offset) of the piece that starts at byte `begin` < text.size() of valid UTF-8 text.
std::size_t gpt2_piece_end(std::string_view text, std::size_t begin);

}  // namespace ft::text
