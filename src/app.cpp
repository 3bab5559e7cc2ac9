// src/app.cpp — part of the fusor_runtime library (FUSOR_SEPARATE_COMPILATION,
// see fusor/config.hpp): the definitions of fusor/app/'s non-template functions,
// compiled once here instead of in every program that includes the headers.
#if !defined(FUSOR_SEPARATE_COMPILATION)
#error "fusor_runtime is compiled with FUSOR_SEPARATE_COMPILATION (CMake's fusor::runtime defines it)"
#endif


#include "fusor/app/impl/command_line.ipp"
#include "fusor/app/impl/fit.ipp"

namespace fusor::app {
FUSOR_APP_FOR_NUMBER_TYPES()
}  // namespace fusor::app
