// fusor/data/error.hpp — data_error: a data set cannot be read (a file missing,
// truncated or corrupt, labels out of range). Its message names the file and
// what is wrong, so a user can fix the input without reading fusor's code.
#pragma once

#include "fusor/core/error.hpp"

namespace fusor {

/// A data set cannot be read (a file missing, truncated or corrupt, labels out of range); the message
/// names the file and what is wrong.
struct data_error : error {
  using error::error;
};

}  // namespace fusor
