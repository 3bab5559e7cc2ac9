// tests/support/counting_view.hpp — an instrumented view: a fusor::view that
// counts, per element, how often an assignment reads and writes it. It proves
// the one-pass property: each input element read once, each output element
// written once. It is also an example of a user-defined expression leaf; one
// that derives from a view overrides every read and write it inherits (at,
// load, load_row; store_at, store, store_row), or the path that calls the
// one it left alone bypasses it.
#pragma once

#include <atomic>

#include <fusor/core/view.hpp>

namespace fusor_test {

template <class View>
struct counting_view : View {
  using value_type = typename View::value_type;
  int* reads;   // one counter per storage offset, in the view's memory space
  int* writes;

  counting_view(const View& v, int* read_counters, int* write_counters)
      : View(v), reads(read_counters), writes(write_counters) {}

  FUSOR_HOST_DEVICE static void bump(int* counters, fusor::index_t offset) {
#if FUSOR_DEVICE_PASS
    atomicAdd(counters + offset, 1);
#else
    std::atomic_ref<int>(counters[offset]).fetch_add(1, std::memory_order_relaxed);
#endif
  }

  template <std::size_t R>
  FUSOR_HOST_DEVICE value_type at(const ::cuda::std::array<fusor::index_t, R>& idx) const {
    bump(reads, this->offset_of(idx));
    return View::at(idx);
  }
  template <int V, bool Aligned>
  FUSOR_HOST_DEVICE fusor::lanes<value_type, V> load(fusor::index_t i) const {
    for (int j = 0; j < V; ++j) bump(reads, i + j);
    return View::template load<V, Aligned>(i);
  }
  // The row path's reads: V consecutive elements, or one where the axis is broadcast.
  template <int V, bool Aligned, std::size_t R>
  FUSOR_HOST_DEVICE fusor::lanes<value_type, V> load_row(const ::cuda::std::array<fusor::index_t, R>& idx,
                                                         int inner) const {
    const fusor::index_t offset = this->offset_of(idx);
    const int touched = this->template broadcast_along<R>(inner) ? 1 : V;
    for (int j = 0; j < touched; ++j) bump(reads, offset + j);
    return View::template load_row<V, Aligned>(idx, inner);
  }
  template <int V, bool Aligned, class T>
  FUSOR_HOST_DEVICE void store_row(const ::cuda::std::array<fusor::index_t, View::rank>& idx,
                                   const fusor::lanes<T, V>& values) const {
    const fusor::index_t offset = this->offset_of(idx);
    for (int j = 0; j < V; ++j) bump(writes, offset + j);
    View::template store_row<V, Aligned>(idx, values);
  }
  template <class T>
  FUSOR_HOST_DEVICE void store_at(const ::cuda::std::array<fusor::index_t, View::rank>& idx, const T& v) const {
    bump(writes, this->offset_of(idx));
    View::store_at(idx, v);
  }
  template <int V, bool Aligned, class T>
  FUSOR_HOST_DEVICE void store(fusor::index_t i, const fusor::lanes<T, V>& values) const {
    for (int j = 0; j < V; ++j) bump(writes, i + j);
    View::template store<V, Aligned>(i, values);
  }
};

}  // namespace fusor_test
