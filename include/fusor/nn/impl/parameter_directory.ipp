// fusor/nn/impl/parameter_directory.ipp — definitions of fusor/nn/parameter_directory.hpp's functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/nn/parameter_directory.hpp"

#include <utility>

#include "fusor/core/error.hpp"

namespace fusor::nn::detail {

FUSOR_DECL std::size_t parameter_directory::add_layer(std::size_t layer, std::vector<parameter_spec> specs) {
  const std::size_t first_id = specs_.size();
  for (parameter_spec& spec : specs) {
    std::string name = std::to_string(layer) + "." + spec.name;
    if (!spec.tied_to.empty()) check_tie(name, spec, layer);
    names_.push_back(std::move(name));
    specs_.push_back(std::move(spec));
    layers_.push_back(layer);
  }
  return first_id;
}

FUSOR_DECL std::size_t parameter_directory::id(const std::string& name) const {
  for (std::size_t i = 0; i != names_.size(); ++i)
    if (names_[i] == name) return i;
  throw error("fusor::nn::network: no parameter named " + name);
}

FUSOR_DECL index_t parameter_directory::parameter_count() const {
  index_t n = 0;
  for (std::size_t i = 0; i != specs_.size(); ++i)
    if (holds(layers_[i]) && specs_[i].tied_to.empty()) n += specs_[i].size();  // a tied weight once
  return n;
}

// A tied parameter's owner comes earlier (its backward runs after the tied
// layer's, and then adds the tied gradient in), in the same network (not
// another pipeline stage), and neither is sharded.
FUSOR_DECL void parameter_directory::check_tie(const std::string& name, const parameter_spec& spec,
                                               std::size_t layer) const {
  std::size_t owner = 0;
  try {
    owner = id(spec.tied_to);
  } catch (const error&) {
    throw error("fusor::nn::network: parameter " + name + " is tied to " + spec.tied_to +
                ", which is not a parameter of a layer before it");
  }
  if (!specs_[owner].tied_to.empty())
    throw error("fusor::nn::network: parameter " + name + " is tied to " + spec.tied_to + ", itself tied to " +
                specs_[owner].tied_to + "; tie both to " + specs_[owner].tied_to);
  if (holds(layer) != holds(layers_[owner]))
    throw error("fusor::nn::network: parameter " + name + " is tied to " + spec.tied_to +
                " in another pipeline stage; tied layers must be in the same stage");
  if (spec.shard.ways > 1 || specs_[owner].shard.ways > 1)
    throw error("fusor::nn::network: parameter " + name + " is tied to " + spec.tied_to +
                "; tied parameters cannot be sharded (tensor parallelism)");
}

}  // namespace fusor::nn::detail
