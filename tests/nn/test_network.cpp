// nn::network, nn::sequential and nn::softmax_cross_entropy under every
// executor: forward against a plain double loop over the same parameters,
// the flat parameter layout, the loss totals, and the shape errors.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "support/checkpoint_edits.hpp"
#include "support/fusor_test.hpp"

#include <fusor/nn/linear.hpp>
#include <fusor/nn/loss.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/training_checkpoint.hpp>

using namespace fusor;
using namespace fusor_test;

namespace {
using mlp = nn::sequential<nn::features<20>, nn::linear<20, 16, nn::relu>, nn::linear<16, 12, nn::gelu_tanh>,
                           nn::linear<12, 5>>;
using matrix = dextents<index_t, 2>;

template <class Element>
std::vector<double> host_values(const nn::flat_view<Element, space>& v) {
  const auto h = to_host(v);
  std::vector<double> out(std::size_t(h.size()));
  for (index_t i = 0; i < h.size(); ++i) out[std::size_t(i)] = double(convert<float>(h.data()[i]));
  return out;
}

// y = x w^T + b, then the activation, in double.
std::vector<double> dense(const std::vector<double>& x, index_t rows, index_t in, index_t outs,
                          const std::vector<double>& w, const std::vector<double>& b, int activation) {
  std::vector<double> y(std::size_t(rows * outs));
  for (index_t r = 0; r < rows; ++r)
    for (index_t o = 0; o < outs; ++o) {
      double s = b[std::size_t(o)];
      for (index_t k = 0; k < in; ++k) s += x[std::size_t(r * in + k)] * w[std::size_t(o * in + k)];
      if (activation == 1) s = std::fmax(s, 0.0);
      if (activation == 2) s = 0.5 * s * (1 + std::tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
      y[std::size_t(r * outs + o)] = s;
    }
  return y;
}

template <class P>
void check_forward(double tolerance) {
  executor ex{};
  const index_t batch = 37;
  nn::network<mlp, P, space> net(64, {.seed = 5});
  host_tensor<float, matrix> hx(batch, 20);
  fill_random(hx, 3);
  const auto x = to_space(hx);
  poison(net.output_gradient());
  const auto y = to_host(net.forward(x, ex));
  finish(ex);

  std::vector<std::vector<double>> p;
  net.for_each_parameter([&](const nn::parameter_slot&, auto values, auto) { p.push_back(host_values(values)); });
  REQUIRE(p.size() == 6);
  std::vector<double> a(hx.data(), hx.data() + hx.size());
  for (auto& v : a) v = double(convert<float>(convert<storage_t<P>>(float(v))));  // the input as the network stores it
  a = dense(a, batch, 20, 16, p[0], p[1], 1);
  a = dense(a, batch, 16, 12, p[2], p[3], 2);
  a = dense(a, batch, 12, 5, p[4], p[5], 0);
  REQUIRE(y.extent(0) == batch);
  for (index_t i = 0; i < y.size(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(double(convert<float>(y.data()[i])) - a[std::size_t(i)]) <= tolerance * std::fmax(1.0, std::fabs(a[std::size_t(i)])));
  }
}
}  // namespace

FUSOR_TEST_CASE("network: forward of an MLP against a double loop, fp32 and bf16") {
  check_forward<fp32>(2e-5);
  check_forward<bf16>(4e-2);
}

FUSOR_TEST_CASE("network: parameters in one aligned flat buffer per element type, named as PyTorch") {
  nn::network<mlp, fp32, space> net(8, {.seed = 9});
  std::vector<std::string> names;
  index_t previous_end = 0;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto values, auto gradients) {
    names.push_back(slot.name);
    CHECK(slot.offset % nn::parameter_alignment == 0);
    CHECK(slot.offset >= previous_end);
    previous_end = slot.offset + slot.size;
    CHECK(values.size() == slot.size);
    CHECK(gradients.size() == slot.size);
  });
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"});
  CHECK(net.parameter_count() == 20 * 16 + 16 + 16 * 12 + 12 + 12 * 5 + 5);
  // Same seed, same values; another seed, other values; bounds 1/sqrt(fan_in).
  nn::network<mlp, fp32, space> same(8, {.seed = 9}), other(8, {.seed = 10});
  const auto a = host_values(net.group<float>().values());
  const auto b = host_values(same.group<float>().values());
  const auto c = host_values(other.group<float>().values());
  CHECK(a == b);
  CHECK(a != c);
  const auto& first = net.group<float>().slots()[0];
  for (index_t i = 0; i < first.size; ++i) CHECK(std::fabs(a[std::size_t(first.offset + i)]) <= 1 / std::sqrt(20.0));
  // Padding between parameters is zero.
  const auto& bias = net.group<float>().slots()[1];
  for (index_t i = first.offset + first.size; i < bias.offset; ++i) CHECK(a[std::size_t(i)] == 0.0);
}

FUSOR_TEST_CASE("softmax_cross_entropy: running loss and accuracy against a double reference") {
  executor ex{};
  const index_t rows = 50, classes = 7;
  host_tensor<float, matrix> hl(rows, classes);
  fill_random(hl, 21, -3, 3);
  host_tensor<std::int32_t, dextents<index_t, 1>> ht(rows);
  for (index_t r = 0; r < rows; ++r) ht(r) = std::int32_t((r * 5 + 3) % classes);
  ht(4) = -100;  // ignored
  const auto logits = to_space(hl);
  const auto labels = to_space(ht);
  space_tensor<float, matrix> dlogits(rows, classes);
  nn::softmax_cross_entropy<space> loss(64);
  loss.reset(ex);
  loss.forward_backward(logits, labels, dlogits, ex);
  loss.evaluate(logits, labels, ex);  // the same batch again: totals over 2 * 49 rows
  const nn::loss_totals t = loss.totals();

  double sum = 0, correct = 0;
  for (index_t r = 0; r < rows; ++r) {
    if (ht(r) == -100) continue;
    double m = -1e300, z = 0;
    index_t best = 0;
    for (index_t j = 0; j < classes; ++j) {
      if (hl(r, j) > m) m = hl(r, j), best = j;
    }
    for (index_t j = 0; j < classes; ++j) z += std::exp(double(hl(r, j)) - m);
    sum += std::log(z) + m - hl(r, ht(r));
    correct += best == ht(r);
  }
  CHECK(t.samples == 2 * (rows - 1));
  CHECK(std::fabs(t.mean_loss - sum / (rows - 1)) <= 1e-5);
  CHECK(std::fabs(t.accuracy - correct / (rows - 1)) <= 1e-12);

  // A batch of ignored rows only (padding) counts nowhere: its mean loss is 0 / 0, the totals stay.
  host_tensor<std::int32_t, dextents<index_t, 1>> hi(rows);
  for (index_t r = 0; r < rows; ++r) hi(r) = -100;
  const auto ignored = to_space(hi);
  const auto batch_loss = [&](const nn::softmax_cross_entropy<space>& l) {
    finish(ex);
    return to_host(l.loss()).data()[0];
  };
  loss.evaluate(logits, ignored, ex);
  const nn::loss_totals after = loss.totals();
  CHECK(std::isnan(batch_loss(loss)));
  CHECK(after.samples == t.samples);
  CHECK(after.mean_loss == t.mean_loss);
  CHECK(after.accuracy == t.accuracy);

  // Summed batch losses: the totals are still a mean per sample.
  nn::softmax_cross_entropy<space> summed(64, {.reduction = loss_reduction::sum});
  summed.reset(ex);
  summed.evaluate(logits, labels, ex);
  summed.evaluate(logits, labels, ex);
  CHECK(std::fabs(batch_loss(summed) - sum) <= 1e-4);
  CHECK(summed.totals().samples == 2 * (rows - 1));
  CHECK(std::fabs(summed.totals().mean_loss - sum / (rows - 1)) <= 1e-5);

  // Labels outside the classes (not ignore_index) are counted, by a step and an evaluation alike: their loss is
  // NaN, and check_labels_inside says why.
  CHECK(t.labels_outside == 0);
  nn::check_labels_inside(t, "the test set");
  host_tensor<std::int32_t, dextents<index_t, 1>> hb(rows);
  for (index_t r = 0; r < rows; ++r) hb(r) = ht(r);
  hb(0) = std::int32_t(classes);
  hb(1) = -1;
  hb(2) = 1000;
  const auto bad = to_space(hb);
  nn::softmax_cross_entropy<space> outside(64);
  outside.reset(ex);
  outside.evaluate(logits, bad, ex);
  outside.forward_backward(logits, bad, dlogits, ex);
  const nn::loss_totals o = outside.totals();
  CHECK(o.labels_outside == 6);
  CHECK(o.samples == 2 * (rows - 1));
  CHECK(std::isnan(o.mean_loss));
  expect_error<error>([&] { nn::check_labels_inside(o, "the test set"); },
                      {"the test set: 6 of 98 labels lie outside the classes", "ignore index"});
  outside.reset(ex);
  CHECK(outside.totals().labels_outside == 0);
}

FUSOR_TEST_CASE("softmax_cross_entropy: labels that miss a sequence's positions name the shape they need") {
  executor ex{};
  // Logits [batch 2, positions 3, classes 5]: labels [2, 3] (or [6]); [2] is one per sample, a common slip.
  space_tensor<float, dextents<index_t, 3>> logits(2, 3, 5), dlogits(2, 3, 5);
  fill_random(logits, 4);
  space_tensor<std::int32_t, dextents<index_t, 1>> per_sample(2);
  space_tensor<std::int32_t, matrix> transposed(3, 2);
  nn::softmax_cross_entropy<space> loss(6);
  expect_error<shape_error>([&] { loss.forward_backward(logits, per_sample, dlogits, ex); },
                            {"labels of shape [2]", "logits of shape [2, 3, 5]", "shape [2, 3] (or [6], flattened)"});
  expect_error<shape_error>([&] { loss.evaluate(logits, per_sample, ex); }, {"labels of shape [2]"});
  // The same count in another shape is accepted as flattened rows, as [6] is.
  host_tensor<std::int32_t, matrix> h(3, 2);
  for (index_t i = 0; i < 6; ++i) h.data()[i] = std::int32_t(i % 5);
  copy(transposed, h);
  loss.reset(ex);
  loss.evaluate(logits, transposed, ex);
  CHECK(loss.totals().samples == 6);
}

FUSOR_TEST_CASE("load_parameters: a file that does not fit is refused before any parameter changes") {
  // Saved by a network whose head has 3 classes, loaded into one with 5: layers 0 and 1 fit, layer 2 does not.
  using three_classes = nn::sequential<nn::features<20>, nn::linear<20, 16, nn::relu>,
                                       nn::linear<16, 12, nn::gelu_tanh>, nn::linear<12, 3>>;
  const auto file = std::filesystem::temp_directory_path() / ("fusor_head_" FUSOR_TEST_EXECUTOR_NAME ".safetensors");
  nn::network<three_classes, fp32, space> saved(4, {.seed = 1});
  optim::save_parameters(file, saved);
  nn::network<mlp, fp32, space> net(4, {.seed = 2});
  const std::vector<double> before = host_values(net.group<float>().values());
  expect_error<io::checkpoint_error>([&] { optim::load_parameters(file, net); },
                                     {"'2.weight'", "[3, 12]", "[5, 12]"});
  CHECK(host_values(net.group<float>().values()) == before);  // layer 0 was not copied either
  std::filesystem::remove(file);
}

FUSOR_TEST_CASE("load_parameters: a NaN or infinite parameter is refused, naming the tensor and element") {
  nn::network<mlp, fp32, space> saved(4, {.seed = 1});
  const auto file = std::filesystem::temp_directory_path() / ("fusor_nan_" FUSOR_TEST_EXECUTOR_NAME ".safetensors");
  optim::save_parameters(file, saved);
  io::safetensors_file contents = io::checkpoint_reader(file).contents();
  write_edited(contents, file, [](io::tensor_record& t) {
    if (t.name == "1.bias") set_element(t, 3, INFINITY);
    return true;
  });
  nn::network<mlp, fp32, space> net(4, {.seed = 2});
  const std::vector<double> before = host_values(net.group<float>().values());
  expect_error<io::checkpoint_error>([&] { optim::load_parameters(file, net); }, {"'1.bias' element 3 is inf"});
  CHECK(host_values(net.group<float>().values()) == before);
  std::filesystem::remove(file);
}

FUSOR_TEST_CASE("load_parameters: optimizer-like names in a file of parameters alone are unread tensors") {
  // Only a training state (it records its step count) has optimizer state to pass over.
  nn::network<mlp, fp32, space> saved(4, {.seed = 1});
  const auto file = std::filesystem::temp_directory_path() / ("fusor_bogus_" FUSOR_TEST_EXECUTOR_NAME ".safetensors");
  optim::save_parameters(file, saved);
  const io::safetensors_file contents = io::checkpoint_reader(file).contents();
  io::checkpoint_writer writer;
  for (io::tensor_record t : contents.tensors) {
    if (t.name == "1.bias") {
      io::tensor_record extra = t;
      extra.name = "optimizer.bogus";
      writer.add_record(std::move(extra));
    }
    writer.add_record(std::move(t));
  }
  writer.save(file);
  nn::network<mlp, fp32, space> net(4, {.seed = 2});
  const std::vector<double> before = host_values(net.group<float>().values());
  expect_error<io::checkpoint_error>([&] { optim::load_parameters(file, net); },
                                     {"1 tensor", "'optimizer.bogus'", "nothing was loaded"});
  CHECK(host_values(net.group<float>().values()) == before);
  std::filesystem::remove(file);
}

FUSOR_TEST_CASE("load_parameters: a deeper network's file is refused for its extra layer, or loaded in part when told") {
  // Saved by the same layers plus a fourth: "3.weight" and "3.bias" are what `mlp` does not read.
  using deeper = nn::sequential<nn::features<20>, nn::linear<20, 16, nn::relu>, nn::linear<16, 12, nn::gelu_tanh>,
                                nn::linear<12, 5>, nn::linear<5, 7>>;
  const auto file = std::filesystem::temp_directory_path() / ("fusor_deeper_" FUSOR_TEST_EXECUTOR_NAME ".safetensors");
  nn::network<deeper, fp32, space> saved(4, {.seed = 1});
  optim::save_parameters(file, saved);
  nn::network<mlp, fp32, space> net(4, {.seed = 2});
  const std::vector<double> before = host_values(net.group<float>().values());
  expect_error<io::checkpoint_error>([&] { optim::load_parameters(file, net); },
                                     {"2 tensors that this network does not read", "'3.weight'", "'3.bias'",
                                      "nothing was loaded", "unread_tensors::ignore"});
  CHECK(host_values(net.group<float>().values()) == before);

  // Told to ignore them, it loads the first three layers: each of its tensors as the deeper network saved it.
  optim::load_parameters(file, net, optim::unread_tensors::ignore);
  CHECK(host_values(net.group<float>().values()) != before);
  const auto loaded = file.string() + ".loaded";
  optim::save_parameters(loaded, net);
  const io::checkpoint_reader deeper_file(file), loaded_file(loaded);
  REQUIRE(loaded_file.contents().tensors.size() == 6);
  for (const io::tensor_record& t : loaded_file.contents().tensors) {
    INFO(t.name);
    REQUIRE(deeper_file.contains(t.name));
    CHECK(t.bytes == deeper_file.contents().at(t.name).bytes);
  }
  std::filesystem::remove(file);
  std::filesystem::remove(loaded);
}

FUSOR_TEST_CASE("network: batch and input shape errors name both sides") {
  executor ex{};
  nn::network<mlp, fp32, space> net(16, {.seed = 1});
  space_tensor<float, matrix> too_many(17, 20), none(0, 20), wrong_width(4, 21);
  expect_error<shape_error>([&] { net.forward(too_many, ex); }, {"17 samples", "[17, 20]", "takes 1 to 16"});
  expect_error<shape_error>([&] { net.forward(none, ex); }, {"0 samples", "[0, 20]", "takes 1 to 16"});
  expect_error<shape_error>([&] { net.forward(wrong_width, ex); }, {"[4, 21]", "4 samples of [20] each"});
  expect_error<error>([&] { net.backward(ex); }, {"call forward first"});
}
