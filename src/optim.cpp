// src/optim.cpp — part of the fusor_runtime library (FUSOR_SEPARATE_COMPILATION,
// see fusor/config.hpp): the definitions of fusor/optim/'s non-template functions,
// compiled once here instead of in every program that includes the headers.
#if !defined(FUSOR_SEPARATE_COMPILATION)
#error "fusor_runtime is compiled with FUSOR_SEPARATE_COMPILATION (CMake's fusor::runtime defines it)"
#endif

#include "fusor/optim/impl/flat_state.ipp"
#include "fusor/optim/impl/nonfinite_note.ipp"

#include "fusor/optim/adamw.hpp"
#include "fusor/optim/pruning.hpp"
#include "fusor/optim/update_controller.hpp"

namespace fusor::optim {
FUSOR_ADAMW_HOST_INSTANCES();
FUSOR_CONTROLLER_HOST_INSTANCES();
FUSOR_PRUNING_HOST_INSTANCES();
}  // namespace fusor::optim
