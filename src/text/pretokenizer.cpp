// pretokenizer.cpp — the GPT-2 split, one piece at a time (see pretokenizer.h for the pattern).
#include "text/pretokenizer.h"

#include "text/unicode_classes.h"

namespace ft::text {

namespace {

// The class and length of the character at byte i.
struct CharAt {
  CharClass cls;
  int length;
};
CharAt char_at(std::string_view text, std::size_t i) {
  const auto b = static_cast<std::uint8_t>(text[i]);
  if (b < 0x80) return {char_class(b), 1};
  const DecodedChar c = decode_utf8(text, i);
  return {char_class(c.cp), c.length};
}

// The end of the run of class cls starting at byte i.
std::size_t run_end(std::string_view text, std::size_t i, CharClass cls) {
  while (i < text.size()) {
    const CharAt c = char_at(text, i);
    if (c.cls != cls) break;
    i += static_cast<std::size_t>(c.length);
  }
  return i;
}

// The length of the contraction ('s 't 're 've 'm 'll 'd) at byte i, or 0.
std::size_t contraction(std::string_view text, std::size_t i) {
  if (text[i] != '\'' || i + 1 >= text.size()) return 0;
  const char a = text[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= text.size()) return 0;
  const char b = text[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

std::size_t gpt2_piece_end(std::string_view text, std::size_t begin) {
  if (const std::size_t n = contraction(text, begin)) return begin + n;
  const CharAt first = char_at(text, begin);
  if (text[begin] == ' ' && begin + 1 < text.size()) {
    const CharAt next = char_at(text, begin + 1);
    if (next.cls != CharClass::space) return run_end(text, begin + 1 + next.length, next.cls);
  }
  if (first.cls != CharClass::space) return run_end(text, begin + first.length, first.cls);
  // A whitespace run: all of it at the end of the text or when it is one character; otherwise all but its
  // last character, which then starts the next piece (" ?\p{L}+" takes a last U+0020 with the word).
  std::size_t last = begin, end = begin;
  while (end < text.size()) {
    const CharAt c = char_at(text, end);
    if (c.cls != CharClass::space) break;
    last = end;
    end += static_cast<std::size_t>(c.length);
  }
  if (end == text.size() || last == begin) return end;
  return last;
}

}  // namespace ft::text
