// loader<fusor_test::space>: batches delivered in the tested space (device
// memory under the CUDA executor: copied on the loader's copy stream, the
// compute stream waiting on an event) hold exactly what the host loader's
// batches hold, and are read by a fused expression on the compute stream. Under
// nvcc this is also the instantiation that keeps loader<device_space> compiling.
#include <vector>

#include <fusor/data/loader.hpp>

#include "data/data_support.hpp"

using namespace data_test;
using fusor::data::labelled_images;
using fusor::data::loader;
using fusor::data::loader_options;

namespace {

// The compute stream: a non-blocking stream of its own under CUDA, so nothing
// orders it after the loader's copies except the loader's events.
struct compute_stream {
#if defined(FUSOR_TEST_CUDA)
  compute_stream() { FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~compute_stream() { (void)cudaStreamDestroy(stream); }
  cudaStream_t stream{};
  executor make_executor() const { return executor{stream}; }
#else
  fusor::stream_t stream{};
  executor make_executor() const { return executor{}; }
#endif
};

}  // namespace

FUSOR_TEST_CASE("loader in the tested space delivers the host loader's batches, and compute reads them in order") {
  const labelled_images data = random_images(1500, 28, 28, 61);
  loader_options o;
  o.batch_size = 128, o.seed = 5, o.mean = 0.2860f, o.std = 0.3530f;
  for (const int prefetch : {1, 3}) {
    o.prefetch = prefetch;
    compute_stream compute;
    const executor ex = compute.make_executor();
    loader<space> tested(data, o, compute.stream);
    loader<host_space> reference(data, o);
    CHECK(tested.batches_per_epoch() == 12);
    for (const std::uint64_t epoch : {0u, 1u}) {
      tested.start_epoch(epoch);
      reference.start_epoch(epoch);
      index_t batches = 0;
      while (const auto* b = tested.next()) {
        const auto* want = reference.next();
        REQUIRE(want != nullptr);
        REQUIRE(b->size == want->size);
        // Undo the normalisation on the compute stream: pixel / 255 again.
        space_tensor<float, dextents<index_t, 2>> restored(b->images.extents());
        poison(restored);
        fusor::assign(restored, b->images * o.std + o.mean, ex);
        finish(ex);
        const auto images = to_host(b->images);
        const auto labels = to_host(b->labels);
        const auto pixels = to_host(restored);
        index_t wrong = 0;
        for (index_t k = 0; k < b->size; ++k) {
          wrong += labels(k) != want->labels(k);
          for (index_t p = 0; p < images.extent(1); ++p) {
            wrong += images(k, p) != want->images(k, p);
            const double reference_pixel = double(want->images(k, p)) * o.std + o.mean;
            wrong += !close(pixels(k, p), reference_pixel, 1e-6);
          }
        }
        CHECK_MESSAGE(wrong == 0, "epoch ", epoch, " batch ", batches, " prefetch ", prefetch);
        ++batches;
      }
      CHECK(reference.next() == nullptr);
      CHECK(batches == 12);
    }
  }
}
