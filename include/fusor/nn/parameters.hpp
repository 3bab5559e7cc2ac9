// fusor/nn/parameters.hpp — where a network's parameters live: one contiguous
// buffer per element type for the values and one for the gradients (as llm.c),
// so an optimizer step or an all-reduce is one pass over one allocation.
//
// A layer declares its parameters (name, shape, how to initialise them); the
// network lays them out back to back in the group of the layer's element type,
// each starting on a 32-element boundary (16-byte aligned for vector loads and
// cuBLASLt). Padding elements are zero and their gradients stay zero, so an
// optimizer may sweep the whole buffer.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/core/view.hpp"
#include "fusor/nn/random.hpp"

namespace fusor::nn {

inline constexpr index_t parameter_alignment = 32;  // elements

using flat_extents = dextents<index_t, 1>;
template <class Element, class Space>
using flat_view = view<Element, flat_extents, row_major, Space>;

// How a parameter starts out. uniform: U(-bound, bound) with bound =
// gain / sqrt(fan_in) (PyTorch's default for Linear and Conv2d with gain 1);
// constant: every element `value`.
struct initializer {
  enum class kind { uniform, constant } how = kind::uniform;
  double gain = 1.0;
  index_t fan_in = 1;
  double value = 0.0;
  static initializer uniform_fan_in(index_t fan_in, double gain = 1.0) { return {kind::uniform, gain, fan_in, 0.0}; }
  static initializer constant(double v) { return {kind::constant, 1.0, 1, v}; }
};

struct parameter_spec {
  std::string name;               // "weight", "bias": the network prefixes the layer's index
  std::vector<index_t> shape;     // logical, row-major in memory
  initializer init;
  index_t size() const {
    index_t n = 1;
    for (index_t e : shape) n *= e;
    return n;
  }
};

// One parameter's place in its group.
struct parameter_slot {
  std::string name;  // "0.weight"
  std::vector<index_t> shape;
  index_t offset = 0;
  index_t size = 0;
};

// What a layer is handed: its parameters' values and gradients, in order of
// its parameter_specs, as flat views into the group buffers.
template <class Element, class Space>
struct parameter_binding {
  std::vector<flat_view<Element, Space>> values;
  std::vector<flat_view<Element, Space>> gradients;
};

// A shaped view over a flat parameter slice (static shape, checked against the slice).
template <class Precision, class Extents, class Space, class Element>
view<Precision, Extents, row_major, Space> shaped(const flat_view<Element, Space>& flat) {
  static_assert(std::is_same_v<storage_t<Precision>, Element>, "fusor::nn: a parameter view keeps its element type");
  const view<Precision, Extents, row_major, Space> v(flat.data(), typename view<Precision, Extents, row_major, Space>::mapping_type(Extents{}));
  if (v.size() != flat.size())
    throw shape_error("fusor::nn: a parameter of " + std::to_string(flat.size()) + " elements viewed as shape " +
                      shape_string(Extents{}));
  return v;
}

// The values and gradients of every parameter with one element type.
template <class Element, class Space>
class parameter_group {
 public:
  using element_type = Element;
  parameter_group() = default;

  // Reserves room for a parameter; returns its slot. Call before allocate().
  const parameter_slot& add(std::string name, std::vector<index_t> shape) {
    index_t size = 1;
    for (index_t e : shape) size *= e;
    slots_.push_back({std::move(name), std::move(shape), size_, size});
    size_ += (size + parameter_alignment - 1) / parameter_alignment * parameter_alignment;
    return slots_.back();
  }
  // Allocates both buffers, zeroed (padding included).
  void allocate(stream_t stream) {
    values_ = tensor<Element, flat_extents, row_major, Space>(flat_extents(size_), stream);
    gradients_ = tensor<Element, flat_extents, row_major, Space>(flat_extents(size_), stream);
    std::vector<Element> zeros(static_cast<std::size_t>(size_), Element(0.0f));
    copy(values_.view(), view<Element, flat_extents>(zeros.data(), size_));
    copy(gradients_.view(), view<Element, flat_extents>(zeros.data(), size_));
  }

  index_t size() const { return size_; }
  const std::vector<parameter_slot>& slots() const { return slots_; }
  flat_view<Element, Space> values() const { return values_.view(); }
  flat_view<Element, Space> gradients() const { return gradients_.view(); }
  flat_view<Element, Space> value(const parameter_slot& s) const { return {values_.data() + s.offset, s.size}; }
  flat_view<Element, Space> gradient(const parameter_slot& s) const { return {gradients_.data() + s.offset, s.size}; }

 private:
  std::vector<parameter_slot> slots_;
  index_t size_ = 0;
  tensor<Element, flat_extents, row_major, Space> values_;
  tensor<Element, flat_extents, row_major, Space> gradients_;
};

// Fills host memory with a parameter's initial values, from (seed, element index)
// alone, so the same seed gives the same network on any machine.
template <class Element>
void initialize_parameter(Element* data, index_t size, const initializer& init, std::uint64_t seed) {
  for (index_t i = 0; i < size; ++i) {
    double v = init.value;
    if (init.how == initializer::kind::uniform) {
      const double bound = init.gain / std::sqrt(static_cast<double>(init.fan_in));
      v = (2.0 * random_uniform(seed, static_cast<std::uint64_t>(i)) - 1.0) * bound;
    }
    data[i] = convert<Element>(v);
  }
}

}  // namespace fusor::nn
