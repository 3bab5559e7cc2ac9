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
#include <utility>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
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

/// Files layer `layer`'s specs in `directory` and, for a layer the network holds, adds them to `group`, the
/// group of their element type. A function of the element type, not of the network: compiled once per element
/// type and space (fusor::runtime and fusor::cuda_runtime hold fp32's and bf16's).
template <class Element, class Space>
void add_layer_parameters(parameter_directory& directory, parameter_group<Element, Space>& group, std::size_t layer,
                          std::vector<parameter_spec> specs) {
  const std::size_t first_id = directory.add_layer(layer, std::move(specs));
  if (!directory.holds(layer)) return;
  for (std::size_t id = first_id; id != directory.size(); ++id) {
    const parameter_spec& spec = directory.spec(id);
    if (spec.tied_to.empty()) group.add(directory.name(id), spec.shape);
    else group.add_tied(directory.name(id), spec.shape, spec.tied_to);
  }
}

/// The tie named `name` in `group`; throws fusor::error when there is none.
template <class Element, class Space>
const tied_slot& find_tied(const parameter_group<Element, Space>& group, const std::string& name) {
  for (const tied_slot& t : group.tied_slots())
    if (t.slot.name == name) return t;
  throw error("fusor::nn::network: no tied parameter named " + name);
}

/// Layer `layer`'s parameter views, in the order of its specs (a tied parameter reads its owner's values and
/// writes a gradient of its own).
template <class Element, class Space>
parameter_binding<Element, Space> layer_binding(const parameter_directory& directory,
                                                const parameter_group<Element, Space>& group, std::size_t layer) {
  parameter_binding<Element, Space> binding;
  for (std::size_t id = 0; id != directory.size(); ++id) {
    if (directory.layer(id) != layer) continue;
    const std::string& name = directory.name(id);
    if (directory.spec(id).tied_to.empty()) {
      const parameter_slot& slot = *group.find(name);
      binding.values.push_back(group.value(slot));
      binding.gradients.push_back(group.gradient(slot));
    } else {
      const tied_slot& tied = find_tied(group, name);
      binding.values.push_back(group.value(*group.find(tied.owner)));
      binding.gradients.push_back(group.tied_gradient(tied));
    }
  }
  return binding;
}

// The instances of fp32 and bf16 groups. PREFIX is `extern` for the declarations below.
#define FUSOR_PARAMETER_GROUP_INSTANCES(PREFIX, E, S)                                                              \
  PREFIX template void add_layer_parameters<E, S>(parameter_directory&, parameter_group<E, S>&, std::size_t,       \
                                                  std::vector<parameter_spec>);                                    \
  PREFIX template const tied_slot& find_tied<E, S>(const parameter_group<E, S>&, const std::string&);              \
  PREFIX template parameter_binding<E, S> layer_binding<E, S>(const parameter_directory&,                          \
                                                              const parameter_group<E, S>&, std::size_t)
#define FUSOR_PARAMETER_GROUP_HOST_INSTANCES(PREFIX) FUSOR_PARAMETER_GROUP_INSTANCES(PREFIX, float, host_space)
#define FUSOR_PARAMETER_GROUP_CUDA_INSTANCES(PREFIX)            \
  FUSOR_PARAMETER_GROUP_INSTANCES(PREFIX, float, device_space); \
  FUSOR_PARAMETER_GROUP_INSTANCES(PREFIX, __nv_bfloat16, device_space)
#if defined(FUSOR_SEPARATE_COMPILATION)
FUSOR_PARAMETER_GROUP_HOST_INSTANCES(extern);
#endif
#if FUSOR_CUDA_PRECOMPILED
FUSOR_PARAMETER_GROUP_CUDA_INSTANCES(extern);
#endif

}  // namespace fusor::nn::detail

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/nn/impl/parameter_directory.ipp"
#endif
