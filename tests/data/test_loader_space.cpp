// loader<fusor_test::space>: batches delivered in the tested space (device
// memory under the CUDA executor: copied on the loader's copy stream, the
// compute stream waiting on an event) hold exactly what the host loader's
// batches hold, and are read by a fused expression on the compute stream; on
// random data and on Fashion-MNIST's test split. Under nvcc this is also what
// keeps loader<device_space> and the zlib readers compiling.
#include <vector>

#include <fusor/data/fashion_mnist.hpp>
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
  created_stream created;
  cudaStream_t stream = created.stream;
  executor make_executor() const { return executor{stream}; }
#else
  fusor::stream_t stream{};
  executor make_executor() const { return executor{}; }
#endif
};

// Every batch of two epochs from loader<space> against loader<host_space>:
// images and labels equal, and a fused expression on the compute stream that
// undoes the normalisation reads what the copy delivered.
void compare_with_host_loader(const labelled_images& data, loader_options o) {
  const index_t batches = (data.count + o.batch_size - 1) / o.batch_size;
  for (const int prefetch : {1, 3}) {
    o.prefetch = prefetch;
    compute_stream compute;
    const executor ex = compute.make_executor();
    loader<space> tested(data, o, compute.stream);
    loader<host_space> reference(data, o);
    CHECK(tested.batches_per_epoch() == batches);
    for (const std::uint64_t epoch : {0u, 1u}) {
      tested.start_epoch(epoch);
      reference.start_epoch(epoch);
      index_t seen = 0;
      while (const auto* b = tested.next()) {
        const auto* want = reference.next();
        REQUIRE(want != nullptr);
        REQUIRE(b->size == want->size);
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
            wrong += !close(pixels(k, p), double(want->images(k, p)) * o.std + o.mean, 1e-6);
          }
        }
        CHECK_MESSAGE(wrong == 0, "epoch ", epoch, " batch ", seen, " prefetch ", prefetch);
        ++seen;
      }
      CHECK(reference.next() == nullptr);
      CHECK(seen == batches);
    }
  }
}

}  // namespace

FUSOR_TEST_CASE("loader in the tested space delivers the host loader's batches, and compute reads them in order") {
  loader_options o;
  o.batch_size = 128, o.seed = 5, o.mean = 0.2860f, o.std = 0.3530f;
  compare_with_host_loader(random_images(1500, 28, 28, 61), o);
}

FUSOR_TEST_CASE("Fashion-MNIST's test split through the loader in the tested space") {
  const labelled_images test = take_first(fusor::data::load_fashion_mnist(fusor::data::split::test), 2000);
  loader_options o;
  o.batch_size = 256, o.seed = 2, o.drop_last = false;
  compare_with_host_loader(test, o);
}
