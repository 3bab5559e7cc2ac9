// fusor/optim/unread_tensors.hpp — what a load does with tensors of a
// checkpoint that nothing reads: a larger network's extra layers, another
// optimizer's state, a model's buffers. By default it refuses the file, as
// PyTorch's load_state_dict(strict=True) does: such tensors mean the file is
// not the one the caller thinks it is, and loading the rest would train
// something else without a word.
//
//   optim::load_parameters("gpt2.safetensors", net);                                // refuses extra tensors
//   optim::load_parameters("gpt2.safetensors", net, optim::unread_tensors::ignore);  // loads what net has
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fusor/io/checkpoint.hpp"

namespace fusor::optim {

/// What a load does with tensors of the checkpoint that it does not read.
enum class unread_tensors {
  refuse,  ///< throws io::checkpoint_error naming them, before anything is copied (PyTorch's strict=True)
  ignore,  ///< passes over them (strict=False): to load a subset, or a file with extra buffers
};

namespace detail {
// Throws io::checkpoint_error when `policy` refuses and `unread` is not empty: `source` (the file), how many,
// the first few names, and what they suggest. `unread_by`: "this network does not read", say.
inline void refuse_unread(const std::vector<std::string>& unread, unread_tensors policy, const std::string& source,
                          const std::string& unread_by) {
  if (policy == unread_tensors::ignore || unread.empty()) return;
  constexpr std::size_t shown = 8;
  std::string names;
  for (std::size_t i = 0; i < unread.size() && i < shown; ++i) names += (i ? ", '" : "'") + unread[i] + "'";
  if (unread.size() > shown) names += " and " + std::to_string(unread.size() - shown) + " more";
  throw io::checkpoint_error(source + " holds " + std::to_string(unread.size()) + " tensor" +
                             (unread.size() == 1 ? "" : "s") + " that " + unread_by + ": " + names +
                             " (saved by another network or optimizer?); nothing was loaded. Pass "
                             "fusor::optim::unread_tensors::ignore to load the rest anyway");
}
}  // namespace detail

}  // namespace fusor::optim
