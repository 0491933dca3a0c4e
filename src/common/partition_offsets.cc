#include "common/partition_offsets.h"

#include <nlohmann/json.hpp>

#include "common/json_util.h"

namespace kayak {

std::string PartitionOffsetsToJson(const PartitionOffsets& offsets) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [tp, off] : offsets) j.push_back({tp.first, tp.second, off});
  return DumpJson(nlohmann::json{{"offsets", j}});
}

bool PartitionOffsetsFromJson(std::string_view text, PartitionOffsets* out) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return false;
  auto it = j.find("offsets");
  if (it == j.end() || !it->is_array()) return false;
  for (const auto& e : *it) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_string() || !e[1].is_number_integer() ||
        !e[2].is_number_integer()) {
      return false;
    }
    (*out)[{e[0].get<std::string>(), e[1].get<int32_t>()}] = e[2].get<int64_t>();
  }
  return true;
}

}  // namespace kayak
