// tests/io/io_support.hpp — what the checkpoint tests share: random elements of
// every safetensors dtype, a fresh scratch directory per test, and a loop over
// the element types.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <fusor/io/checkpoint.hpp>

#include "support/fusor_test.hpp"

namespace io_test {

using namespace fusor_test;
namespace fio = fusor::io;

// Every element type a safetensors dtype stores, widest first.
template <class Visit>
void for_each_element_type(Visit&& visit) {
  visit.template operator()<double>();
  visit.template operator()<float>();
  visit.template operator()<bfloat16>();
  visit.template operator()<float16>();
  visit.template operator()<std::int64_t>();
  visit.template operator()<std::int32_t>();
  visit.template operator()<std::int16_t>();
  visit.template operator()<std::int8_t>();
  visit.template operator()<std::uint8_t>();
  visit.template operator()<bool>();
}

// A random element: floats in [-100, 100), integers over their whole range.
template <class T>
T random_element(std::mt19937_64& rng) {
  if constexpr (std::is_same_v<T, bool>) {
    return (rng() & 1) != 0;
  } else if constexpr (std::is_integral_v<T>) {
    std::uniform_int_distribution<long long> d(std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    return static_cast<T>(d(rng));
  } else {
    std::uniform_real_distribution<double> d(-100.0, 100.0);
    return convert<T>(d(rng));
  }
}

// Fills every element of a host-accessible view's memory with random values.
template <class V>
void fill_elements(const V& v, std::uint64_t seed) {
  const auto& view = as_view(v);
  using element = typename std::remove_cvref_t<decltype(view)>::element_type;
  std::mt19937_64 rng(seed);
  for (index_t i = 0; i < view.mapping().required_span_size(); ++i) view.data()[i] = random_element<element>(rng);
}

template <class T>
std::vector<std::byte> random_bytes(index_t count, std::uint64_t seed) {
  std::vector<std::byte> bytes(static_cast<std::size_t>(count) * sizeof(T));
  std::mt19937_64 rng(seed);
  for (index_t i = 0; i < count; ++i) {
    const T x = random_element<T>(rng);
    std::memcpy(bytes.data() + i * sizeof(T), &x, sizeof(T));
  }
  return bytes;
}

// A directory of its own under the system's temporary directory, removed
// (with everything in it) at the end of the test.
struct scratch_directory {
  std::filesystem::path path;
  explicit scratch_directory(const std::string& tag) {
    std::random_device entropy;
    path = std::filesystem::temp_directory_path() /
           ("fusor_io_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(entropy()));
    std::filesystem::create_directories(path);
  }
  ~scratch_directory() {
    std::error_code ignored;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path, ignored);
  }
  std::filesystem::path operator/(const std::string& name) const { return path / name; }
};

inline std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

}  // namespace io_test
