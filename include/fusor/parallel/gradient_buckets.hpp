// fusor/parallel/gradient_buckets.hpp — how data parallelism cuts one parameter
// group's flat gradient buffer into buckets, each communicated as one collective.
//
// A bucket is a run of whole layers taken in reverse layer order (the order
// backward finishes them), so it is ready as soon as backward is done with its
// lowest layer, and its collective can start while the layers below are still
// working. Layers join the open bucket while it stays within bucket_bytes (as
// communicated: 2 bytes an element for bf16 communication); a layer larger than
// that is a bucket of its own. Few large buckets mean few calls (latency);
// small ones start earlier (overlap).
//
// ZeRO-1 reduce-scatters each bucket, so each bucket is padded to a multiple of
// the number of ranks in a "communication layout" (buckets in buffer order, each
// followed by its zero padding): rank r owns chunk r of every bucket, and its
// shard is those chunks back to back. Without sharding the layout is the buffer's own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"

namespace fusor::parallel {

/// Where one layer's parameters lie in a group's flat buffer: [begin, end).
struct layer_range {
  std::size_t layer = 0;  ///< the layer's index in the network
  index_t begin = 0;      ///< its first element in the buffer
  index_t end = 0;        ///< one past its last element
};

/// A run of whole layers whose gradients are communicated as one collective.
struct gradient_bucket {
  /// \var begin
  /// The bucket's first element in the group's flat buffers.
  /// \var end
  /// One past its last element: [begin, end).
  index_t begin = 0, end = 0;
  std::size_t lowest_layer = 0;       ///< ready once backward is done with this layer
  std::size_t highest_layer = 0;      ///< the bucket's last layer (backward reaches it first)
  index_t padded_begin = 0;           ///< where it starts in the communication layout
  index_t padded_size = 0;            ///< its size rounded up to a multiple of pad_to
  /// Elements of the group's buffer the bucket spans, padding left out.
  index_t size() const { return end - begin; }
};

/// How one parameter group's gradient buffer is cut into buckets (plan_buckets()).
struct bucket_plan {
  std::vector<gradient_bucket> buckets;  ///< in the order they become ready (reverse layer order)
  index_t size = 0;                      ///< elements of the group's buffer
  index_t padded_size = 0;               ///< elements of the communication layout
  int pad_to = 1;                        ///< the ranks sharing each bucket (ZeRO-1), else 1
  /// Whether any bucket is padded (the communication layout is larger than the buffer).
  bool padded() const { return padded_size != size; }
  /// This rank's share of the layout (ZeRO-1): padded_size / pad_to.
  index_t shard_size() const { return padded_size / pad_to; }
};

/// Buckets from the layers' ranges given in reverse layer order (layers without
/// parameters in this group left out). The ranges must tile [0, size) of the buffer;
/// throws fusor::error where they do not, or where bucket_bytes or pad_to is below 1.
inline bucket_plan plan_buckets(const std::vector<layer_range>& reverse_layers, index_t element_bytes,
                                index_t bucket_bytes, int pad_to) {
  if (bucket_bytes < 1)
    throw error("fusor::parallel: bucket_bytes must be at least 1, not " + std::to_string(bucket_bytes));
  if (pad_to < 1) throw error("fusor::parallel: buckets padded to " + std::to_string(pad_to) + " ranks");
  bucket_plan plan;
  plan.pad_to = pad_to;
  index_t expected_end = reverse_layers.empty() ? 0 : reverse_layers.front().end;
  plan.size = expected_end;
  for (const layer_range& l : reverse_layers) {
    if (l.end != expected_end || l.begin >= l.end)
      throw error("fusor::parallel: layer " + std::to_string(l.layer) + "'s parameters [" + std::to_string(l.begin) +
                  ", " + std::to_string(l.end) + ") do not continue the layer above it (which starts at " +
                  std::to_string(expected_end) + ")");
    expected_end = l.begin;
    // The open bucket and this layer are contiguous: together they span [l.begin, back.end).
    const bool fits = !plan.buckets.empty() && (plan.buckets.back().end - l.begin) * element_bytes <= bucket_bytes;
    if (fits) {
      plan.buckets.back().begin = l.begin;
      plan.buckets.back().lowest_layer = l.layer;
    } else {
      plan.buckets.push_back({l.begin, l.end, l.layer, l.layer, 0, 0});
    }
  }
  if (expected_end != 0)
    throw error("fusor::parallel: the layers' parameters start at " + std::to_string(expected_end) +
                ", not at the start of the buffer");
  // The layout follows the buffer's order: the last bucket (lowest layers) first.
  index_t offset = 0;
  for (auto b = plan.buckets.rbegin(); b != plan.buckets.rend(); ++b) {
    b->padded_begin = offset;
    b->padded_size = (b->size() + pad_to - 1) / pad_to * pad_to;
    offset += b->padded_size;
  }
  plan.padded_size = offset;
  return plan;
}

}  // namespace fusor::parallel
