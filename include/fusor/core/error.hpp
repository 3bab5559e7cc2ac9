// fusor/core/error.hpp — the exceptions fusor throws, each naming what went wrong.
//
// shape_error names both shapes, cuda_error the call, file and line, and
// allocation_error the bytes requested and the memory space.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "fusor/config.hpp"

namespace fusor {

/// The base of every exception fusor throws.
struct error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Two shapes that should agree (or broadcast) do not.
struct shape_error : error {
  using error::error;
};

/// A CUDA runtime call returned an error, or CUDA is needed and absent.
struct cuda_error : error {
  using error::error;
};

/// Memory could not be allocated.
struct allocation_error : error {
  /// Reports `bytes` bytes of the space named `space` ("device", "host", ...) refused for reason `why`.
  allocation_error(std::size_t bytes, const char* space, const std::string& why);
  std::size_t bytes_requested;  ///< The size of the refused request, in bytes.
};

}  // namespace fusor

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/core/impl/error.ipp"
#endif
