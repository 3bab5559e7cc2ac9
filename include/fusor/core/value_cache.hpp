// fusor/core/value_cache.hpp — values worked out once and kept, thread safe:
// one per device ordinal (per_device_cache: the occupancy API's suggestions
// and what a device's code can do differ between GPUs of one machine), or one
// per key (keyed_cache: a kernel's occupancy for a launch shape, the shared
// memory it has been allowed). Free of CUDA, so the host tests check them.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

namespace fusor::detail {

// One value per device ordinal, computed once per device by `compute` (thread
// safe; a `compute` that throws is tried again next time). Devices past the
// first `Devices` are not cached: their value is computed on every call.
template <class T, int Devices = 64>
class per_device_cache {
 public:
  template <class Compute>
  T get(int device, Compute&& compute) {
    if (device < 0 || device >= Devices) return compute();
    std::call_once(once_[std::size_t(device)], [&] { values_[std::size_t(device)] = compute(); });
    return values_[std::size_t(device)];
  }

 private:
  std::array<std::once_flag, Devices> once_{};
  std::array<T, Devices> values_{};
};

// One value per key (a tuple with the device ordinal first, typically).
// get() computes a missing value outside the lock, so `compute` may call the
// CUDA runtime or another cache; two threads may both compute a new key, and
// the first value stored is the one kept and returned to both. A `compute`
// that throws stores nothing.
template <class Key, class T>
class keyed_cache {
 public:
  template <class Compute>
  T get(const Key& key, Compute&& compute) {
    {
      std::lock_guard<std::mutex> lock(guard_);
      if (const auto found = values_.find(key); found != values_.end()) return found->second;
    }
    T value = compute();
    std::lock_guard<std::mutex> lock(guard_);
    return values_.emplace(key, std::move(value)).first->second;
  }

  // Calls change(T&) on the key's value (value-initialised the first time)
  // with the lock held through the call: no other thread sees or changes the
  // value meanwhile, for a change that must be made once and in order (a
  // limit only ever raised). If change throws, what it wrote stays.
  template <class Change>
  void update(const Key& key, Change&& change) {
    std::lock_guard<std::mutex> lock(guard_);
    change(values_[key]);
  }

 private:
  std::mutex guard_;
  std::map<Key, T> values_;
};

}  // namespace fusor::detail
