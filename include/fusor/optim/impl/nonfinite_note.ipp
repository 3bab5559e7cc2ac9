// fusor/optim/impl/nonfinite_note.ipp — definitions of fusor/optim/nonfinite_note.hpp's non-template functions
// (see FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/optim/nonfinite_note.hpp"

namespace fusor::optim::detail {

FUSOR_DECL void note_nonfinite_slots(const std::vector<nn::parameter_slot>& slots, const std::vector<char>& nonfinite,
                                     std::string& first, long& first_layer) {
  for (std::size_t i = 0; i != slots.size(); ++i) {
    const long layer = std::stol(slots[i].name.substr(0, slots[i].name.find('.')));
    if (layer < first_layer || !nonfinite[i]) continue;
    if (layer > first_layer) first.clear();
    first_layer = layer;
    first += (first.empty() ? "" : ", ") + slots[i].name;
  }
}

FUSOR_DECL std::string nonfinite_text(const std::string& who, std::int64_t step, long first_layer,
                                      const std::string& first, bool one_process) {
  const std::string where =
      first_layer >= 0 ? "first in layer " + std::to_string(first_layer) + " (" + first +
                             ") in backward's order, from the last layer"
      : one_process    ? "no gradient is Inf or NaN now (a later step's gradients have replaced that step's)"
                       : "no gradient this rank holds is Inf or NaN now (another rank's or stage's were, or a later "
                         "step's gradients have replaced that step's)";
  return who + ": step " + std::to_string(step) + " had Inf or NaN gradients; " + where +
         ". Training stopped: the parameters are those after step " + std::to_string(step - 1) +
         ". Check the inputs, lower the learning rate or clip (clip.max_norm), or set "
         "trainer_options::on_nonfinite = nonfinite_gradients::skip to skip such steps";
}

}  // namespace fusor::optim::detail
