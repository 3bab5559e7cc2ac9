// fusor/nn/parameters.hpp — where a network's parameters live: one contiguous
// buffer per element type for the values and one for the gradients (as llm.c),
// so an optimizer step or an all-reduce is one pass over one allocation.
//
// A layer declares its parameters (name, shape, how to initialise them); the
// network lays them out back to back in the group of the layer's element type,
// each starting on a 32-element boundary (16-byte aligned for vector loads and
// cuBLASLt). Padding elements are zero and their gradients stay zero, so an
// optimizer may sweep the whole buffer.
//
// Weight tying: a parameter whose spec says `tied_to = "0.weight"` is that
// parameter. It has no slot in the buffers (an optimizer, a gradient norm, a
// checkpoint and an all-reduce see the weight once); the layer reads the
// owner's values and writes its gradient into a buffer of its own, which the
// network adds into the owner's gradient after the owner's backward.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
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

/// Every parameter's slot in a group starts on a multiple of this many elements.
inline constexpr index_t parameter_alignment = 32;  // elements

namespace detail {
// "[2, 3]" (core/extents.hpp's extents_text).
inline std::string parameter_shape_text(const std::vector<index_t>& shape) {
  return fusor::detail::extents_text(shape.data(), shape.size());
}
}  // namespace detail

/// The extents of a flat (rank-1, dynamic) parameter buffer.
using flat_extents = dextents<index_t, 1>;
/// A contiguous rank-1 view of Element in Space: a parameter's values or gradients, or a whole group buffer.
template <class Element, class Space>
using flat_view = view<Element, flat_extents, row_major, Space>;

/// How a parameter starts out. uniform: U(-bound, bound) with bound =
/// gain / sqrt(fan_in) (PyTorch's default for Linear and Conv2d with gain 1);
/// constant: every element `value`.
struct initializer {
  /// The two ways to start: uniform (U(-bound, bound)) or constant (every element `value`).
  enum class kind { uniform, constant } how = kind::uniform;
  /// The uniform bound's numerator: bound = gain / sqrt(fan_in).
  double gain = 1.0;
  /// The uniform bound's fan-in: bound = gain / sqrt(fan_in).
  index_t fan_in = 1;
  /// Every element's value for a constant initializer.
  double value = 0.0;
  /// U(-gain / sqrt(fan_in), gain / sqrt(fan_in)).
  static initializer uniform_fan_in(index_t fan_in, double gain = 1.0) { return {kind::uniform, gain, fan_in, 0.0}; }
  /// Every element v.
  static initializer constant(double v) { return {kind::constant, 1.0, 1, v}; }
  /// \var how
  /// Which kind this initializer is (default uniform).
};

/// A parameter that is one of `ways` equal slices of a larger tensor along `axis`
/// (tensor parallelism). It is initialised as its slice of the full tensor, so a
/// sharded network from seed s holds exactly the slices of the unsharded one's.
struct sharding {
  int axis = -1;  ///< -1: not sharded
  /// The number of equal slices (1: not sharded).
  int ways = 1;
  /// Column parallelism of Parts interleaved parts (nn/sharding.hpp): the slice
  /// is [Parts, rows, ...] split along axis 1, the whole tensor [Parts * rows * ways, ...].
  int parts = 1;
};

/// One parameter as a layer declares it: name, shape, how to initialise it, and its sharding or tying.
struct parameter_spec {
  std::string name;               ///< "weight", "bias": the network prefixes the layer's index
  std::vector<index_t> shape;     ///< logical, row-major in memory (this rank's slice when sharded)
  /// How the parameter starts out.
  initializer init;
  /// Which slice of a larger tensor it is (default: not sharded).
  sharding shard = {};
  std::string tied_to = {};       ///< weight tying: the network name of the parameter this one is
  /// The number of elements, the product of shape.
  index_t size() const {
    index_t n = 1;
    for (index_t e : shape) n *= e;
    return n;
  }
};

/// One parameter's place in its group.
struct parameter_slot {
  std::string name;  ///< "0.weight"
  /// The parameter's logical shape.
  std::vector<index_t> shape;
  /// Where its first element lies in the group's buffers, in elements.
  index_t offset = 0;
  /// Its number of elements (padding excluded).
  index_t size = 0;
};

/// A parameter tied to another (its owner, in the same group): where its own
/// gradient lies in the group's tied-gradient buffer.
struct tied_slot {
  parameter_slot slot;  ///< offset into tied_gradients()
  std::string owner;    ///< the owner's name ("0.weight")
};

/// What a layer is handed: its parameters' values and gradients, in order of
/// its parameter_specs, as flat views into the group buffers.
template <class Element, class Space>
struct parameter_binding {
  /// The values, one view per parameter_spec.
  std::vector<flat_view<Element, Space>> values;
  /// The gradients, one view per parameter_spec.
  std::vector<flat_view<Element, Space>> gradients;
};

/// A shaped view over a flat parameter slice (static shape, checked against the slice).
/// Throws shape_error when the sizes differ.
template <class Precision, class Extents, class Space, class Element>
view<Precision, Extents, row_major, Space> shaped(const flat_view<Element, Space>& flat) {
  static_assert(std::is_same_v<storage_t<Precision>, Element>, "fusor: nn: a parameter view keeps its element type");
  const view<Precision, Extents, row_major, Space> v(flat.data(), typename view<Precision, Extents, row_major, Space>::mapping_type(Extents{}));
  if (v.size() != flat.size())
    throw shape_error("fusor::nn: a parameter of " + std::to_string(flat.size()) + " elements viewed as shape " +
                      shape_string(Extents{}));
  return v;
}

/// The values and gradients of every parameter with one element type.
template <class Element, class Space>
class parameter_group {
 public:
  /// The parameters' element type.
  using element_type = Element;
  parameter_group() = default;

  /// Reserves room for a parameter; returns its slot. Call before allocate().
  const parameter_slot& add(std::string name, std::vector<index_t> shape) {
    index_t size = 1;
    for (index_t e : shape) size *= e;
    slots_.push_back({std::move(name), std::move(shape), size_, size});
    size_ += (size + parameter_alignment - 1) / parameter_alignment * parameter_alignment;
    return slots_.back();
  }
  /// Reserves a gradient for a parameter tied to `owner` (added before, same size).
  /// Throws fusor::error when there is no such owner, shape_error when the shapes differ.
  const tied_slot& add_tied(std::string name, std::vector<index_t> shape, const std::string& owner) {
    const parameter_slot* o = find(owner);
    if (o == nullptr)
      throw error("fusor::nn: parameter " + name + " is tied to " + owner +
                  ", which is not a parameter of the same element type earlier in the network");
    index_t size = 1;
    for (index_t e : shape) size *= e;
    if (shape != o->shape)
      throw shape_error("fusor::nn: parameter " + name + " of shape " + shape_text(shape) + " is tied to " + owner +
                        " of shape " + shape_text(o->shape));
    tied_.push_back({{std::move(name), std::move(shape), tied_size_, size}, owner});
    tied_size_ += (size + parameter_alignment - 1) / parameter_alignment * parameter_alignment;
    return tied_.back();
  }
  /// The slot of the parameter called `name` ("0.weight"), or nullptr when there is none.
  const parameter_slot* find(const std::string& name) const {
    for (const parameter_slot& s : slots_)
      if (s.name == name) return &s;
    return nullptr;
  }

  /// Allocates both buffers, zeroed (padding included).
  void allocate(stream_t stream) {
    allocate_tied(stream);
    owned_values_ = tensor<Element, flat_extents, row_major, Space>(flat_extents(size_), stream);
    owned_gradients_ = tensor<Element, flat_extents, row_major, Space>(flat_extents(size_), stream);
    std::vector<Element> zeros(static_cast<std::size_t>(size_), Element(0.0f));
    copy(owned_values_.view(), view<Element, flat_extents>(zeros.data(), size_));
    copy(owned_gradients_.view(), view<Element, flat_extents>(zeros.data(), size_));
    values_ = owned_values_.view();
    gradients_ = owned_gradients_.view();
  }
  /// Uses `owner`'s buffers instead of allocating (same slots required): several
  /// networks over one set of parameters, e.g. a pipeline stage's micro-batches in
  /// flight. `owner` must outlive this group. Tied gradients stay this group's own
  /// (allocated on `stream`): each network writes them in its own backward.
  void share(const parameter_group& owner, stream_t stream) {
    if (owner.gradients_lent() || owner.values_lent())
      throw error("fusor::nn: parameters shared with a network whose parameters are lent bucket by bucket (ZeRO-2/3)");
    if (owner.size_ != size_ || owner.slots_.size() != slots_.size())
      throw error("fusor::nn: parameters shared between networks of different layers (" + std::to_string(size_) +
                  " and " + std::to_string(owner.size_) + " elements)");
    values_ = owner.values_;
    gradients_ = owner.gradients_;
    allocate_tied(stream);
  }

  /// ZeRO-2 and ZeRO-3 (parallel/data_parallel.hpp, shard_gradients and
  /// shard_parameters): the group stops holding the gradients (and the values)
  /// in buffers of its own. Before a run of layers runs, the trainer lends
  /// storage for their part of the layout (lend_gradients, lend_values) and
  /// rebinds those layers (network::rebind_layers); gradient(slot) and
  /// value(slot) are then that storage, empty where none was ever lent, and
  /// gradients() / values() (the whole buffers) are refused.
  void release_gradients() { release(gradients_, owned_gradients_, gradient_windows_, "gradients", "ZeRO-2"); }
  /// The same for the values (ZeRO-3): the group stops holding them in a buffer of its own.
  void release_values() { release(values_, owned_values_, value_windows_, "values", "ZeRO-3"); }
  /// Elements [begin, end) of the layout have their gradients at storage.data() onwards.
  /// Throws fusor::error before release_gradients() or for a range outside the layout or larger than storage.
  void lend_gradients(index_t begin, index_t end, flat_view<Element, Space> storage) {
    lend(gradient_windows_, begin, end, storage, "gradients");
  }
  /// Elements [begin, end) of the layout have their values at storage.data() onwards.
  /// Throws fusor::error before release_values() or for a range outside the layout or larger than storage.
  void lend_values(index_t begin, index_t end, flat_view<Element, Space> storage) {
    lend(value_windows_, begin, end, storage, "values");
  }
  /// Whether the gradients were released (ZeRO-2): they are then lent storage.
  bool gradients_lent() const { return gradient_windows_.has_value(); }
  /// Whether the values were released (ZeRO-3): they are then lent storage.
  bool values_lent() const { return value_windows_.has_value(); }

  /// The buffers' length in elements, padding included.
  index_t size() const { return size_; }
  /// Every parameter's slot, in the order added.
  const std::vector<parameter_slot>& slots() const { return slots_; }
  /// The whole values buffer; throws fusor::error once the values are lent (ZeRO-3).
  flat_view<Element, Space> values() const {
    if (values_lent())
      throw error("fusor::nn: the parameters are not held in one buffer: data parallelism with shard_parameters "
                  "(ZeRO-3) gathers them bucket by bucket as layers run");
    return values_;
  }
  /// The whole gradients buffer; throws fusor::error once the gradients are lent (ZeRO-2).
  flat_view<Element, Space> gradients() const {
    if (gradients_lent())
      throw error("fusor::nn: the gradients are not held in one buffer: data parallelism with shard_gradients (ZeRO-2) "
                  "lends them bucket by bucket during backward; read a parameter's with gradient(slot)");
    return gradients_;
  }
  /// One parameter's values (empty when they are lent and no storage holding them was lent).
  flat_view<Element, Space> value(const parameter_slot& s) const { return find(values_, value_windows_, s); }
  /// One parameter's gradient (empty when gradients are lent and no storage holding it was lent).
  flat_view<Element, Space> gradient(const parameter_slot& s) const { return find(gradients_, gradient_windows_, s); }
  /// Tied parameters: their own gradients, which the network adds into their owners'.
  const std::vector<tied_slot>& tied_slots() const { return tied_; }
  /// One tied parameter's own gradient, in the group's tied-gradient buffer.
  flat_view<Element, Space> tied_gradient(const tied_slot& t) const { return {tied_gradients_.data() + t.slot.offset, t.slot.size}; }

 private:
  static std::string shape_text(const std::vector<index_t>& shape) { return detail::parameter_shape_text(shape); }
  void allocate_tied(stream_t stream) {
    if (tied_size_ == 0) return;
    tied_gradients_ = tensor<Element, flat_extents, row_major, Space>(flat_extents(tied_size_), stream);
    std::vector<Element> zeros(static_cast<std::size_t>(tied_size_), Element(0.0f));
    copy(tied_gradients_.view(), view<Element, flat_extents>(zeros.data(), tied_size_));
  }

  std::vector<parameter_slot> slots_;
  std::vector<tied_slot> tied_;
  index_t size_ = 0, tied_size_ = 0;
  tensor<Element, flat_extents, row_major, Space> owned_values_;
  tensor<Element, flat_extents, row_major, Space> owned_gradients_;
  tensor<Element, flat_extents, row_major, Space> tied_gradients_;
  flat_view<Element, Space> values_{};
  flat_view<Element, Space> gradients_{};
  // Lent storage (ZeRO-2, ZeRO-3): where each lent range of the layout lies.
  struct window {
    index_t begin, end;
    Element* data;
  };
  using windows = std::optional<std::vector<window>>;  // empty optional: not lent, the group's own buffer
  windows gradient_windows_, value_windows_;

  void release(flat_view<Element, Space>& whole, tensor<Element, flat_extents, row_major, Space>& owned, windows& lent,
               const char* what, const char* stage) {
    if (size_ > 0 && whole.data() != owned.data())
      throw error(std::string("fusor::nn: these parameters share another network's ") + what +
                  " (a pipeline stage's micro-batches); they cannot be lent bucket by bucket (" + stage + ")");
    owned = {};
    whole = {};
    lent.emplace();
  }
  void lend(windows& lent, index_t begin, index_t end, flat_view<Element, Space> storage, const char* what) {
    if (!lent || begin < 0 || end > size_ || begin > end || storage.size() < end - begin)
      throw error(std::string("fusor::nn: ") + what + " [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") lent in " + std::to_string(storage.size()) + " elements" +
                  (lent ? " (the group has " + std::to_string(size_) + ")" : std::string(" before they were released")));
    std::erase_if(*lent, [&](const window& w) { return w.begin < end && begin < w.end; });
    lent->push_back({begin, end, storage.data()});
  }
  static flat_view<Element, Space> find(const flat_view<Element, Space>& whole, const windows& lent, const parameter_slot& s) {
    if (!lent) return {whole.data() + s.offset, s.size};
    for (const window& w : *lent)
      if (w.begin <= s.offset && s.offset + s.size <= w.end) return {w.data + (s.offset - w.begin), s.size};
    return {};
  }
};

/// Fills host memory with a parameter's initial values, from (seed, element index)
/// alone, so the same seed gives the same network on any machine.
template <class Element>
void initialize_parameter(Element* data, index_t size, const initializer& init, std::uint64_t seed) {
  const double bound = init.gain / std::sqrt(static_cast<double>(init.fan_in));
  for (index_t i = 0; i < size; ++i) {
    double v = init.value;
    if (init.how == initializer::kind::uniform)
      v = (2.0 * random_uniform(seed, static_cast<std::uint64_t>(i)) - 1.0) * bound;
    data[i] = convert<Element>(v);
  }
}

/// Where a parameter's elements lie in the whole, unsplit tensor (as the
/// unsplit network holds it, and as a checkpoint stores it): boxes, each
/// contiguous in this rank's memory. One box for an unsplit parameter or a
/// slice along one axis; one per part for column parallelism with parts.
struct parameter_segment {
  index_t offset = 0;                 ///< where the box starts among the parameter's own elements
  /// Where the box starts in the whole tensor, one index per axis.
  std::vector<index_t> begin, shape;  ///< the box in the whole tensor
  /// The number of elements in the box, the product of shape.
  index_t elements() const {
    index_t n = 1;
    for (index_t e : shape) n *= e;
    return n;
  }
};
/// A parameter's place in the whole, unsplit tensor: its shape and the boxes this rank holds (place_parameter).
struct parameter_placement {
  /// The shape of the whole, unsplit tensor.
  std::vector<index_t> whole_shape;
  /// The boxes of the whole tensor this rank holds, in the order of its memory.
  std::vector<parameter_segment> segments;
  bool split = false;  ///< false: every rank of a tensor group holds the whole tensor
};

/// Where a parameter lies in the whole, unsplit tensor; throws fusor::error for a sharding the shape cannot have.
/// `shape`: this rank's slice as the layer declares it; `shard_index`: its slice's number.
FUSOR_DECL parameter_placement place_parameter(const std::vector<index_t>& shape, const sharding& shard, int shard_index);

/// The same for a sharded parameter: slice `shard_index` of the full tensor, each
/// element drawn from its index in the full tensor.
template <class Element>
void initialize_parameter(Element* data, const parameter_spec& spec, std::uint64_t seed, int shard_index) {
  const sharding& shard = spec.shard;
  if (shard.axis < 0 || shard.ways == 1) return initialize_parameter(data, spec.size(), spec.init, seed);
  if (shard.axis >= static_cast<int>(spec.shape.size()) || shard_index < 0 || shard_index >= shard.ways)
    throw error("fusor::nn: parameter " + spec.name + " is sharded along axis " + std::to_string(shard.axis) +
                " of a rank-" + std::to_string(spec.shape.size()) + " shape, slice " + std::to_string(shard_index) +
                " of " + std::to_string(shard.ways));
  index_t inner = 1;
  for (std::size_t a = static_cast<std::size_t>(shard.axis) + 1; a < spec.shape.size(); ++a) inner *= spec.shape[a];
  const index_t local_axis = spec.shape[static_cast<std::size_t>(shard.axis)];
  const index_t full_axis = local_axis * shard.ways;
  const double bound = spec.init.gain / std::sqrt(static_cast<double>(spec.init.fan_in));
  for (index_t i = 0, size = spec.size(); i < size; ++i) {
    const index_t outer = i / (local_axis * inner), along = i / inner % local_axis, within = i % inner;
    const index_t full_index = (outer * full_axis + shard_index * local_axis + along) * inner + within;
    double v = spec.init.value;
    if (spec.init.how == initializer::kind::uniform)
      v = (2.0 * random_uniform(seed, static_cast<std::uint64_t>(full_index)) - 1.0) * bound;
    data[i] = convert<Element>(v);
  }
}

#if defined(FUSOR_SEPARATE_COMPILATION)
// fp32 and bf16 parameters are initialised by fusor_runtime's copies (src/nn.cpp).
extern template void initialize_parameter<float>(float*, index_t, const initializer&, std::uint64_t);
extern template void initialize_parameter<float>(float*, const parameter_spec&, std::uint64_t, int);
extern template void initialize_parameter<__nv_bfloat16>(__nv_bfloat16*, index_t, const initializer&, std::uint64_t);
extern template void initialize_parameter<__nv_bfloat16>(__nv_bfloat16*, const parameter_spec&, std::uint64_t, int);
#endif

}  // namespace fusor::nn

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/nn/impl/parameters.ipp"
#endif
