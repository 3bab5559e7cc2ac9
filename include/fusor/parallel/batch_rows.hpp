// fusor/parallel/batch_rows.hpp — some consecutive samples of a batch as a view
// of their own: how a rank takes its slice of the global batch, and a micro-batch
// its piece of that, without copying.
#pragma once

#include <string>
#include <type_traits>

#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/view.hpp"

namespace fusor::parallel::detail {

// Rows [begin, begin + count) of v (contiguous, row-major, the batch its first
// extent): rank 1 stays [count], higher ranks become [count, elements per sample].
template <class V>
auto batch_rows(const V& v, index_t begin, index_t count) {
  static_assert(V::rank >= 1, "fusor: parallel: a batch needs a batch axis");
  if (!v.is_contiguous() || !std::is_same_v<typename V::layout_type, row_major>)
    throw shape_error("fusor::parallel: a batch of shape " + shape_string(v.extents()) +
                      " must be contiguous and row-major to be split into rows");
  if (begin < 0 || count < 0 || begin + count > v.extent(0))
    throw shape_error("fusor::parallel: rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                      ") of a batch of shape " + shape_string(v.extents()));
  using precision = typename V::precision;
  using space = typename V::space;
  if constexpr (V::rank == 1) {
    return view<precision, dextents<index_t, 1>, row_major, space>(v.data() + begin, count);
  } else {
    const index_t per_sample = v.extent(0) == 0 ? 0 : v.size() / v.extent(0);
    return view<precision, dextents<index_t, 2>, row_major, space>(v.data() + begin * per_sample, count, per_sample);
  }
}

}  // namespace fusor::parallel::detail
