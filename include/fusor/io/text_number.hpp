// fusor/io/text_number.hpp — numbers read from text a person or a file wrote
// (command lines, checkpoint metadata), strictly: the whole text must be the
// number, in the type's range, finite. "1x", " 3", "+2", "0x10", "nan" and
// "1e99" for a float are all refused, where std::stoi would take "1x" as 1
// and report others as "stoi".
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#include "fusor/config.hpp"

namespace fusor::io {

/// Why a text is not a number of the type asked for.
enum class number_fault {
  none,  ///< No fault: the text is the number
  not_a_number,     ///< Empty, trailing characters, a sign where none is allowed
  beyond_the_type,  ///< A number, but too large (or small) for the type
  not_finite,       ///< "nan", "inf" for a floating-point type
};

/// A number read from text by parse_number(), or the fault that stopped it.
template <class T>
struct text_number {
  T value{};  ///< The number; meaningful only when there is no fault.
  number_fault fault = number_fault::none;  ///< Why the text is not a T; none when it is.
  /// Whether the text was a T.
  explicit operator bool() const { return fault == number_fault::none; }
};

/// The types parse_number() reads: the integer types but bool, and the floating-point types.
template <class T>
concept text_number_type = (std::integral<T> && !std::same_as<T, bool>) || std::floating_point<T>;

/// `text` as a T, or the fault that stops it.
template <text_number_type T>
text_number<T> parse_number(std::string_view text) {
  text_number<T> out;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  // from_chars accepts a leading '-' for unsigned types as an error, and no
  // '+' or space at all: exactly the strictness wanted.
  const auto [end, error] = std::from_chars(first, last, out.value);
  if (text.empty() || end != last || error == std::errc::invalid_argument)
    out.fault = number_fault::not_a_number;
  else if (error == std::errc::result_out_of_range)
    out.fault = number_fault::beyond_the_type;
  else if constexpr (std::floating_point<T>) {
    if (!std::isfinite(out.value)) out.fault = number_fault::not_finite;
  }
  return out;
}

/// What a T is, as an error message says it: "a whole number", "a whole number, 0 or more", "a finite number".
template <text_number_type T>
std::string number_kind() {
  if constexpr (std::floating_point<T>) return "a finite number";
  else if constexpr (std::unsigned_integral<T>) return "a whole number, 0 or more";
  else return "a whole number";
}

namespace detail {
// number_fault_text's body, one function for every T: `kind` is number_kind<T>(), `beyond` what follows the
// quoted text when it lies beyond T.
FUSOR_DECL std::string number_fault_message(std::string_view text, number_fault fault, const std::string& kind,
                                            const std::string& beyond);
}  // namespace detail

/// Why `text` is not a T, for an error message ("'1x' is not a whole number").
template <text_number_type T>
std::string number_fault_text(std::string_view text, number_fault fault) {
  std::string beyond;
  if constexpr (std::floating_point<T>) beyond = std::string(" is beyond what a ") + (sizeof(T) == 4 ? "float" : "double") + " holds";
  else
    beyond = " is beyond this value's range (" + std::to_string(std::numeric_limits<T>::lowest()) + " to " +
             std::to_string(std::numeric_limits<T>::max()) + ")";
  return detail::number_fault_message(text, fault, number_kind<T>(), beyond);
}

#if defined(FUSOR_SEPARATE_COMPILATION)
// The usual number types' messages come from fusor_runtime (src/io.cpp).
extern template std::string number_fault_text<int>(std::string_view, number_fault);
extern template std::string number_fault_text<long>(std::string_view, number_fault);
extern template std::string number_fault_text<unsigned long>(std::string_view, number_fault);
extern template std::string number_fault_text<float>(std::string_view, number_fault);
extern template std::string number_fault_text<double>(std::string_view, number_fault);
#endif

}  // namespace fusor::io

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/io/impl/text_number.ipp"
#endif
