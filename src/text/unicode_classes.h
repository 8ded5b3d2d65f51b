// unicode_classes.h — the Unicode facts the GPT-2 pre-tokeniser needs, without a regex or ICU library:
// the class of a code point (letter \p{L}, number \p{N}, whitespace \s, other), UTF-8 decoding of valid
// text, and the replacement of ill-formed UTF-8 by U+FFFD (one per maximal subpart, as Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ft::text {

enum class CharClass : std::uint8_t { other, letter, number, space };

// The class of code point cp: letter = general category L*, number = N*, space = White_Space
// (U+0009-U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
CharClass char_class(std::uint32_t cp);

// The code point starting at s[i] of valid UTF-8 and its length in bytes.
struct DecodedChar {
  std::uint32_t cp;
  int length;
};
DecodedChar decode_utf8(std::string_view s, std::size_t i);

// True when s is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);
// s with each maximal subpart of an ill-formed sequence replaced by U+FFFD (s itself when valid).
std::string replace_invalid_utf8(std::string_view s);

namespace detail {
struct CodePointRange {
  std::uint32_t first, last;
  CharClass cls;
};
extern const CodePointRange kClassRanges[];
extern const int kClassRangeCount;
}  // namespace detail

}  // namespace ft::text
