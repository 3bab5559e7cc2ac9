// fusor/optim/initialization_check.hpp — a trainer's step refuses to run before
// initialize() where that would lose the parameters.
//
// The optimizer of 16-bit parameters updates an fp32 master copy of them and
// writes it back each step; initialize(ex) fills that copy from the network.
// Without it the first step starts from zeroed master weights: the network's
// parameters are replaced by about zero, silently (the loss jumps to ln(classes)).
// A loaded training state fills the copy too (set_steps_taken marks it).
// Parameters in fp32 have no copy: their trainers step without initialize().
#pragma once

#include <string>
#include <type_traits>

#include "fusor/core/error.hpp"

namespace fusor::optim::detail {

class initialization_check {
 public:
  // initialize() ran, or a training state was loaded.
  void mark() { done_ = true; }
  // Throws fusor::error naming `trainer` when `master_weights` and neither came first.
  void require(bool master_weights, const char* trainer) const {
    if (done_ || !master_weights) return;
    throw error(std::string(trainer) + ": step() before initialize(ex): the fp32 master weights of the 16-bit "
                "parameters are not set, so the step would replace the parameters by about zero; call "
                "initialize(ex) once the trainer is made (and again after loading parameters alone)");
  }

 private:
  bool done_ = false;
};

// Whether any optimizer that `for_each_optimizer` visits keeps master weights.
template <class Trainer>
bool keeps_master_weights(Trainer& trainer) {
  bool any = false;
  trainer.for_each_optimizer([&](const auto&, const auto& optimizer, const auto&...) {
    any = any || std::remove_cvref_t<decltype(optimizer)>::has_master_weights;
  });
  return any;
}

}  // namespace fusor::optim::detail
