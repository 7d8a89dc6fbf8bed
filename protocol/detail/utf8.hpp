// UTF-8 checks for the codec and the reply builders (private to protocol/).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace d2k::protocol::detail {

// The byte offset of the first byte that does not start a well-formed UTF-8 sequence (overlong
// forms, surrogates and code points above U+10FFFF are ill-formed), or npos when all are fine.
std::size_t first_invalid_utf8(std::string_view s);

// `s` cut to at most `max_bytes` on a character boundary, each ill-formed byte replaced by '?'.
std::string sanitize_utf8(std::string_view s, std::size_t max_bytes);

}  // namespace d2k::protocol::detail
