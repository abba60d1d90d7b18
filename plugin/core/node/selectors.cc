#include "node/selectors.h"

#include <sstream>

namespace shmkeeper {

Result<std::vector<SelectorTerm>> ParseSelector(const std::string& text) {
  std::vector<SelectorTerm> terms;
  if (text.empty()) return terms;
  std::stringstream in(text);
  std::string part;
  auto valid_key = [](const std::string& k) {
    return !k.empty() && k.size() <= 317 &&
           k.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./") ==
               std::string::npos;
  };
  while (std::getline(in, part, ',')) {
    SelectorTerm t;
    size_t ne = part.find("!="), eq = part.find('=');
    if (ne != std::string::npos) {
      t = {part.substr(0, ne), part.substr(ne + 2), SelectorTerm::kNotEquals};
    } else if (eq != std::string::npos) {
      size_t vstart = part.compare(eq, 2, "==") == 0 ? eq + 2 : eq + 1;
      t = {part.substr(0, eq), part.substr(vstart), SelectorTerm::kEquals};
    } else if (part.starts_with("!")) {
      t = {part.substr(1), "", SelectorTerm::kNotExists};
    } else {
      t = {part, "", SelectorTerm::kExists};
    }
    if (!valid_key(t.key) || t.value.find_first_of("=!, ") != std::string::npos) {
      return Status::Invalid("malformed selector \"" + text + "\" at \"" + part + "\"");
    }
    terms.push_back(std::move(t));
  }
  return terms;
}

bool MatchesSelector(const PodRecord& pod, const std::vector<SelectorTerm>& terms) {
  auto lookup = [&](const std::string& k) -> const std::string* {
    if (auto it = pod.labels.find(k); it != pod.labels.end()) return &it->second;
    if (auto it = pod.annotations.find(k); it != pod.annotations.end()) return &it->second;
    return nullptr;
  };
  for (const SelectorTerm& t : terms) {
    const std::string* v = lookup(t.key);
    bool ok = t.op == SelectorTerm::kExists      ? v != nullptr
              : t.op == SelectorTerm::kNotExists ? v == nullptr
              : t.op == SelectorTerm::kEquals    ? v && *v == t.value
                                                 : !v || *v != t.value;
    if (!ok) return false;
  }
  return true;
}

}  // namespace shmkeeper
