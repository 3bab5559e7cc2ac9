// tests/nn/test_composition_support.hpp — what the composition tests share:
// parameters read and written by name across networks of any precision and
// space, activations as doubles, and elementwise comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "support/fusor_test.hpp"

#include <fusor/nn/network.hpp>

namespace composition_test {

using namespace fusor;
using namespace fusor_test;
using values = std::vector<double>;

struct parameter_record {
  values data, gradient;
};
template <class Net>
std::map<std::string, parameter_record> parameters_of(const Net& net) {
  std::map<std::string, parameter_record> out;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto v, auto g) { out[slot.name] = {as_doubles(v), as_doubles(g)}; });
  return out;
}
template <class Net>
std::vector<std::string> parameter_names(const Net& net) {
  std::vector<std::string> names;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto, auto) { names.push_back(slot.name); });
  return names;
}

// Sets every parameter of `net` to the values of `from` under the name
// rename(name) (rounded to the network's element type).
template <class Net>
void set_parameters(Net& net, const std::map<std::string, parameter_record>& from,
                    const std::function<std::string(const std::string&)>& rename = [](const std::string& n) { return n; }) {
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto v, auto) {
    using element = typename decltype(v)::element_type;
    const values& source = from.at(rename(slot.name)).data;
    REQUIRE(index_t(source.size()) == v.size());
    host_tensor<element, nn::flat_extents> h(nn::flat_extents(v.size()));
    for (index_t i = 0; i < v.size(); ++i) h.data()[i] = convert<element>(source[std::size_t(i)]);
    copy(v, h.view());
  });
}

// "0.1.weight" -> "1.weight": the name one level of nesting further out.
inline std::string drop_prefix(const std::string& name) { return name.substr(name.find('.') + 1); }

// Random values of a shape in [-1.5, 1.5), as a host tensor of P and as doubles (the stored values).
template <class P, class Extents>
host_tensor<P, Extents> random_host(const Extents& e, std::uint32_t seed, values& stored) {
  host_tensor<P, Extents> h(e);
  fill_random(h, seed, -1.5, 1.5);
  stored = as_doubles(h);
  return h;
}

}  // namespace composition_test
