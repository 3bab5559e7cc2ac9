// fusor/nn/parameter_directory.hpp — every parameter spec of a network, by
// name, with the checks of weight ties.
//
// nn::network asks each layer for its parameter specs (nn/parameters.hpp) and
// files them here in layer order: a spec's id (its place in that order) seeds
// its initial values, so a layer range draws what the whole network would.
// Not a template: what it does is the same for every network, so it is
// compiled once (fusor::runtime) rather than for each network type.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/nn/parameters.hpp"

namespace fusor::nn::detail {

/// A network's parameter specs in layer order, each with its full name ("<layer>.<spec name>") and its layer.
class parameter_directory {
 public:
  /// The layers [first, last) are the network's own (a pipeline stage's); the others' specs are filed too.
  parameter_directory(std::size_t first, std::size_t last) : first_(first), last_(last) {}

  /// Whether `layer` is one of the network's own.
  bool holds(std::size_t layer) const { return layer >= first_ && layer < last_; }
  /// Files layer `layer`'s specs and returns the id of the first. Throws fusor::error for a tie to no earlier
  /// parameter, to a tied one, across the layer range's edge, or of a sharded parameter.
  std::size_t add_layer(std::size_t layer, std::vector<parameter_spec> specs);

  /// The number of specs filed.
  std::size_t size() const { return specs_.size(); }
  /// Spec `id`, as its layer declared it.
  const parameter_spec& spec(std::size_t id) const { return specs_[id]; }
  /// Spec `id`'s full name: "<layer>.<spec name>".
  const std::string& name(std::size_t id) const { return names_[id]; }
  /// Spec `id`'s layer.
  std::size_t layer(std::size_t id) const { return layers_[id]; }
  /// The id of the parameter named `name`; throws fusor::error when there is none.
  std::size_t id(const std::string& name) const;
  /// The elements of the parameters of the network's own layers; a tied weight counts once.
  index_t parameter_count() const;

 private:
  void check_tie(const std::string& name, const parameter_spec& spec, std::size_t layer) const;

  std::size_t first_, last_;
  std::vector<parameter_spec> specs_;
  std::vector<std::string> names_;
  std::vector<std::size_t> layers_;
};

}  // namespace fusor::nn::detail

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/nn/impl/parameter_directory.ipp"
#endif
