// shm_size as docker-compose reads it: compose v1 (docker-compose 1.29 hands
// the string to docker-py's parse_bytes) and compose v2 (compose-go decodes it
// with go-units' RAMInBytes, v0.5.0). Each grammar is written out here from
// its source, not approximated by one regex; a value either accepts is a size
// docker-compose accepts.
#include <cctype>
#include <cmath>
#include <limits>

#include "compose/compose.h"

namespace shmkeeper {
namespace {

constexpr int64_t kKi = 1024;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Digits with single '_' between them (Python's digitpart); `n` counts them.
bool PyDigitPart(const std::string& s, size_t* i, std::string* out) {
  size_t start = *i;
  while (*i < s.size()) {
    if (IsDigit(s[*i])) {
      *out += s[(*i)++];
    } else if (s[*i] == '_' && *i > start && *i + 1 < s.size() && IsDigit(s[*i + 1]) && IsDigit(s[*i - 1])) {
      ++*i;
    } else {
      break;
    }
  }
  return *i > start;
}

// Python's float(str) for finite decimal literals: surrounding whitespace,
// a sign, digits with '_', an optional fraction and exponent. inf and nan
// parse in Python but int() of them raises, so they are refused here.
bool PyFloat(const std::string& text, double* out) {
  size_t b = text.find_first_not_of(" \t\n\r\v\f");
  if (b == std::string::npos) return false;
  size_t e = text.find_last_not_of(" \t\n\r\v\f");
  std::string s = text.substr(b, e - b + 1), norm;
  size_t i = 0;
  if (s[i] == '+' || s[i] == '-') norm += s[i++];
  bool int_part = PyDigitPart(s, &i, &norm);
  bool frac_part = false;
  if (i < s.size() && s[i] == '.') {
    norm += s[i++];
    frac_part = PyDigitPart(s, &i, &norm);
  }
  if (!int_part && !frac_part) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    norm += s[i++];
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) norm += s[i++];
    if (!PyDigitPart(s, &i, &norm)) return false;
  }
  if (i != s.size()) return false;
  char* end = nullptr;
  *out = std::strtod(norm.c_str(), &end);
  return end && *end == '\0' && std::isfinite(*out);
}

// Go's strconv.ParseFloat for what go-units hands it: a sign, decimal digits
// with an optional fraction and exponent (no spaces, no '_' without a base
// prefix); hex floats need a 'p' exponent and are left out.
bool GoFloat(const std::string& s, double* out) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t digits = 0;
  while (i < s.size() && IsDigit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && IsDigit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp = 0;
    while (i < s.size() && IsDigit(s[i])) ++i, ++exp;
    if (exp == 0) return false;
  }
  if (i != s.size()) return false;
  *out = std::strtod(s.c_str(), nullptr);
  return std::isfinite(*out);
}

// A double of bytes as a positive int64, or nothing when it does not fit.
Result<int64_t> ToBytes(double v, const std::string& text) {
  if (!(v >= 0) || v >= static_cast<double>(std::numeric_limits<int64_t>::max())) {
    return Status::Invalid("\"" + text + "\" is out of range");
  }
  return static_cast<int64_t>(v);  // both truncate toward zero
}

}  // namespace

Result<int64_t> ParseComposeV1Size(const std::string& text) {
  // docker-py utils.parse_bytes: a trailing b/B after another letter goes,
  // then the last character is the unit (b k m g) or a digit (bytes).
  Status bad = Status::Invalid("\"" + text + "\" is not a size docker-compose 1.x accepts");
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return bad;  // Python's isalpha/isdigit on non-ASCII: left out
  }
  if (text.empty()) return bad;  // parse_bytes gives 0 (Docker's default); not a size anyone means
  std::string s = text;
  if (s.size() >= 2 && IsAsciiAlpha(s[s.size() - 2]) && IsAsciiAlpha(s.back()) && (s.back() == 'b' || s.back() == 'B'))
    s.pop_back();
  char suffix = static_cast<char>(std::tolower(static_cast<unsigned char>(s.back())));
  std::string digits = s;
  int64_t unit = 1;
  if (!IsDigit(suffix)) {
    digits = s.substr(0, s.size() - 1);
    switch (suffix) {
      case 'b':
        unit = 1;
        break;
      case 'k':
        unit = kKi;
        break;
      case 'm':
        unit = kKi * kKi;
        break;
      case 'g':
        unit = kKi * kKi * kKi;
        break;
      default:
        return bad;
    }
  }
  double v = 0;
  if (!PyFloat(digits, &v)) return bad;
  if (v < 0) return Status::Invalid("\"" + text + "\" is negative");  // the daemon refuses it
  return ToBytes(v * static_cast<double>(unit), text);
}

Result<int64_t> ParseComposeV2Size(const std::string& text) {
  // go-units v0.5.0 parseSize with the binary map: the number ends at the
  // last digit, '.' or space (a space there is dropped), the suffix is
  // b, or k/m/g/t/p with an optional "b" or "ib", any case.
  Status bad = Status::Invalid("\"" + text + "\" is not a size docker compose v2 accepts");
  size_t sep = text.find_last_of("0123456789. ");
  if (sep == std::string::npos) return bad;
  std::string num = text[sep] == ' ' ? text.substr(0, sep) : text.substr(0, sep + 1);
  std::string sfx = text.substr(sep + 1);
  double v = 0;
  if (!GoFloat(num, &v) || v < 0) return bad;
  if (sfx.empty()) return ToBytes(v, text);
  if (sfx.size() > 3) return bad;
  for (char& c : sfx) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (sfx[0] == 'b') return sfx.size() == 1 ? ToBytes(v, text) : Result<int64_t>(bad);
  int64_t mul = 0;
  switch (sfx[0]) {
    case 'k':
      mul = kKi;
      break;
    case 'm':
      mul = kKi * kKi;
      break;
    case 'g':
      mul = kKi * kKi * kKi;
      break;
    case 't':
      mul = kKi * kKi * kKi * kKi;
      break;
    case 'p':
      mul = kKi * kKi * kKi * kKi * kKi;
      break;
    default:
      return bad;
  }
  if ((sfx.size() == 2 && sfx[1] != 'b') || (sfx.size() == 3 && sfx.substr(1) != "ib")) return bad;
  return ToBytes(v * static_cast<double>(mul), text);
}

Result<int64_t> ParseComposeSize(const std::string& text) {
  Result<int64_t> v1 = ParseComposeV1Size(text);
  if (v1.ok()) return v1;
  Result<int64_t> v2 = ParseComposeV2Size(text);
  if (v2.ok()) return v2;
  return Status::Invalid("\"" + text + "\" is not a size docker-compose accepts (like 2gb, 512m or bytes)");
}

bool IsComposeSize(const std::string& text) { return ParseComposeSize(text).ok(); }

}  // namespace shmkeeper
