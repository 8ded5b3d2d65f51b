// printable.h — bytes made safe to quote in a one-line error message, whatever they hold.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ft {

// text with bytes outside printable ASCII written as \xNN and cut to at most max_bytes (then "..."): one
// line, valid UTF-8 (so Python can raise it as a str), bounded in length.
std::string printable_excerpt(std::string_view text, std::size_t max_bytes = 200);

}  // namespace ft
