// fusor/app/impl/command_line.ipp — definitions of fusor/app/command_line.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/app/command_line.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fusor::app {

FUSOR_DECL command_line& command_line::text(std::string name, std::string& target, std::string meaning,
                                            std::string metavar, bool non_empty) {
  std::string shown;  // appended, not "'" + string: g++ 12 -O3 warns falsely (-Wrestrict) on that
  if (!target.empty()) shown.append(1, '\'').append(escaped(target)).push_back('\'');
  return add(std::move(name), std::move(metavar), std::move(meaning), std::move(shown), "",
             [&target, non_empty](std::string_view text) {
               if (non_empty && text.empty()) throw usage_error("an empty value is not accepted");
               target = std::string(text);
             });
}

FUSOR_DECL command_line& command_line::path(std::string name, std::filesystem::path& target, std::string meaning,
                                            std::string metavar) {
  return add(std::move(name), std::move(metavar), std::move(meaning), target.string(), "",
             [&target](std::string_view text) {
               if (text.empty()) throw usage_error("an empty path is not accepted");
               target = std::filesystem::path(text);
             });
}

FUSOR_DECL command_line& command_line::choice(std::string name, std::string& target,
                                              const std::vector<std::string>& names, std::string meaning) {
  std::vector<std::pair<std::string, std::string>> same;
  for (const auto& n : names) same.emplace_back(n, n);
  return choice(std::move(name), target, std::move(same), std::move(meaning));
}

FUSOR_DECL command_line& command_line::flag(std::string name, bool& target, std::string meaning, bool when_given) {
  return action(std::move(name), std::move(meaning), [&target, when_given] { target = when_given; });
}

FUSOR_DECL command_line& command_line::action(std::string name, std::string meaning, std::function<void()> act) {
  entry e{std::move(name), "", std::move(meaning), "", "", nullptr};
  e.act = std::move(act);
  return add_entry(std::move(e));
}

FUSOR_DECL bool command_line::parse(int argc, const char* const* argv) {
  program_ = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "program";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "--help-markdown") {
      if (print_help_) std::fputs((arg == "--help-markdown" ? markdown() : help()).c_str(), stdout);
      return false;
    }
    if (arg.substr(0, 2) != "--")
      throw usage_error("unexpected argument '" + std::string(arg) + "': every option starts with -- (--help lists them)");
    std::optional<std::string_view> inline_value;
    if (const std::size_t equals = arg.find('='); equals != std::string_view::npos) {
      inline_value = arg.substr(equals + 1);
      arg = arg.substr(0, equals);
    }
    const entry& e = find(arg);
    if (e.act) {
      if (inline_value) throw usage_error(e.name + " takes no value (given '" + std::string(*inline_value) + "')");
      e.act();
      continue;
    }
    std::string_view value;
    if (inline_value) {
      value = *inline_value;
    } else {
      // A following option is not this one's value: "--checkpoint --resume" forgot the file.
      if (i + 1 >= argc || std::string_view(argv[i + 1]).substr(0, 2) == "--")
        throw usage_error(e.name + " needs a value: " + e.metavar + (e.accepted.empty() ? "" : ", " + e.accepted));
      value = argv[++i];
    }
    try {
      e.read(value);
    } catch (const usage_error& why) {
      throw usage_error(e.name + " " + std::string(value) + ": " + why.what() +
                        (e.accepted.empty() ? "" : " (accepted: " + e.accepted + ")"));
    }
  }
  return true;
}

FUSOR_DECL void command_line::parse_or_exit(int argc, char** argv) {
  try {
    if (!parse(argc, argv)) std::exit(0);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::exit(2);
  }
}

FUSOR_DECL std::string command_line::help() const {
  std::size_t width = std::string_view("--help").size();
  for (const entry& e : entries_) width = std::max(width, left_column(e).size());
  const auto line = [width](const std::string& left, const std::string& right) {
    return "  " + left + std::string(width + 2 - left.size(), ' ') + right + "\n";
  };
  std::string out = "usage: " + program_ + " [options]\n";
  if (!summary_.empty()) out += summary_ + "\n";
  out += "\noptions:\n";
  for (const entry& e : entries_) {
    std::string extra;
    if (!e.shown_default.empty()) extra = "default " + e.shown_default;
    if (!e.accepted.empty()) extra += (extra.empty() ? "" : "; ") + e.accepted;
    out += line(left_column(e), e.meaning + (extra.empty() ? "" : " (" + extra + ")"));
  }
  out += line("--help", "this text");
  if (!epilogue_.empty()) out += "\n" + epilogue_ + "\n";
  return out;
}

FUSOR_DECL std::string command_line::markdown() const {
  std::string out = "| option | meaning | default | accepted |\n|---|---|---|---|\n";
  const auto cell = [](std::string s) {
    std::string escaped;
    for (char c : s) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
    return escaped;
  };
  for (const entry& e : entries_)
    out += "| `" + cell(left_column(e)) + "` | " + cell(e.meaning) + " | " + cell(e.shown_default) + " | " +
           cell(e.accepted) + " |\n";
  return out;
}

FUSOR_DECL std::vector<std::string> command_line::names() const {
  std::vector<std::string> out;
  for (const entry& e : entries_) out.push_back(e.name);
  return out;
}

FUSOR_DECL command_line& command_line::add(std::string name, std::string metavar, std::string meaning,
                                           std::string shown_default, std::string accepted,
                                           std::function<void(std::string_view)> read) {
  return add_entry(entry{std::move(name), std::move(metavar), std::move(meaning), std::move(shown_default),
                         std::move(accepted), std::move(read)});
}

FUSOR_DECL command_line& command_line::add_entry(entry e) {
  if (e.name.substr(0, 2) != "--" || e.name.find('=') != std::string::npos || e.name == "--help" ||
      e.name == "--help-markdown")
    throw error("fusor::app::command_line: option names start with -- and hold no '=' (--help is built in): " + e.name);
  for (const entry& other : entries_)
    if (other.name == e.name) throw error("fusor::app::command_line: option " + e.name + " declared twice");
  entries_.push_back(std::move(e));
  return *this;
}

FUSOR_DECL std::string command_line::escaped(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
  return out;
}

FUSOR_DECL std::string command_line::left_column(const entry& e) {
  return e.metavar.empty() ? e.name : e.name + " " + e.metavar;
}

FUSOR_DECL const command_line::entry& command_line::find(std::string_view name) const {
  for (const entry& e : entries_)
    if (e.name == name) return e;
  std::string hint;
  std::size_t best = 3;  // suggest only a near miss: at most 2 edits
  for (const entry& e : entries_)
    if (const std::size_t d = edit_distance(name, e.name); d < best) best = d, hint = e.name;
  throw usage_error("unknown option " + std::string(name) + (hint.empty() ? "" : " (did you mean " + hint + "?)") +
                    "; --help lists them");
}

FUSOR_DECL std::size_t command_line::edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace fusor::app
