#include "compose/compose_edit.h"

#include <algorithm>

#include "compose/compose_reader.h"

namespace shmkeeper::compose {
namespace {

// The last line any node under `n` starts on.
int LastLine(const YAML::Node& n, int depth = 0) {
  int last = n.Mark().is_null() ? -1 : n.Mark().line;
  if (depth > kMaxDepth) return last;
  if (n.IsMap()) {
    for (const auto& kv : n) last = std::max({last, LastLine(kv.first, depth + 1), LastLine(kv.second, depth + 1)});
  } else if (n.IsSequence()) {
    for (const auto& item : n) last = std::max(last, LastLine(item, depth + 1));
  }
  return last;
}

// Whether only blanks or a comment follow column `col` of `line`.
bool RestIsBlank(const std::string& line, size_t col) {
  size_t p = line.find_first_not_of(" \t\r\n", std::min(col, line.size()));
  return p == std::string::npos || line[p] == '#';
}

}  // namespace

std::string ApplyEdits(std::vector<std::string> lines, std::vector<Edit> edits, const std::string& eol) {
  // Bottom-up, and right to left within a line, so no edit moves another's position.
  std::stable_sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) {
    return a.line != b.line ? a.line > b.line : a.column > b.column;
  });
  for (const Edit& e : edits) {
    std::string& l = lines[static_cast<size_t>(e.line)];
    if (e.kind == Edit::kReplace) {
      l.replace(static_cast<size_t>(e.column), static_cast<size_t>(e.length), e.text);
    } else if (e.kind == Edit::kDelete) {
      lines.erase(lines.begin() + e.line);
    } else {
      std::string text = e.text;
      if (e.line > 0 && !lines[static_cast<size_t>(e.line - 1)].ends_with("\n")) text = eol + text;
      lines.insert(lines.begin() + e.line, text);
    }
  }
  std::string out;
  for (const std::string& l : lines) out += l;
  return out;
}

std::vector<std::string> SplitLines(const std::string& text, bool* crlf) {
  std::vector<std::string> lines;
  size_t start = 0;
  *crlf = text.find("\r\n") != std::string::npos;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start + 1));  // keeps its own ending
    start = end + 1;
  }
  return lines;
}

// Length of the scalar written at `col` on `line` (quoted or plain, up to a comment).
int ScalarLength(const std::string& line, int col) {
  if (col >= static_cast<int>(line.size())) return 0;
  char q = line[static_cast<size_t>(col)];
  if (q == '"' || q == '\'') {
    size_t close = line.find(q, static_cast<size_t>(col) + 1);
    return close == std::string::npos ? 0 : static_cast<int>(close) - col + 1;
  }
  size_t end = line.find(" #", static_cast<size_t>(col));
  std::string v = line.substr(static_cast<size_t>(col),
                              end == std::string::npos ? std::string::npos : end - static_cast<size_t>(col));
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r' || v.back() == ' ' || v.back() == '\t')) v.pop_back();
  return static_cast<int>(v.size());
}

std::string Quote(const std::string& size) { return "\"" + size + "\""; }

YAML::Node KeyNode(const YAML::Node& map, const std::string& name) {
  if (!map || !map.IsMap()) return YAML::Node();
  for (const auto& kv : map) {
    if (kv.first.IsScalar() && kv.first.Scalar() == name) return kv.first;
  }
  return YAML::Node();
}

std::vector<int> ItemLines(const YAML::Node& key, const YAML::Node& seq, int line, int col,
                           const std::vector<std::string>& lines) {
  if (!key || !seq || !seq.IsSequence() || seq.Style() == YAML::EmitterStyle::Flow) return {};
  // Written here, under the key: not an alias of a list other services share.
  if (seq.Mark().line <= key.Mark().line) return {};
  for (const auto& item : seq) {
    if (item.Mark().line != line || item.Mark().column != col) continue;
    const std::string& l = lines[static_cast<size_t>(line)];
    std::string before = l.substr(0, static_cast<size_t>(col));
    size_t dash = before.find_first_not_of(" \t");
    if (dash == std::string::npos || before[dash] != '-' ||
        before.find_first_not_of(" \t", dash + 1) != std::string::npos)
      return {};
    if (item.IsScalar() && !RestIsBlank(l, static_cast<size_t>(col + ScalarLength(l, col)))) return {};
    std::vector<int> out;
    for (int i = line; i <= LastLine(item); ++i) out.push_back(i);
    if (seq.size() == 1) {
      int kl = key.Mark().line, kc = key.Mark().column;
      const std::string& k = lines[static_cast<size_t>(kl)];
      size_t colon = k.find_first_not_of(" \t", static_cast<size_t>(kc) + key.Scalar().size());
      if (kl >= line || colon == std::string::npos || k[colon] != ':' || !RestIsBlank(k, colon + 1)) return {};
      out.push_back(kl);
    }
    return out;
  }
  return {};
}

}  // namespace shmkeeper::compose
