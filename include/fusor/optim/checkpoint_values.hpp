// fusor/optim/checkpoint_values.hpp — the values a training checkpoint may
// hold: each state within the domain its owner declares (state_domain.hpp),
// parameters finite. optim::load_training_state and
// parallel::load_distributed check every tensor they would read before they
// copy any, so a damaged file is refused, naming the tensor, the element and
// the value, and the trainer stays as it was. (Loaded, such values make the
// next step's parameters NaN and the error would blame the gradients.)
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fusor/io/safetensors.hpp"
#include "fusor/optim/state_domain.hpp"

namespace fusor::optim::detail {

inline std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

// Whether `v` lies in `domain`; `steps_taken` bounds a step count.
inline bool within(state_domain domain, double v, std::uint64_t steps_taken) {
  switch (domain) {
    case state_domain::finite: return std::isfinite(v);
    case state_domain::non_negative: return std::isfinite(v) && v >= 0;
    case state_domain::positive: return std::isfinite(v) && v > 0;
    case state_domain::step_count: return v >= 0 && v <= double(steps_taken);
    case state_domain::zero_or_one: return v == 0 || v == 1;
  }
  return false;
}

// Throws io::checkpoint_error at the first element of `record` outside `domain`. `source` starts the message
// ("fusor: checkpoint 'run.safetensors': tensor '0.weight'"); `steps_key` names the metadata that holds
// `steps_taken`, for a step count's message.
inline void check_values(const io::tensor_record& record, state_domain domain, std::uint64_t steps_taken,
                         const std::string& source, const char* steps_key) {
  const index_t n = record.element_count();
  for (index_t i = 0; i < n; ++i) {
    const double v = record.value(i);
    if (within(domain, v, steps_taken)) continue;
    const std::string steps_note = domain == state_domain::step_count
                                       ? " (" + std::to_string(steps_taken) + ", metadata " + steps_key + ")"
                                       : std::string();
    throw io::checkpoint_error(source + (n == 1 ? std::string() : " element " + std::to_string(i)) + " is " +
                               number_text(v) + ", where its values are " + describe(domain) + steps_note +
                               " (the file is damaged, or not a training state saved by fusor); nothing was loaded");
  }
}

}  // namespace fusor::optim::detail
