// libFuzzer target: io::checkpoint_reader on a fuzzed file, every tensor read
// into a host tensor of every element type, row-major and column-major, of its
// own shape (ranks 0 to 3) and of a wrong one. Each read either fills the
// destination or throws io::checkpoint_error; so does opening the file.
#include <cstddef>
#include <array>
#include <cstdint>
#include <optional>
#include <tuple>

#include <fusor/core/tensor.hpp>
#include <fusor/io/checkpoint.hpp>

#include "fuzz_support.hpp"

namespace io = fusor::io;
using fusor::index_t;

namespace {

template <class Element, class Layout, std::size_t Rank>
void read_as(const io::checkpoint_reader& reader, const io::tensor_record& record, bool wrong_shape) {
  using extents_t = fusor::dextents<index_t, Rank>;
  std::array<index_t, Rank> sizes{};
  for (std::size_t r = 0; r < Rank; ++r) sizes[r] = record.shape[r] + (wrong_shape && r == 0 ? 1 : 0);
  double count = 1;  // the decoder checked the record's own shape; a wrong one may be larger
  for (index_t s : sizes) count *= double(s);
  if (count > double(1 << 24)) return;
  const extents_t shape = std::apply([](auto... s) { return extents_t(s...); }, sizes);
  fusor::tensor<Element, extents_t, Layout, fusor::host_space> destination{shape};
  try {
    reader.read(record.name, destination);
  } catch (const io::checkpoint_error&) {
  }
}

template <class Element>
void read_every_layout(const io::checkpoint_reader& reader, const io::tensor_record& record) {
  for (bool wrong : {false, true}) {
    switch (record.shape.size()) {
      case 0: read_as<Element, fusor::row_major, 0>(reader, record, false); break;
      case 1: read_as<Element, fusor::row_major, 1>(reader, record, wrong); break;
      case 2:
        read_as<Element, fusor::row_major, 2>(reader, record, wrong);
        read_as<Element, fusor::col_major, 2>(reader, record, wrong);
        break;
      case 3:
        read_as<Element, fusor::row_major, 3>(reader, record, wrong);
        read_as<Element, fusor::col_major, 3>(reader, record, wrong);
        break;
      default: break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = fuzz::scratch() / "checkpoint.safetensors";
  fuzz::write(file, {data, size});
  std::optional<io::checkpoint_reader> reader;
  try {
    reader.emplace(file);
  } catch (const io::checkpoint_error&) {
    return 0;
  }
  for (const io::tensor_record& record : reader->contents().tensors) {
    read_every_layout<double>(*reader, record);
    read_every_layout<float>(*reader, record);
    read_every_layout<fusor::float16>(*reader, record);
    read_every_layout<fusor::bfloat16>(*reader, record);
    read_every_layout<std::int64_t>(*reader, record);
    read_every_layout<std::int32_t>(*reader, record);
    read_every_layout<std::int16_t>(*reader, record);
    read_every_layout<std::int8_t>(*reader, record);
    read_every_layout<std::uint8_t>(*reader, record);
    read_every_layout<bool>(*reader, record);
  }
  return 0;
}
