// Line edits of a compose file's text (internal to shmkeeper_compose): the
// positions yaml-cpp gives, turned into byte-exact replacements, inserts and
// deletions that leave every other byte alone.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace shmkeeper::compose {

struct Edit {
  int line;  // 0-based line index the edit applies at
  enum Kind { kReplace, kInsertBefore, kDelete } kind;
  int column = 0;  // kReplace: 0-based start
  int length = 0;  // kReplace: bytes replaced
  std::string text;
  size_t group = 0;  // the finding it fixes: a group is kept or dropped whole
};

// The lines with `edits` applied bottom-up, so earlier line numbers stay
// valid; an insert after a line without ending gets `eol` first.
std::string ApplyEdits(std::vector<std::string> lines, std::vector<Edit> edits, const std::string& eol);

// `text` split after each '\n' (every line keeps its own ending); *crlf when
// it has a "\r\n".
std::vector<std::string> SplitLines(const std::string& text, bool* crlf);

// Length of the scalar written at `col` on `line` (quoted or plain, up to a comment).
int ScalarLength(const std::string& line, int col);

// `size` in double quotes.
std::string Quote(const std::string& size);

// The key node named `name` of the block mapping `map` (null when none).
YAML::Node KeyNode(const YAML::Node& map, const std::string& name);

// The 0-based lines to delete to drop the item of block sequence `seq`
// (under key `key`) that starts at `line`:`col`, and the key line too when it
// is the only item (compose rejects an empty volumes). Empty when the item
// shares a line with anything else.
std::vector<int> ItemLines(const YAML::Node& key, const YAML::Node& seq, int line, int col,
                           const std::vector<std::string>& lines);

}  // namespace shmkeeper::compose
