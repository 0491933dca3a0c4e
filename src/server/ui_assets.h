// The dashboard's files (src/server/ui), built into the binary by
// cmake/embed_ui.cmake: the machines that run kayak often have no internet,
// so the page loads nothing from elsewhere.
#pragma once

#include <string_view>

namespace kayak::http {

struct UiAsset {
  std::string_view path;          // "/index.html", "/ui/app.js", ...
  std::string_view content_type;  // with its charset
  std::string_view body;
};

// The asset served at `path`, or null.
const UiAsset* FindUiAsset(std::string_view path);

}  // namespace kayak::http
