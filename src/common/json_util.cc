#include "common/json_util.h"

#include <cctype>

#include "common/json_text.h"

namespace kayak {

bool ParseFieldPath(std::string_view text, FieldPath* out) {
  out->clear();
  size_t i = 0;
  const size_t n = text.size();
  if (n == 0) return false;
  while (i < n) {
    if (text[i] == '[') {
      size_t j = i + 1;
      int64_t idx = 0;
      if (j >= n || !std::isdigit(static_cast<unsigned char>(text[j]))) return false;
      while (j < n && std::isdigit(static_cast<unsigned char>(text[j]))) {
        idx = idx * 10 + (text[j] - '0');
        if (idx > (int64_t{1} << 40)) return false;
        ++j;
      }
      if (j >= n || text[j] != ']') return false;
      out->push_back(PathStep{"", idx});
      i = j + 1;
      if (i < n && text[i] == '.') {
        ++i;
        if (i >= n) return false;
      }
      continue;
    }
    size_t j = i;
    while (j < n && text[j] != '.' && text[j] != '[') ++j;
    if (j == i) return false;
    out->push_back(PathStep{std::string(text.substr(i, j - i)), -1});
    i = j;
    if (i < n && text[i] == '.') {
      ++i;
      if (i >= n) return false;
    }
  }
  return true;
}

std::string FieldPathToString(const FieldPath& path) {
  std::string s;
  for (const auto& step : path) {
    if (step.index >= 0) {
      s += "[" + std::to_string(step.index) + "]";
    } else {
      if (!s.empty()) s += ".";
      s += step.key;
    }
  }
  return s;
}

const Json* LookupPath(const Json& root, const FieldPath& path) {
  const Json* cur = &root;
  for (const auto& step : path) {
    if (step.index >= 0) {
      if (!cur->is_array() || static_cast<size_t>(step.index) >= cur->size()) return nullptr;
      cur = &(*cur)[static_cast<size_t>(step.index)];
    } else {
      if (!cur->is_object()) return nullptr;
      auto it = cur->find(step.key);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    }
  }
  return cur;
}

namespace {
size_t StringHeap(const std::string& s) {
  // Past the small-string buffer the characters have a block of their own.
  return s.capacity() > 15 ? s.capacity() + 1 : 0;
}
}  // namespace

size_t JsonHeapBytes(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      return sizeof(std::string) + StringHeap(s);
    }
    case Json::value_t::array: {
      const auto& a = v.get_ref<const Json::array_t&>();
      size_t n = sizeof(Json::array_t) + a.capacity() * sizeof(Json);
      for (const auto& e : a) n += JsonHeapBytes(e);
      return n;
    }
    case Json::value_t::object: {
      const auto& o = v.get_ref<const Json::object_t&>();
      size_t n = sizeof(Json::object_t) + o.capacity() * sizeof(Json::object_t::value_type);
      for (const auto& [k, e] : o) n += StringHeap(k) + JsonHeapBytes(e);
      return n;
    }
    case Json::value_t::binary:
      return sizeof(Json::binary_t) + v.get_binary().capacity();
    default:
      return 0;
  }
}

const char* JsonTypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "bool";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "int";
    case Json::value_t::number_float: return "float";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "array";
    case Json::value_t::object: return "object";
    case Json::value_t::binary: return "binary";
    case Json::value_t::discarded: return "missing";
  }
  return "unknown";
}

}  // namespace kayak

namespace kayak {

namespace {

bool Digits(std::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// Days since 1970-01-01 of a civil date (proleptic Gregorian).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool ParseRfc3339(std::string_view s, int64_t* out_ms) {
  int y, mo, d, h, mi, se;
  if (!Digits(s, 0, 4, &y) || s.size() < 19 || s[4] != '-' || !Digits(s, 5, 2, &mo) ||
      s[7] != '-' || !Digits(s, 8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      !Digits(s, 11, 2, &h) || s[13] != ':' || !Digits(s, 14, 2, &mi) || s[16] != ':' ||
      !Digits(s, 17, 2, &se)) {
    return false;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return false;
  size_t i = 19;
  int64_t ms = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int64_t scale = 100;
    const size_t start = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      ms += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
    }
    if (i == start) return false;
  }
  int64_t offset_min = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    ++i;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    int oh, om;
    if (!Digits(s, i + 1, 2, &oh) || i + 3 >= s.size() || s[i + 3] != ':' ||
        !Digits(s, i + 4, 2, &om)) {
      return false;
    }
    offset_min = (oh * 60 + om) * (s[i] == '+' ? 1 : -1);
    i += 6;
  } else {
    return false;
  }
  if (i != s.size()) return false;
  const int64_t days = DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  const int64_t secs = days * 86400 + h * 3600 + mi * 60 + se - offset_min * 60;
  *out_ms = secs * 1000 + ms;
  return true;
}

}  // namespace

bool EventTimeOfNumber(double x, const int64_t* exact, int64_t* out_ms) {
  if (!(x > -1e15 && x < 1e15)) return false;
  if (x < 1e11 && x > -1e11) {
    *out_ms = static_cast<int64_t>(x * 1000.0);
  } else {
    *out_ms = exact != nullptr ? *exact : static_cast<int64_t>(x);
  }
  return true;
}

bool EventTimeOfText(std::string_view s, int64_t* out_ms) { return ParseRfc3339(s, out_ms); }

}  // namespace kayak

namespace kayak {

void AppendJsonOf(const Json& v, std::string* out) {
  switch (v.type()) {
    case Json::value_t::null: out->append("null"); break;
    case Json::value_t::boolean: out->append(v.get<bool>() ? "true" : "false"); break;
    case Json::value_t::number_integer: jtext::AppendInt(out, v.get<int64_t>()); break;
    case Json::value_t::number_unsigned: jtext::AppendUint(out, v.get<uint64_t>()); break;
    case Json::value_t::number_float: jtext::AppendDouble(out, v.get<double>()); break;
    case Json::value_t::string: jtext::AppendString(out, v.get_ref<const std::string&>()); break;
    default: out->append(v.dump(-1, ' ', false, Json::error_handler_t::replace)); break;
  }
}

}  // namespace kayak
