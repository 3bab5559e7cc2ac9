// fusor/app/command_line.hpp — a training program's options, declared once as
// a table of typed entries bound to variables: parsing, range checks, --help
// and a Markdown table for the docs all come from that table.
//
//   int epochs = 10;
//   float lr = 1e-3f;
//   fusor::app::command_line cli("Trains an MLP on Fashion-MNIST.");
//   cli.number("--epochs", epochs, "epochs", fusor::app::between(1, 100000))
//      .number("--lr", lr, "peak learning rate", fusor::app::above(0.f));
//   if (!cli.parse(argc, argv)) return 0;  // --help was printed
//
// Every mistake is a usage_error naming the option, the text given and what
// is accepted: "--epochs 1x: '1x' is not a whole number (accepted: 1 to
// 100000)". Numbers are read strictly (io/text_number.hpp): the whole text,
// finite, in range. Both "--name value" and "--name=value" are read; an
// option given twice keeps the last value. --help prints the table as text,
// --help-markdown as a Markdown table (for README). The command_line keeps
// references to the bound variables: they must outlive parse().
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fusor/core/error.hpp"
#include "fusor/io/text_number.hpp"

namespace fusor::app {

/// A mistake on the command line (programs exit with status 2 for it).
struct usage_error : error {
  using error::error;
};

/// The values a numeric option accepts: an optional lower bound (included, or
/// excluded with `low_open`) and an optional upper bound (included).
template <class T>
struct bounds {
  /// The lower bound; empty for none.
  std::optional<T> low, high;  ///< The upper bound; empty for none.
  bool low_open = false;  ///< Whether `low` itself is excluded.

  /// Whether `v` lies within the bounds.
  bool contains(T v) const {
    if (low && (low_open ? !(v > *low) : v < *low)) return false;
    return !(high && v > *high);
  }
  /// "1 to 100000", "1 or more", "above 0", "at most 8"; empty when unbounded.
  std::string text() const;
};

/// `low` or more.
template <class T> bounds<T> at_least(T low) { return {low, std::nullopt, false}; }
/// Above `low`.
template <class T> bounds<T> above(T low) { return {low, std::nullopt, true}; }
/// `high` at most.
template <class T> bounds<T> at_most(T high) { return {std::nullopt, high, false}; }
/// From `low` to `high`, both included.
template <class T> bounds<T> between(T low, T high) { return {low, high, false}; }
/// Above `low`, `high` at most.
template <class T> bounds<T> above_up_to(T low, T high) { return {low, high, true}; }

namespace detail {
template <class T>
std::string show(const T& v) {
  if constexpr (std::floating_point<T>) {
    std::ostringstream s;
    s << v;
    return s.str();
  } else {
    return std::to_string(v);
  }
}
}  // namespace detail

template <class T>
std::string bounds<T>::text() const {
  if (low && high) return (low_open ? "above " + detail::show(*low) + ", up to " : detail::show(*low) + " to ") + detail::show(*high);
  if (low) return low_open ? "above " + detail::show(*low) : detail::show(*low) + " or more";
  if (high) return "at most " + detail::show(*high);
  return "";
}

/// A program's options as a table of typed entries bound to variables; parse() fills them, help() and
/// markdown() describe them. The variables are kept by reference and must outlive parse().
class command_line {
 public:
  /// `summary`: --help's first line after the usage line.
  explicit command_line(std::string summary = "") : summary_(std::move(summary)) {}

  /// A number, read strictly and checked against `accepted`.
  template <io::text_number_type T>
  command_line& number(std::string name, T& target, std::string meaning, bounds<T> accepted = {}) {
    return add(std::move(name), std::integral<T> ? "N" : "X", std::move(meaning), detail::show(target), accepted.text(),
               [&target, accepted](std::string_view text) { target = read_number(text, accepted); });
  }
  /// A number with no default: left empty unless given.
  template <io::text_number_type T>
  command_line& number(std::string name, std::optional<T>& target, std::string meaning, bounds<T> accepted = {}) {
    return add(std::move(name), std::integral<T> ? "N" : "X", std::move(meaning),
               target ? detail::show(*target) : "", accepted.text(),
               [&target, accepted](std::string_view text) { target = read_number(text, accepted); });
  }
  /// A comma-separated list of numbers, each checked against `accepted`.
  template <io::text_number_type T>
  command_line& numbers(std::string name, std::vector<T>& target, std::string meaning, bounds<T> accepted = {}) {
    std::string shown;
    for (const T& v : target) shown.append(shown.empty() ? "" : ",").append(detail::show(v));
    const std::string each = accepted.text();
    return add(std::move(name), std::integral<T> ? "N,N,..." : "X,X,...", std::move(meaning), shown,
               each.empty() ? std::string() : std::string("each ").append(each), [&target, accepted](std::string_view text) {
                 std::vector<T> values;
                 for (std::size_t start = 0;;) {
                   const std::size_t comma = text.find(',', start);
                   values.push_back(read_number(text.substr(start, comma - start), accepted));
                   if (comma == std::string_view::npos) break;
                   start = comma + 1;
                 }
                 target = std::move(values);
               });
  }
  /// Free text (a prompt, a name). `non_empty`: refuse "".
  command_line& text(std::string name, std::string& target, std::string meaning, std::string metavar = "TEXT",
                     bool non_empty = true) {
    return add(std::move(name), std::move(metavar), std::move(meaning), target.empty() ? "" : "'" + escaped(target) + "'",
               "", [&target, non_empty](std::string_view text) {
                 if (non_empty && text.empty()) throw usage_error("an empty value is not accepted");
                 target = std::string(text);
               });
  }
  /// A path; whether it exists is for the program to check (with a better message than a parser could give).
  command_line& path(std::string name, std::filesystem::path& target, std::string meaning, std::string metavar = "FILE") {
    return add(std::move(name), std::move(metavar), std::move(meaning), target.string(), "",
               [&target](std::string_view text) {
                 if (text.empty()) throw usage_error("an empty path is not accepted");
                 target = std::filesystem::path(text);
               });
  }
  /// One of several names, each standing for a value of T (an enum, say).
  template <class T>
  command_line& choice(std::string name, T& target, std::vector<std::pair<std::string, T>> names, std::string meaning) {
    std::string shown, list;
    for (const auto& [n, v] : names) {
      if (v == target && shown.empty()) shown = n;
      list += (list.empty() ? "" : "|") + n;
    }
    return add(std::move(name), list, std::move(meaning), shown, "", [&target, names, list](std::string_view text) {
      for (const auto& [n, v] : names)
        if (n == text) return void(target = v);
      throw usage_error("'" + std::string(text) + "' is not one of " + list);
    });
  }
  /// A choice of strings, kept as the string.
  command_line& choice(std::string name, std::string& target, const std::vector<std::string>& names, std::string meaning) {
    std::vector<std::pair<std::string, std::string>> same;
    for (const auto& n : names) same.emplace_back(n, n);
    return choice(std::move(name), target, std::move(same), std::move(meaning));
  }
  /// An option without a value: sets `target` to `when_given`.
  command_line& flag(std::string name, bool& target, std::string meaning, bool when_given = true) {
    return action(std::move(name), std::move(meaning), [&target, when_given] { target = when_given; });
  }
  /// An option without a value that runs `act`.
  command_line& action(std::string name, std::string meaning, std::function<void()> act) {
    entry e{std::move(name), "", std::move(meaning), "", "", nullptr};
    e.act = std::move(act);
    return add_entry(std::move(e));
  }
  /// Whether --help prints (false: parse() still stops there): in a job of
  /// several processes, one prints.
  command_line& print_help(bool yes) {
    print_help_ = yes;
    return *this;
  }
  /// Text after the options in --help (exit statuses, say).
  command_line& epilogue(std::string text) {
    epilogue_ = std::move(text);
    return *this;
  }

  /// Reads argv into the bound variables. False when --help (or --help-markdown)
  /// was given: the help is printed to stdout and the program should exit 0.
  /// Throws usage_error for an unknown option, a missing value or one not accepted.
  bool parse(int argc, const char* const* argv) {
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
  /// parse() for main()'s non-const `argv`.
  bool parse(int argc, char** argv) { return parse(argc, const_cast<const char* const*>(argv)); }

  /// For a main() with nothing to clean up: parse(), but --help exits with
  /// status 0 after printing, and a mistake prints "error: ..." to stderr and
  /// exits with status 2.
  void parse_or_exit(int argc, char** argv) {
    try {
      if (!parse(argc, argv)) std::exit(0);
    } catch (const usage_error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      std::exit(2);
    }
  }

  /// --help: usage, summary, one line per option (meaning; default; accepted values), epilogue.
  std::string help() const {
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
  /// The same table in Markdown, for README (--help-markdown prints it).
  std::string markdown() const {
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

  /// The option names, in declaration order.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const entry& e : entries_) out.push_back(e.name);
    return out;
  }

 private:
  struct entry {
    std::string name, metavar, meaning, shown_default, accepted;
    std::function<void(std::string_view)> read;  // an option with a value
    std::function<void()> act = nullptr;         // an option without one
  };

  template <class T>
  static T read_number(std::string_view text, const bounds<T>& accepted) {
    const io::text_number<T> n = io::parse_number<T>(text);
    if (!n) throw usage_error(io::number_fault_text<T>(text, n.fault));
    if (!accepted.contains(n.value)) throw usage_error("out of range");
    return n.value;
  }

  command_line& add(std::string name, std::string metavar, std::string meaning, std::string shown_default,
                    std::string accepted, std::function<void(std::string_view)> read) {
    return add_entry(entry{std::move(name), std::move(metavar), std::move(meaning), std::move(shown_default),
                           std::move(accepted), std::move(read)});
  }
  command_line& add_entry(entry e) {
    if (e.name.substr(0, 2) != "--" || e.name.find('=') != std::string::npos || e.name == "--help" ||
        e.name == "--help-markdown")
      throw error("fusor::app::command_line: option names start with -- and hold no '=' (--help is built in): " + e.name);
    for (const entry& other : entries_)
      if (other.name == e.name) throw error("fusor::app::command_line: option " + e.name + " declared twice");
    entries_.push_back(std::move(e));
    return *this;
  }

  // A default as it would be typed: a newline as \n.
  static std::string escaped(const std::string& text) {
    std::string out;
    for (char c : text) out += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
    return out;
  }

  static std::string left_column(const entry& e) { return e.metavar.empty() ? e.name : e.name + " " + e.metavar; }

  const entry& find(std::string_view name) const {
    for (const entry& e : entries_)
      if (e.name == name) return e;
    std::string hint;
    std::size_t best = 3;  // suggest only a near miss: at most 2 edits
    for (const entry& e : entries_)
      if (const std::size_t d = edit_distance(name, e.name); d < best) best = d, hint = e.name;
    throw usage_error("unknown option " + std::string(name) + (hint.empty() ? "" : " (did you mean " + hint + "?)") +
                      "; --help lists them");
  }

  static std::size_t edit_distance(std::string_view a, std::string_view b) {
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

  std::string summary_, epilogue_, program_ = "program";
  bool print_help_ = true;
  std::vector<entry> entries_;
};

}  // namespace fusor::app
