// fusor/optim/nonfinite_note.hpp — how the host learns, without waiting for
// the GPU, that a controller stopped training on Inf/NaN gradients
// (step_values::stopped_at_step, update_controller.hpp), and the error that
// says so (nonfinite_error, naming the step and the first layer).
//
// On the host the note is the step scalars themselves, read as they are. On a
// GPU each step ends with a stream-ordered copy of the note into pinned host
// memory (a plain memcpy node, so a captured step records it too), and the host
// reads that copy: seen() the note of the last step the GPU finished, never a
// value the host had to wait for (optim::trainer, one process); or
// seen_in_step_order() that of the step two before, once the GPU has finished
// it (data_parallel, pipeline: every rank must stop at the same step, or the
// others would wait in the next collective).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/nn/parameters.hpp"
#include "fusor/optim/step_scalars.hpp"

namespace fusor::optim {

/// A step had Inf or NaN gradients and training stopped (nonfinite_gradients::stop).
struct nonfinite_error : error {
  /// `what`: the message (nonfinite_message makes it); `step`: the 1-based step that had them.
  nonfinite_error(const std::string& what, std::int64_t step) : error(what), step(step) {}
  std::int64_t step;  ///< 1-based: the step that had them
};

namespace detail {
// Of one group's slots, those whose gradients hold Inf/NaN (`nonfinite`, one flag a slot) in the highest layer so
// far: `first` lists their names, `first_layer` is that layer (-1: none yet).
FUSOR_DECL void note_nonfinite_slots(const std::vector<nn::parameter_slot>& slots, const std::vector<char>& nonfinite,
                                     std::string& first, long& first_layer);
// The message of nonfinite_message, given what note_nonfinite_slots found.
FUSOR_DECL std::string nonfinite_text(const std::string& who, std::int64_t step, long first_layer,
                                      const std::string& first, bool one_process);
}  // namespace detail

namespace detail {
// For a stopped step's message: how many of `labels` (class indices, of any space) are neither a class in
// [0, classes) nor `ignore_index`, the first of them, and what they do; empty when none is (or they cannot be
// read: the message must not fail).
template <class Labels>
std::string labels_outside_note(const Labels& labels, index_t classes, std::int32_t ignore_index) {
  try {
    const auto& v = as_view(labels);
    using V = std::remove_cvref_t<decltype(v)>;
    using element = typename V::element_type;
    tensor<element, dextents<index_t, V::rank>, typename V::layout_type, host_space> host(
        dextents<index_t, V::rank>(v.extents()));
    copy(host.view(), v);
    index_t outside = 0, first_at = 0;
    long long first = 0;
    for (index_t i = 0; i < host.size(); ++i) {
      const long long label = host.data()[i];
      if (label == ignore_index || (label >= 0 && label < classes)) continue;
      if (outside++ == 0) first_at = i, first = label;
    }
    if (outside == 0) return {};
    return ". Of the labels just given, " + std::to_string(outside) + " of " + std::to_string(host.size()) +
           " are outside the classes [0, " + std::to_string(classes) + ") and not the ignore index (" +
           std::to_string(ignore_index) + "), which makes the loss NaN: the first is " + std::to_string(first) +
           ", element " + std::to_string(first_at) + " in memory order";
  } catch (const std::exception&) {
    return {};
  }
}

// check() (a trainer's check_not_stopped), its nonfinite_error's message extended by labels_outside_note for the
// labels just given and `logits` ([rows, classes] or [batch, ..., classes]): labels outside the classes make
// cross-entropy NaN, the likeliest cause of a stop, so the message names them.
template <class Check, class Labels, class Logits>
void check_naming_labels(Check&& check, const Labels& labels, const Logits& logits, std::int32_t ignore_index) {
  try {
    check();
  } catch (const nonfinite_error& e) {
    const index_t classes = index_t(logits.extent(std::remove_cvref_t<Logits>::rank - 1));
    throw nonfinite_error(e.what() + labels_outside_note(labels, classes, ignore_index), e.step);
  }
}
}  // namespace detail

/// The error's text: the step, and where this rank's gradients first hold
/// Inf/NaN in backward's order (the last layer first): the parameter names of
/// the highest such layer. Read when the error is raised, from the latest
/// step's gradients (gradients lent to a data-parallel slab are not looked at).
/// `one_process`: no other rank or stage could have held them.
template <class Network>
std::string nonfinite_message(const std::string& who, std::int64_t step, Network& network, bool one_process) {
  std::string first;
  long first_layer = -1;
  network.for_each_group([&](auto& group) {
    using element = typename std::remove_cvref_t<decltype(group)>::element_type;
    if (group.size() == 0 || group.gradients_lent()) return;
    std::vector<element> host(std::size_t(group.size()));
    copy(view<element, dextents<index_t, 1>, row_major, host_space>(host.data(), group.size()), group.gradients());
    std::vector<char> nonfinite;
    for (const auto& slot : group.slots()) {
      const auto begin = host.begin() + slot.offset;
      nonfinite.push_back(!std::all_of(begin, begin + slot.size, [](const element& v) { return std::isfinite(float(v)); }));
    }
    detail::note_nonfinite_slots(group.slots(), nonfinite, first, first_layer);
  });
  return detail::nonfinite_text(who, step, first_layer, first, one_process);
}

/// Where the host learns, without waiting for the GPU, that a controller stopped training on Inf/NaN
/// gradients (step_values::stopped_at_step).
template <class Space>
class nonfinite_note {
 public:
  /// `in_step_order`: the note is read by seen_in_step_order (trainers of
  /// several ranks, which must all stop at the same step); each step's copy
  /// then also records an event.
  explicit nonfinite_note(bool in_step_order = false) : in_step_order_(in_step_order) {
#if FUSOR_HAS_CUDA
    if constexpr (!Space::host_accessible) {  // made here: a first step under capture must not allocate
      pinned_ = static_cast<std::int64_t*>(allocate<pinned_space>(sizeof(std::int64_t) * slots));
      for (int i = 0; i != slots; ++i) pinned_[i] = 0;
      if (in_step_order_)
        for (cudaEvent_t& e : copied_) FUSOR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
#endif
  }
  nonfinite_note(const nonfinite_note&) = delete;
  nonfinite_note& operator=(const nonfinite_note&) = delete;
  ~nonfinite_note() {
#if FUSOR_HAS_CUDA
    for (cudaEvent_t e : copied_)
      if (e != nullptr) (void)cudaEventDestroy(e);
    if (pinned_ != nullptr) deallocate<pinned_space>(const_cast<std::int64_t*>(pinned_));
#endif
  }

  /// After a step's finish_step: nothing to copy on the host.
  void record(const step_scalars<Space>&, const host_executor&) { ++recorded_; }
#if FUSOR_HAS_CUDA
  /// After a step's finish_step: queues a copy of stopped_at_step into pinned host memory on the executor's
  /// stream (a captured step records it too).
  void record(const step_scalars<Space>& scalars, const cuda_executor& ex) {
    const int slot = int(recorded_++ % slots);
    if (pinned_ == nullptr) return;  // host-accessible scalars: read directly
    FUSOR_CUDA_CHECK(cudaMemcpyAsync(const_cast<std::int64_t*>(pinned_ + slot), &scalars.values()->stopped_at_step,
                                     sizeof(std::int64_t), cudaMemcpyDeviceToHost, ex.stream));
    if (in_step_order_) FUSOR_CUDA_CHECK(cudaEventRecord(copied_[slot], ex.stream));
  }
#endif

  /// The step that stopped training (1-based), or 0, as of the latest step the
  /// GPU finished (host: the one just taken). Never waits.
  std::int64_t seen(const step_scalars<Space>& scalars) const {
    if constexpr (Space::host_accessible) return scalars.values()->stopped_at_step;
    std::int64_t newest = 0;  // the notes only grow (0, then the step, for good): the largest is the latest
    if (pinned_ != nullptr)
      for (int i = 0; i != slots; ++i) {
        const std::int64_t note = pinned_[i];
        if (note > newest) newest = note;
      }
    return newest;
  }
  /// The note as of the step `lag` (2) steps before the last one recorded, waiting
  /// for that step on a GPU (the host is then at most `lag` steps ahead of it);
  /// on the host, as of the step just taken. Every rank reads the same step's
  /// note, so every rank stops at the same step. On a GPU, 0 unless the note was made `in_step_order`.
  std::int64_t seen_in_step_order(const step_scalars<Space>& scalars) const {
    if constexpr (Space::host_accessible) return scalars.values()->stopped_at_step;
#if FUSOR_HAS_CUDA
    if (!in_step_order_ || recorded_ <= lag) return 0;
    const int slot = int((recorded_ - 1 - lag) % slots);
    FUSOR_CUDA_CHECK(cudaEventSynchronize(copied_[slot]));
    return pinned_[slot];
#else
    return 0;
#endif
  }

 private:
  static constexpr std::uint64_t lag = 2;
  static constexpr int slots = int(lag) + 1;  // a copy per step in flight
  bool in_step_order_;
  std::uint64_t recorded_ = 0;
  volatile std::int64_t* pinned_ = nullptr;  // written by the GPU's copies, one slot per step
#if FUSOR_HAS_CUDA
  cudaEvent_t copied_[slots] = {};
#endif
};

}  // namespace fusor::optim

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/optim/impl/nonfinite_note.ipp"
#endif
