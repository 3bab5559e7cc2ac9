// src/data.cpp — part of the fusor_runtime library (FUSOR_SEPARATE_COMPILATION,
// see fusor/config.hpp): the definitions of fusor/data/'s non-template functions
// and the host's loader, compiled once here instead of in every program that
// includes the headers.
#if !defined(FUSOR_SEPARATE_COMPILATION)
#error "fusor_runtime is compiled with FUSOR_SEPARATE_COMPILATION (CMake's fusor::runtime defines it)"
#endif


#include "fusor/data/impl/character_corpus.ipp"
#include "fusor/data/impl/epoch_engine.ipp"
#include "fusor/data/impl/fashion_mnist.ipp"
#include "fusor/data/impl/idx.ipp"
#include "fusor/data/impl/labelled_images.ipp"
#include "fusor/data/impl/permutation.ipp"
#include "fusor/data/loader.hpp"

namespace fusor::data {
template class loader<host_space>;
}  // namespace fusor::data
