// fusor/optim/checkpoint_refusals.hpp — refusals that a training state
// (optim/training_checkpoint.hpp) and a distributed checkpoint
// (parallel/distributed_checkpoint.hpp) share, written once so that both say
// the same: metadata keys the caller may not use, and a network of another
// seed whose dropout would draw other masks.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>

#include "fusor/core/error.hpp"
#include "fusor/io/checkpoint.hpp"

namespace fusor::optim::detail {

// Refuses the caller's metadata keys that start with one of `reserved` (fusor's own: the metadata a load returns
// has none).
inline void check_caller_metadata(const std::map<std::string, std::string>& metadata, const char* who,
                                  std::initializer_list<std::string_view> reserved = {"fusor."}) {
  for (const auto& [key, value] : metadata)
    for (const std::string_view prefix : reserved)
      if (key.starts_with(prefix)) {
        std::string prefixes;
        for (const std::string_view p : reserved) prefixes += (prefixes.empty() ? "'" : " or '") + std::string(p) + "'";
        throw error(std::string(who) + ": metadata keys starting " + prefixes + " are reserved ('" + key + "')");
      }
}
// The refusal of a checkpoint saved by a network of `saved` seed into one of seed `mine`, whose layers draw
// random numbers (dropout): resumed training would draw other masks. `source` starts the message.
inline io::checkpoint_error seed_mismatch(const std::string& source, std::uint64_t saved, std::uint64_t mine) {
  return io::checkpoint_error(source + " was saved by a network of seed " + std::to_string(saved) +
                              ", this one has seed " + std::to_string(mine) +
                              ": its dropout would draw other masks; construct the network with {.seed = " +
                              std::to_string(saved) + "}");
}

}  // namespace fusor::optim::detail
