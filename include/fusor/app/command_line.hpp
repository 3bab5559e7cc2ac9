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

#include "fusor/config.hpp"
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
  command_line& number(std::string name, T& target, std::string meaning, bounds<T> accepted = {});
  /// A number with no default: left empty unless given.
  template <io::text_number_type T>
  command_line& number(std::string name, std::optional<T>& target, std::string meaning, bounds<T> accepted = {});
  /// A comma-separated list of numbers, each checked against `accepted`.
  template <io::text_number_type T>
  command_line& numbers(std::string name, std::vector<T>& target, std::string meaning, bounds<T> accepted = {});
  /// Free text (a prompt, a name). `non_empty`: refuse "".
  command_line& text(std::string name, std::string& target, std::string meaning, std::string metavar = "TEXT",
                     bool non_empty = true);
  /// A path; whether it exists is for the program to check (with a better message than a parser could give).
  command_line& path(std::string name, std::filesystem::path& target, std::string meaning,
                     std::string metavar = "FILE");
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
  command_line& choice(std::string name, std::string& target, const std::vector<std::string>& names,
                       std::string meaning);
  /// An option without a value: sets `target` to `when_given`.
  command_line& flag(std::string name, bool& target, std::string meaning, bool when_given = true);
  /// An option without a value that runs `act`.
  command_line& action(std::string name, std::string meaning, std::function<void()> act);
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
  bool parse(int argc, const char* const* argv);
  /// parse() for main()'s non-const `argv`.
  bool parse(int argc, char** argv) { return parse(argc, const_cast<const char* const*>(argv)); }

  /// For a main() with nothing to clean up: parse(), but --help exits with
  /// status 0 after printing, and a mistake prints "error: ..." to stderr and
  /// exits with status 2.
  void parse_or_exit(int argc, char** argv);

  /// --help: usage, summary, one line per option (meaning; default; accepted values), epilogue.
  std::string help() const;
  /// The same table in Markdown, for README (--help-markdown prints it).
  std::string markdown() const;

  /// The option names, in declaration order.
  std::vector<std::string> names() const;

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
                    std::string accepted, std::function<void(std::string_view)> read);
  command_line& add_entry(entry e);

  // A default as it would be typed: a newline as \n.
  static std::string escaped(const std::string& text);

  static std::string left_column(const entry& e);

  const entry& find(std::string_view name) const;

  static std::size_t edit_distance(std::string_view a, std::string_view b);

  std::string summary_, epilogue_, program_ = "program";
  bool print_help_ = true;
  std::vector<entry> entries_;
};

// Defined out of the class (not inline), so that fusor_runtime's copies for the usual number types serve (below).
template <io::text_number_type T>
command_line& command_line::number(std::string name, T& target, std::string meaning, bounds<T> accepted) {
  return add(std::move(name), std::integral<T> ? "N" : "X", std::move(meaning), detail::show(target), accepted.text(),
             [&target, accepted](std::string_view text) { target = read_number(text, accepted); });
}
template <io::text_number_type T>
command_line& command_line::number(std::string name, std::optional<T>& target, std::string meaning, bounds<T> accepted) {
  return add(std::move(name), std::integral<T> ? "N" : "X", std::move(meaning),
             target ? detail::show(*target) : "", accepted.text(),
             [&target, accepted](std::string_view text) { target = read_number(text, accepted); });
}
template <io::text_number_type T>
command_line& command_line::numbers(std::string name, std::vector<T>& target, std::string meaning, bounds<T> accepted) {
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

// The number options of the usual types, instantiated once: `Prefix` is `extern` here (with fusor::runtime) and
// empty in src/app.cpp, which compiles them.
#define FUSOR_APP_NUMBER_OPTIONS(Prefix, T)                                                                     \
  Prefix template std::string bounds<T>::text() const;                                                         \
  Prefix template command_line& command_line::number<T>(std::string, T&, std::string, bounds<T>);              \
  Prefix template command_line& command_line::number<T>(std::string, std::optional<T>&, std::string, bounds<T>); \
  Prefix template command_line& command_line::numbers<T>(std::string, std::vector<T>&, std::string, bounds<T>);
#define FUSOR_APP_FOR_NUMBER_TYPES(Prefix)                                                             \
  FUSOR_APP_NUMBER_OPTIONS(Prefix, int) FUSOR_APP_NUMBER_OPTIONS(Prefix, long)                         \
  FUSOR_APP_NUMBER_OPTIONS(Prefix, unsigned long) FUSOR_APP_NUMBER_OPTIONS(Prefix, float)              \
  FUSOR_APP_NUMBER_OPTIONS(Prefix, double)
#if defined(FUSOR_SEPARATE_COMPILATION)
FUSOR_APP_FOR_NUMBER_TYPES(extern)
#endif

}  // namespace fusor::app

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/app/impl/command_line.ipp"
#endif
