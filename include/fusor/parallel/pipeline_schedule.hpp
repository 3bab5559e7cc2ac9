// fusor/parallel/pipeline_schedule.hpp — what each stage of a pipeline does, and
// in which order, without running anything: the GPipe and 1F1B schedules as
// lists of forward/backward actions, how many micro-batches a stage holds in
// flight, the message tags, the bubble, and the stage map (which layers each
// rank holds). Pure logic, so it is tested without MPI; parallel/pipeline.hpp runs it.
//
//   GPipe: every forward, then every backward (m micro-batches in flight).
//   1F1B:  stage s of p warms up with min(p - s - 1, m) forwards, then
//          alternates one forward and one backward, then cools down with the
//          remaining backwards: at most min(m, p - s) micro-batches in flight.
// Both backward the micro-batches in forward order, so a stage keeps k
// contexts (activations of one micro-batch each) and gives micro-batch i
// context i % k. Both leave every stage idle for (p - 1) forward and backward
// slots of a step of m + p - 1: the bubble, (p - 1) / m of the compute time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/nn/network.hpp"

namespace fusor::parallel {

/// The order in which a pipeline stage runs its micro-batches' forwards and backwards in a step.
enum class pipeline_schedule { gpipe, one_forward_one_backward };

/// The schedule's name: "GPipe" or "1F1B".
inline const char* name(pipeline_schedule schedule) {
  return schedule == pipeline_schedule::gpipe ? "GPipe" : "1F1B";
}

/// One step of one stage's schedule.
struct pipeline_action {
  /// A micro-batch's forward or its backward.
  enum class kind { forward, backward };
  kind what = kind::forward;  ///< forward or backward
  index_t micro_batch = 0;    ///< which micro-batch of the step, from 0
  index_t context = 0;  ///< which in-flight context holds this micro-batch's activations
  /// Equal where every field is.
  bool operator==(const pipeline_action&) const = default;
};

namespace detail {
inline void require_schedule_arguments(int stage, int stages, index_t micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1)
    throw error("fusor::parallel: a pipeline schedule needs 0 <= stage < stages and micro_batches >= 1 (stage " +
                std::to_string(stage) + " of " + std::to_string(stages) + ", " + std::to_string(micro_batches) +
                " micro-batches)");
}
}  // namespace detail

/// How many micro-batches stage `stage` of `stages` holds at once.
inline index_t pipeline_contexts(pipeline_schedule schedule, int stage, int stages, index_t micro_batches) {
  detail::require_schedule_arguments(stage, stages, micro_batches);
  if (schedule == pipeline_schedule::gpipe) return micro_batches;
  return std::min<index_t>(micro_batches, stages - stage);
}

/// The actions of stage `stage` in one training step, in the order it runs them.
inline std::vector<pipeline_action> pipeline_actions(pipeline_schedule schedule, int stage, int stages,
                                                     index_t micro_batches) {
  const index_t contexts = pipeline_contexts(schedule, stage, stages, micro_batches);
  std::vector<pipeline_action> actions;
  actions.reserve(std::size_t(2 * micro_batches));
  auto forward = [&](index_t i) { actions.push_back({pipeline_action::kind::forward, i, i % contexts}); };
  auto backward = [&](index_t i) { actions.push_back({pipeline_action::kind::backward, i, i % contexts}); };
  if (schedule == pipeline_schedule::gpipe) {
    for (index_t i = 0; i < micro_batches; ++i) forward(i);
    for (index_t i = 0; i < micro_batches; ++i) backward(i);
    return actions;
  }
  const index_t warm_up = std::min<index_t>(stages - stage - 1, micro_batches);
  for (index_t i = 0; i < warm_up; ++i) forward(i);
  for (index_t i = 0; i + warm_up < micro_batches; ++i) {
    forward(i + warm_up);
    backward(i);
  }
  for (index_t i = micro_batches - warm_up; i < micro_batches; ++i) backward(i);
  return actions;
}

// Tags of point-to-point messages: the micro-batch and the direction (an
// activation goes forward, a gradient backward), so no message can be taken
// for another. MPI guarantees tags up to 32767.
/// The most micro-batches a step may have: every message tag stays within MPI's guaranteed 32767.
inline constexpr index_t pipeline_max_micro_batches = 16383;
/// The tag of micro-batch `micro_batch`'s message in `direction`: 2 x micro_batch, plus 1 for a gradient.
inline int pipeline_tag(index_t micro_batch, pipeline_action::kind direction) {
  return int(2 * micro_batch + (direction == pipeline_action::kind::backward ? 1 : 0));
}

/// The idle time of an ideal pipeline relative to its compute time: (p - 1) / m.
inline double pipeline_bubble_fraction(int stages, index_t micro_batches) {
  return double(stages - 1) / double(micro_batches);
}
/// The same bubble as a share of the whole step, (p - 1) / (m + p - 1): what a
/// stage's measured idle time over its step time compares with.
inline double pipeline_bubble_share_of_step(int stages, index_t micro_batches) {
  return double(stages - 1) / double(micro_batches + stages - 1);
}

/// The stage map: the first layer of each stage, in stage order.
/// Balanced: `layers` split into `stages` runs whose lengths differ by at most one
/// (stage s starts at s * layers / stages). Layers differ in cost: give a map of
/// your own (pipeline_options::stage_starts) to balance work rather than counts.
inline std::vector<std::size_t> balanced_stage_starts(std::size_t layers, int stages) {
  std::vector<std::size_t> starts;
  for (int s = 0; s < stages; ++s) starts.push_back(std::size_t(s) * layers / std::size_t(stages));
  return starts;
}

/// A stage map as text, such as "{0, 3, 6}".
inline std::string stage_map_string(const std::vector<std::size_t>& starts) {
  std::string text = "{";
  for (std::size_t s = 0; s < starts.size(); ++s) text += (s ? ", " : "") + std::to_string(starts[s]);
  return text + "}";
}

/// Throws fusor::error, naming the numbers, unless `starts` gives each of `stages`
/// ranks at least one of `layers` layers, in order, from layer 0.
inline void check_stage_starts(const std::vector<std::size_t>& starts, std::size_t layers, int stages) {
  const std::string map = "fusor::parallel::pipeline: stage map " + stage_map_string(starts);
  if (stages < 1 || std::size_t(stages) > layers)
    throw error("fusor::parallel::pipeline: " + std::to_string(stages) + " stages (ranks) for a network of " +
                std::to_string(layers) + (layers == 1 ? " layer" : " layers") + ": each stage needs at least one");
  if (starts.size() != std::size_t(stages))
    throw error(map + " has " + std::to_string(starts.size()) + " starts for " + std::to_string(stages) +
                " ranks (one per rank)");
  if (starts[0] != 0) throw error(map + ": the first stage must start at layer 0, not " + std::to_string(starts[0]));
  for (std::size_t s = 1; s < starts.size(); ++s)
    if (starts[s] <= starts[s - 1])
      throw error(map + ": starts must increase (stage " + std::to_string(s) + " starts at layer " +
                  std::to_string(starts[s]) + ", stage " + std::to_string(s - 1) + " at " +
                  std::to_string(starts[s - 1]) + ")");
  if (starts.back() >= layers)
    throw error(map + ": stage " + std::to_string(starts.size() - 1) + " starts at layer " +
                std::to_string(starts.back()) + ", but the network has " + std::to_string(layers) + " layers");
}

/// The layers stage `stage` holds under a checked stage map.
inline nn::layer_range stage_layers(const std::vector<std::size_t>& starts, int stage, std::size_t layers) {
  const std::size_t s = std::size_t(stage);
  return {starts[s], s + 1 < starts.size() ? starts[s + 1] : layers};
}

}  // namespace fusor::parallel
