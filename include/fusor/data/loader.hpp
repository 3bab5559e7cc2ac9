// fusor/data/loader.hpp — loader: batches of a labelled_images data set, shuffled
// by a seed, prepared ahead by a background thread and delivered on the host or,
// copied on a stream of the loader's own, on the device.
//
// The worker thread turns uint8 pixels into floats, (pixel / 255 - mean) / std,
// in a ring of prefetch + 1 slots of staging memory (pinned for device_space).
// For device_space every slot also has device buffers: the worker queues
// the copy on the loader's non-blocking copy stream and records an event that
// the consumer's compute stream waits on, so next() never blocks the host on a
// copy; when the consumer asks for the following batch, an event recorded on
// the compute stream tells the copy stream when the old slot may be
// overwritten. An exception in the worker is rethrown by next(); the
// destructor stops and joins the worker wherever it is. One thread (the
// consumer) calls start_epoch() and next().
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/view.hpp"
#include "fusor/data/labelled_images.hpp"
#include "fusor/data/loader_buffers.hpp"
#include "fusor/data/permutation.hpp"

namespace fusor::data {

/// How a loader batches, orders and normalises its data.
struct loader_options {
  index_t batch_size = 256;  ///< Samples per batch (at least 1).
  bool shuffle = true;  ///< Visit the samples in an order drawn from (seed, epoch); false: in data order.
  std::uint64_t seed = 0;  ///< The seed of the shuffled orders.
  bool drop_last = false;         ///< Drop a last partial batch (by default it is kept)
  int prefetch = 2;               ///< Batches prepared ahead by the background thread (at least 1)
  /// The mean subtracted from pixel / 255.
  float mean = 0.0f, std = 1.0f;  ///< The divisor: pixel -> (pixel / 255 - mean) / std, as float
};

/// Batches of a labelled_images data set, shuffled by a seed, prepared ahead by a background thread and
/// delivered in `Space`: host_space (ordinary host memory, also under nvcc), or device_space (copied from
/// pinned staging memory on a stream of the loader's own).
template <class Space = host_space>
class loader {
  static constexpr bool on_device = std::is_same_v<Space, device_space>;
  static_assert(std::is_same_v<Space, host_space> || on_device,
                "fusor: a loader delivers batches to host_space or device_space");
  static_assert(!on_device || FUSOR_HAS_CUDA, "fusor: loader<device_space> needs a translation unit compiled by nvcc");

 public:
  using images_view = view<fp32, dextents<index_t, 2>, row_major, Space>;  ///< A batch's images: [size, rows * cols]
  using labels_view = view<std::int32_t, dextents<index_t, 1>, row_major, Space>;  ///< A batch's labels: [size]
  /// One batch, as views of the loader's memory (valid until the following next() or start_epoch()).
  struct batch {
    images_view images;  ///< The normalised images.
    labels_view labels;  ///< Their labels.
    index_t size;  ///< The number of samples: batch_size, or fewer in a last partial batch.
  };

  /// `data` must outlive the loader and not change. For device_space,
  /// `compute_stream` is the stream the consumer computes on. Throws fusor::error for bad options and
  /// data_error for data that is not valid.
  loader(const labelled_images& data, loader_options options, stream_t compute_stream = {});

  loader(const loader&) = delete;
  loader& operator=(const loader&) = delete;

  ~loader();

  /// Batches in each epoch (a last partial one included unless drop_last).
  index_t batches_per_epoch() const { return batches_; }
  index_t size() const { return count_; }  ///< Samples in the data set
  /// The options it was made with.
  const loader_options& options() const { return options_; }

  /// Visits the samples in the order of (seed, epoch) (in order without
  /// shuffle) and starts preparing batches; abandons the current epoch.
  void start_epoch(std::uint64_t epoch);

  /// The next batch of the current epoch, or nullptr at its end. The views stay
  /// valid until the following next() or start_epoch(). On the device, the
  /// compute stream is made to wait for the batch's copy; the host does not. Throws fusor::error before
  /// the first start_epoch(); an exception of the worker thread is rethrown here.
  const batch* next();

 private:
  static constexpr std::size_t none = std::size_t(-1);

  static void check(const loader_options& o) {
    const auto fail = [](const std::string& what) { throw error("fusor: loader_options: " + what); };
    if (o.batch_size < 1) fail("batch_size is " + std::to_string(o.batch_size) + ", must be at least 1");
    if (o.prefetch < 1) fail("prefetch is " + std::to_string(o.prefetch) + ", must be at least 1");
    if (!std::isfinite(o.mean)) fail("mean is " + std::to_string(o.mean) + ", must be finite");
    if (!std::isfinite(o.std) || std::fabs(o.std) < std::numeric_limits<float>::min())  // 1 / a denormal is inf
      fail("std is " + std::to_string(o.std) + ", must be finite and non-zero (at least 1.2e-38 in magnitude)");
  }

  // Hands the consumer's slot back to the worker (mutex held). On the device
  // it is reused only after the work queued so far on the compute stream.
  void release_held();

  // The worker thread: fills free slots, in batch order, while an epoch has batches left.
  void work();

  // Converts batch `batch_index` of the epoch into `slot` (worker thread, no lock held).
  void fill(std::size_t slot, index_t batch_index);

  const labelled_images* data_;
  loader_options options_;
  stream_t compute_stream_;
  index_t count_ = 0, pixels_per_sample_ = 0, batches_ = 0;
  std::array<float, 256> table_{};  // pixel value -> normalised float, rounded once from double

  // device_space: the copy stream and device buffers, destroyed after the
  // staging memory (whose copies the destructor waits for). host_space: empty.
  [[no_unique_address]] std::conditional_t<on_device, detail::device_part, detail::no_device_part> device_;
  using staging_space = std::conditional_t<on_device, pinned_space, host_space>;
  std::vector<detail::staging_buffer<staging_space>> staging_images_, staging_labels_;
  std::vector<index_t> sizes_;  // samples in each slot's batch

  // Shared with the worker, under mutex_.
  std::mutex mutex_;
  std::condition_variable work_wanted_, batch_done_;
  std::deque<std::size_t> free_, ready_;  // slot indices; ready_ in batch order
  std::vector<index_t> order_;
  index_t filled_ = 0, delivered_ = 0;
  std::uint64_t generation_ = 0;  // counts start_epoch() calls: a fill from an older epoch is dropped
  std::size_t held_ = none;       // the slot behind current_
  bool active_ = false, started_ = false, filling_ = false, stopping_ = false;
  std::exception_ptr failure_;
  batch current_{};

  std::thread worker_;  // last: started when everything it uses exists
};

// The members, outside the class so that they are not inline: an `extern
// template` (below) then keeps a program from compiling them again.
template <class Space>
loader<Space>::loader(const labelled_images& data, loader_options options, stream_t compute_stream)
    : data_(&data), options_(options), compute_stream_(compute_stream) {
  check(options_);
  validate(data);
#if FUSOR_HAS_CUDA
  if constexpr (on_device) {
    gpu::require("loader<device_space>");
    FUSOR_CUDA_CHECK(cudaGetDevice(&device_.device));
  }
#endif
  count_ = data.count;
  pixels_per_sample_ = data.rows * data.cols;
  const index_t size = options_.batch_size;
  batches_ = count_ / size + (!options_.drop_last && count_ % size != 0);  // (count + size - 1) could overflow
  for (int p = 0; p < 256; ++p)
    table_[std::size_t(p)] = float((p / 255.0 - double(options_.mean)) / double(options_.std));

  const index_t capacity = std::max<index_t>(1, std::min(size, count_));
  const std::size_t image_bytes = std::size_t(capacity * pixels_per_sample_) * sizeof(float);
  const std::size_t label_bytes = std::size_t(capacity) * sizeof(std::int32_t);
  const std::size_t slots = std::size_t(options_.prefetch) + 1;  // prefetched, plus the one the consumer holds
  for (std::size_t s = 0; s < slots; ++s) {
    staging_images_.emplace_back(image_bytes);
    staging_labels_.emplace_back(label_bytes);
  }
  sizes_.assign(slots, 0);
#if FUSOR_HAS_CUDA
  if constexpr (on_device) {
    device_.copy_stream = detail::owned_stream::non_blocking();
    device_.slots.reserve(slots);
    for (std::size_t s = 0; s < slots; ++s)
      device_.slots.emplace_back(image_bytes, label_bytes, device_.copy_stream.get());
  }
#endif
  worker_ = std::thread([this] { work(); });
}

template <class Space>
loader<Space>::~loader() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_wanted_.notify_all();
  worker_.join();
#if FUSOR_HAS_CUDA
  if constexpr (on_device) {
    // Nothing here may throw. The device buffers are freed on the copy stream
    // once compute is done with them; the staging memory once its copy is done.
    if (held_ != none) (void)cudaEventRecord(device_.slots[held_].released.get(), compute_stream_);
    for (auto& slot : device_.slots) {
      (void)cudaEventSynchronize(slot.copied.get());
      (void)cudaStreamWaitEvent(device_.copy_stream.get(), slot.released.get(), 0);
    }
  }
#endif
}

template <class Space>
void loader<Space>::start_epoch(std::uint64_t epoch) {
  std::vector<index_t> order;
  if (options_.shuffle) {
    order = epoch_permutation(count_, options_.seed, epoch);
  } else {
    order.resize(static_cast<std::size_t>(count_));
    std::iota(order.begin(), order.end(), index_t(0));
  }
  std::unique_lock lock(mutex_);
  ++generation_;
  active_ = false;
  batch_done_.wait(lock, [&] { return !filling_; });  // the worker lets go of the old order
  release_held();
  free_.clear();
  ready_.clear();
  for (std::size_t s = 0; s < sizes_.size(); ++s) free_.push_back(s);
  order_ = std::move(order);
  filled_ = delivered_ = 0;
  failure_ = nullptr;
  active_ = started_ = true;
  work_wanted_.notify_one();
}

template <class Space>
const typename loader<Space>::batch* loader<Space>::next() {
  std::unique_lock lock(mutex_);
  if (!started_) throw error("fusor: loader::next() called before start_epoch()");
  release_held();
  if (delivered_ == batches_) return nullptr;
  batch_done_.wait(lock, [&] { return !ready_.empty() || failure_; });
  if (ready_.empty()) std::rethrow_exception(failure_);  // again on every call, until start_epoch()
  const std::size_t slot = ready_.front();
  ready_.pop_front();
  held_ = slot;
  ++delivered_;
  lock.unlock();

  const index_t n = sizes_[slot];
  float* images = staging_images_[slot].template as<float>();
  std::int32_t* labels = staging_labels_[slot].template as<std::int32_t>();
#if FUSOR_HAS_CUDA
  if constexpr (on_device) {
    FUSOR_CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, device_.slots[slot].copied.get(), 0));
    images = device_.slots[slot].images.template as<float>();
    labels = device_.slots[slot].labels.template as<std::int32_t>();
  }
#endif
  current_ = batch{images_view(images, n, pixels_per_sample_), labels_view(labels, n), n};
  return &current_;
}

template <class Space>
void loader<Space>::release_held() {
  if (held_ == none) return;
#if FUSOR_HAS_CUDA
  if constexpr (on_device) FUSOR_CUDA_CHECK(cudaEventRecord(device_.slots[held_].released.get(), compute_stream_));
#endif
  free_.push_back(held_);
  held_ = none;
  work_wanted_.notify_one();
}

template <class Space>
void loader<Space>::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_wanted_.wait(lock, [&] {
      return stopping_ || (active_ && !failure_ && filled_ < batches_ && !free_.empty());
    });
    if (stopping_) return;
    const std::size_t slot = free_.front();
    free_.pop_front();
    const index_t batch_index = filled_++;
    const std::uint64_t generation = generation_;
    filling_ = true;
    lock.unlock();
    std::exception_ptr failure;
    try {
      fill(slot, batch_index);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    filling_ = false;
    if (generation == generation_) {  // else start_epoch() abandoned this epoch and resets the slots
      if (failure) failure_ = failure;
      else ready_.push_back(slot);
    }
    batch_done_.notify_all();
  }
}

template <class Space>
void loader<Space>::fill(std::size_t slot, index_t batch_index) {
#if FUSOR_HAS_CUDA
  if constexpr (on_device) {
    FUSOR_CUDA_CHECK(cudaSetDevice(device_.device));
    FUSOR_CUDA_CHECK(cudaEventSynchronize(device_.slots[slot].copied.get()));  // staging memory free again
  }
#endif
  const labelled_images& data = *data_;
  if (index_t(data.pixels.size()) != count_ * pixels_per_sample_ || index_t(data.labels.size()) != count_)
    throw data_error("fusor: loader: its labelled_images changed after the loader was made: now " +
                     std::to_string(data.pixels.size()) + " pixels and " + std::to_string(data.labels.size()) +
                     " labels, made with " + std::to_string(count_) + " samples of " +
                     std::to_string(pixels_per_sample_) + " pixels");
  const index_t first = batch_index * options_.batch_size;
  const index_t n = std::min<index_t>(options_.batch_size, count_ - first);
  float* images = staging_images_[slot].template as<float>();
  std::int32_t* labels = staging_labels_[slot].template as<std::int32_t>();
  for (index_t k = 0; k < n; ++k) {
    const index_t sample = order_[std::size_t(first + k)];
    const std::int32_t label = data.labels[std::size_t(sample)];
    if (label < 0 || label >= data.classes)
      throw data_error("fusor: loader: label " + std::to_string(label) + " of sample " + std::to_string(sample) +
                       " is outside [0, " + std::to_string(data.classes) + ")");
    labels[k] = label;
    const std::uint8_t* source = data.pixels.data() + sample * pixels_per_sample_;
    float* destination = images + k * pixels_per_sample_;
    for (index_t p = 0; p < pixels_per_sample_; ++p) destination[p] = table_[source[p]];
  }
  sizes_[slot] = n;
#if FUSOR_HAS_CUDA
  if constexpr (on_device) {
    auto& device = device_.slots[slot];
    const cudaStream_t copy = device_.copy_stream.get();
    FUSOR_CUDA_CHECK(cudaStreamWaitEvent(copy, device.released.get(), 0));  // compute is done with the old batch
    FUSOR_CUDA_CHECK(cudaMemcpyAsync(device.images.data(), images, std::size_t(n * pixels_per_sample_) * sizeof(float),
                                     cudaMemcpyHostToDevice, copy));
    FUSOR_CUDA_CHECK(cudaMemcpyAsync(device.labels.data(), labels, std::size_t(n) * sizeof(std::int32_t),
                                     cudaMemcpyHostToDevice, copy));
    FUSOR_CUDA_CHECK(cudaEventRecord(device.copied.get(), copy));
  }
#endif
}

// Compiled once: the host's loader in fusor::runtime (src/data.cpp) for g++
// units, both in fusor::cuda_runtime (src/cuda/data.cu) for nvcc units. The
// two host loaders are the same code (no member depends on FUSOR_HAS_CUDA for
// host_space) except the constructor, whose stream_t is void* under g++.
#if FUSOR_CUDA_PRECOMPILED
extern template class loader<host_space>;
extern template class loader<device_space>;
#elif defined(FUSOR_SEPARATE_COMPILATION) && !FUSOR_HAS_CUDA
extern template class loader<host_space>;
#endif

}  // namespace fusor::data
