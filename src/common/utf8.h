// UTF-8 checks for text that came from outside (a config, a request body).
#pragma once

#include <cstddef>
#include <string_view>

namespace kayak {

// The offset of the first byte of `s` that does not begin a well-formed
// UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF), or s.size() when all of it is well formed.
size_t FirstInvalidUtf8(std::string_view s);

}  // namespace kayak
