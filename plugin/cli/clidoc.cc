#include "clidoc.h"

#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace shmkeeper::cli {
namespace {

// A subcommand and the names leading to it ("" for the binary itself,
// "/install/docker" for `shmkeeper install docker`).
struct Node {
  const CLI::App* app;
  std::string at;     // "/install/docker"
  std::string words;  // "install docker"
};

std::vector<Node> Walk(const CLI::App& root) {
  std::vector<Node> out;
  std::function<void(const CLI::App*, const std::string&, const std::string&)> visit =
      [&](const CLI::App* app, const std::string& at, const std::string& words) {
        out.push_back({app, at, words});
        for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
          if (sub->get_name().empty()) continue;  // option groups
          visit(sub, at + "/" + sub->get_name(), words.empty() ? sub->get_name() : words + " " + sub->get_name());
        }
      };
  visit(&root, "", "");
  return out;
}

std::vector<const CLI::App*> Subcommands(const CLI::App* app) {
  std::vector<const CLI::App*> out;
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_name().empty()) out.push_back(sub);
  }
  return out;
}

// Visible options (CLI11 hides an option by giving it an empty group).
std::vector<const CLI::Option*> Options(const CLI::App* app) {
  return app->get_options([](const CLI::Option* o) { return !o->get_group().empty(); });
}

bool IsPositional(const CLI::Option* o) { return !o->nonpositional(); }
bool TakesValue(const CLI::Option* o) { return o->get_items_expected_max() != 0; }

std::vector<std::string> Flags(const CLI::Option* o) {
  std::vector<std::string> out;
  for (const std::string& s : o->get_snames()) out.push_back("-" + s);
  for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
  return out;
}

// The choices of a CLI::IsMember option, from its type name "TEXT:{a,b}".
std::vector<std::string> Choices(const CLI::Option* o) {
  std::string t = o->get_type_name();
  size_t open = t.find('{'), close = t.rfind('}');
  std::vector<std::string> out;
  if (open == std::string::npos || close == std::string::npos || close < open) return out;
  std::stringstream in(t.substr(open + 1, close - open - 1));
  for (std::string c; std::getline(in, c, ',');) {
    if (!c.empty()) out.push_back(c);
  }
  return out;
}

// The value's name for a man page: "TEXT" from "TEXT:{a,b}".
std::string ValueName(const CLI::Option* o) {
  std::string t = o->get_type_name();
  std::vector<std::string> c = Choices(o);
  if (!c.empty()) {
    std::string joined;
    for (const std::string& s : c) joined += (joined.empty() ? "" : "|") + s;
    return joined;
  }
  return t.empty() ? "VALUE" : t;
}

// roff: backslashes escaped, hyphens as \-, a leading . or ' neutralised.
std::string Roff(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
    line_start = c == '\n';
  }
  return out;
}

// "shmkeeper: does X" -> "does X".
std::string Summary(const CLI::App& app) {
  std::string d = app.get_description();
  std::string prefix = app.get_name() + ": ";
  if (d.compare(0, prefix.size(), prefix) == 0) d = d.substr(prefix.size());
  return d;
}

void ManOptions(std::ostringstream& out, const CLI::App* app) {
  for (const CLI::Option* o : Options(app)) {
    if (app->get_parent() != nullptr && o == app->get_help_ptr()) continue;  // said once, at the top
    out << ".TP\n";
    if (IsPositional(o)) {
      out << "\\fI" << Roff(o->get_name(true)) << "\\fR";
    } else {
      std::string names;
      for (const std::string& f : Flags(o)) names += (names.empty() ? "" : ", ") + ("\\fB" + Roff(f) + "\\fR");
      out << names;
      if (TakesValue(o)) out << " \\fI" << Roff(ValueName(o)) << "\\fR";
    }
    out << "\n" << Roff(o->get_description().empty() ? "(no description)" : o->get_description()) << "\n";
  }
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string FunctionName(const std::string& prefix, const std::string& binary) {
  std::string out = prefix;
  for (char c : binary) out += (c == '-' ? '_' : c);
  return out;
}

// The `case` pattern matching every subcommand path of `nodes`.
std::string PathPattern(const std::vector<Node>& nodes) {
  std::string pattern;
  for (const Node& n : nodes) {
    if (n.at.empty()) continue;
    pattern += (pattern.empty() ? "" : "|") + Quote(n.at);
  }
  return pattern;
}

// (at, option flag) -> its value completion: choices, or files.
struct ValueRule {
  std::string pattern;  // '/doctor -o'|'/doctor --output'
  std::vector<std::string> choices;
};

std::vector<ValueRule> ValueRules(const std::vector<Node>& nodes) {
  std::vector<ValueRule> out;
  for (const Node& n : nodes) {
    for (const CLI::Option* o : Options(n.app)) {
      if (IsPositional(o) || !TakesValue(o)) continue;
      ValueRule r;
      for (const std::string& f : Flags(o)) r.pattern += (r.pattern.empty() ? "" : "|") + Quote(n.at + " " + f);
      r.choices = Choices(o);
      out.push_back(r);
    }
  }
  return out;
}

// What may come next at a node: subcommands, flags, positional choices.
struct Candidate {
  std::string word, description;
};

std::vector<Candidate> Candidates(const CLI::App* app) {
  std::vector<Candidate> out;
  for (const CLI::App* sub : Subcommands(app)) out.push_back({sub->get_name(), sub->get_description()});
  for (const CLI::Option* o : Options(app)) {
    if (IsPositional(o)) {
      for (const std::string& c : Choices(o)) out.push_back({c, o->get_description()});
      continue;
    }
    for (const std::string& f : Flags(o)) out.push_back({f, o->get_description()});
  }
  return out;
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

std::string ManPage(const CLI::App& app, const ManInfo& info) {
  std::ostringstream out;
  std::string name = app.get_name();
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  out << ".\\\" Generated from the binary's CLI11 definition (shmkeeper man " << name << "); do not edit.\n";
  out << ".TH " << Roff(upper) << " 1 \"\" \"shmkeeper " << Roff(info.version) << "\" \"shmkeeper manual\"\n";
  out << ".SH NAME\n" << Roff(name) << " \\- " << Roff(Summary(app)) << "\n";
  out << ".SH SYNOPSIS\n.B " << Roff(name) << "\n";
  std::vector<const CLI::App*> subs = Subcommands(&app);
  out << "[\\fIOPTIONS\\fR]";
  for (const CLI::Option* o : Options(&app)) {
    if (IsPositional(o)) out << " [\\fI" << Roff(o->get_name(true)) << "\\fR]";
  }
  if (!subs.empty()) out << " \\fICOMMAND\\fR [\\fIARGS\\fR]";
  out << "\n";
  if (!info.description.empty()) {
    out << ".SH DESCRIPTION\n";
    std::stringstream in(info.description);
    for (std::string line; std::getline(in, line);) out << (line.empty() ? ".PP" : Roff(line)) << "\n";
  }
  out << ".SH OPTIONS\n";
  ManOptions(out, &app);
  if (!subs.empty()) {
    out << ".SH COMMANDS\n";
    for (const Node& n : Walk(app)) {
      if (n.at.empty()) continue;
      out << ".SS \"" << Roff(name + " " + n.words) << "\"\n";
      out << Roff(n.app->get_description().empty() ? "(no description)" : n.app->get_description()) << "\n";
      ManOptions(out, n.app);
    }
  }
  if (!info.files.empty()) {
    out << ".SH FILES\n";
    for (const auto& [path, what] : info.files) out << ".TP\n\\fI" << Roff(path) << "\\fR\n" << Roff(what) << "\n";
  }
  if (!info.see_also.empty()) {
    out << ".SH SEE ALSO\n";
    std::string list;
    for (const std::string& s : info.see_also) {
      size_t paren = s.find('(');
      list += (list.empty() ? "" : ",\n") + ("\\fB" + Roff(s.substr(0, paren)) + "\\fR" + s.substr(paren));
    }
    out << list << "\n";
  }
  return out.str();
}

std::string BashCompletion(const std::vector<const CLI::App*>& apps) {
  std::ostringstream out;
  out << "# bash completion for shmkeeper's binaries, generated from their CLI11 definitions\n"
         "# (shmkeeper completion bash); do not edit.\n";
  for (const CLI::App* app : apps) {
    std::vector<Node> nodes = Walk(*app);
    std::string fn = FunctionName("_", app->get_name());
    out << fn << "() {\n"
        << "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} at= i\n"
        << "  for ((i = 1; i < COMP_CWORD; i++)); do\n";
    std::string pattern = PathPattern(nodes);
    if (!pattern.empty()) {
      out << "    case \"$at/${COMP_WORDS[i]}\" in\n"
          << "      " << pattern << ") at=$at/${COMP_WORDS[i]} ;;\n"
          << "    esac\n";
    } else {
      out << "    :\n";
    }
    out << "  done\n";
    std::vector<ValueRule> rules = ValueRules(nodes);
    if (!rules.empty()) {
      out << "  case \"$at $prev\" in\n";
      for (const ValueRule& r : rules) {
        if (r.choices.empty()) {
          out << "    " << r.pattern << ") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n";
        } else {
          std::string words;
          for (const std::string& c : r.choices) words += (words.empty() ? "" : " ") + c;
          out << "    " << r.pattern << ") COMPREPLY=($(compgen -W " << Quote(words) << " -- \"$cur\")); return ;;\n";
        }
      }
      out << "  esac\n";
    }
    out << "  local words=\n  case \"$at\" in\n";
    for (const Node& n : nodes) {
      std::string words;
      for (const Candidate& c : Candidates(n.app)) words += (words.empty() ? "" : " ") + c.word;
      out << "    " << Quote(n.at) << ") words=" << Quote(words) << " ;;\n";
    }
    out << "  esac\n"
        << "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
        << "}\n"
        << "complete -F " << fn << " " << app->get_name() << "\n";
  }
  return out.str();
}

std::string ZshCompletion(const std::vector<const CLI::App*>& apps) {
  std::ostringstream out;
  out << "#compdef";
  for (const CLI::App* app : apps) out << " " << app->get_name();
  out << "\n# zsh completion for shmkeeper's binaries, generated from their CLI11 definitions\n"
         "# (shmkeeper completion zsh); do not edit.\n";
  for (const CLI::App* app : apps) {
    std::vector<Node> nodes = Walk(*app);
    out << FunctionName("_shmkeeper_complete_", app->get_name()) << "() {\n"
        << "  local at= i\n"
        << "  for ((i = 2; i < CURRENT; i++)); do\n";
    std::string pattern = PathPattern(nodes);
    if (!pattern.empty()) {
      out << "    case \"$at/${words[i]}\" in\n"
          << "      " << pattern << ") at=$at/${words[i]} ;;\n"
          << "    esac\n";
    } else {
      out << "    :\n";
    }
    out << "  done\n";
    std::vector<ValueRule> rules = ValueRules(nodes);
    if (!rules.empty()) {
      out << "  case \"$at ${words[CURRENT-1]}\" in\n";
      for (const ValueRule& r : rules) {
        if (r.choices.empty()) {
          out << "    " << r.pattern << ") _files; return ;;\n";
        } else {
          out << "    " << r.pattern << ") compadd --";
          for (const std::string& c : r.choices) out << " " << Quote(c);
          out << "; return ;;\n";
        }
      }
      out << "  esac\n";
    }
    out << "  local -a entries\n  case \"$at\" in\n";
    for (const Node& n : nodes) {
      out << "    " << Quote(n.at) << ") entries=(";
      bool first = true;
      for (const Candidate& c : Candidates(n.app)) {
        out << (first ? "" : " ") << Quote(c.word + ":" + FirstLine(c.description));
        first = false;
      }
      out << ") ;;\n";
    }
    out << "  esac\n"
        << "  _describe -t commands " << Quote(app->get_name()) << " entries\n"
        << "}\n";
  }
  out << "case $service in\n";
  for (const CLI::App* app : apps) {
    out << "  " << Quote(app->get_name()) << ") " << FunctionName("_shmkeeper_complete_", app->get_name())
        << " \"$@\" ;;\n";
  }
  out << "esac\n";
  return out.str();
}

}  // namespace shmkeeper::cli
