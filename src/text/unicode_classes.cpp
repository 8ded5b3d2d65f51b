// unicode_classes.cpp — code point classes (an ASCII table, then a binary search of the generated ranges of
// unicode_classes_table.cpp), UTF-8 decoding and the maximal-subpart replacement of ill-formed UTF-8.
#include "text/unicode_classes.h"

#include <algorithm>
#include <array>

namespace ft::text {

namespace {

bool is_white_space(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

CharClass lookup(std::uint32_t cp) {
  if (is_white_space(cp)) return CharClass::space;
  const detail::CodePointRange* begin = detail::kClassRanges;
  const detail::CodePointRange* end = begin + detail::kClassRangeCount;
  const auto* it = std::upper_bound(begin, end, cp, [](std::uint32_t c, const auto& r) { return c < r.first; });
  if (it == begin) return CharClass::other;
  --it;
  return cp <= it->last ? it->cls : CharClass::other;
}

const std::array<CharClass, 128> kAscii = [] {
  std::array<CharClass, 128> table{};
  for (std::uint32_t c = 0; c < 128; ++c) table[c] = lookup(c);
  return table;
}();

// Length of the well-formed UTF-8 sequence at s[i], or 0 when ill-formed; on 0, *subpart is the length of
// its maximal subpart (>= 1): the bytes one U+FFFD replaces.
int sequence_length(std::string_view s, std::size_t i, int* subpart) {
  const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  int need;
  std::uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *subpart = 1;
    return 0;
  }
  for (int k = 1; k < need; ++k) {
    const bool ok = i + k < s.size() &&
                    (k == 1 ? byte(i + k) >= lo && byte(i + k) <= hi : byte(i + k) >= 0x80 && byte(i + k) <= 0xBF);
    if (!ok) {
      *subpart = k;
      return 0;
    }
  }
  return need;
}

}  // namespace

CharClass char_class(std::uint32_t cp) { return cp < 128 ? kAscii[cp] : lookup(cp); }

DecodedChar decode_utf8(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<std::uint8_t>(s[k])); };
  const std::uint32_t b0 = b(i);
  if (b0 < 0x80) return {b0, 1};
  if (b0 < 0xE0) return {((b0 & 0x1F) << 6) | (b(i + 1) & 0x3F), 2};
  if (b0 < 0xF0) return {((b0 & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F), 3};
  return {((b0 & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F), 4};
}

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<std::uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int subpart = 0;
    const int n = sequence_length(s, i, &subpart);
    if (n == 0) return false;
    i += static_cast<std::size_t>(n);
  }
  return true;
}

std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  for (std::size_t i = 0; i < s.size();) {
    int subpart = 0;
    const int n = sequence_length(s, i, &subpart);
    if (n > 0) {
      out.append(s.substr(i, static_cast<std::size_t>(n)));
      i += static_cast<std::size_t>(n);
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      i += static_cast<std::size_t>(subpart);
    }
  }
  return out;
}

}  // namespace ft::text
