// fusor/optim/training_checkpoint.hpp — a network's parameters, and what its
// trainer resumes from, to and from safetensors files (io/checkpoint.hpp:
// written atomically, so a crash mid-save leaves the previous file intact).
//
//   optim::save_parameters("mlp.safetensors", net);          // loads in PyTorch:
//       # model = nn.Sequential(...); model.load_state_dict(safetensors.torch.load_file(...), strict=False)
//   optim::save_training_state("run.safetensors", trainer, {{"epoch", "3"}});
//   optim::load_training_state("run.safetensors", trainer);  // parameters, optimizer state, step scalars
//   optim::load_parameters("run.safetensors", net);          // the parameters alone (for inference)
//
// Every load checks the whole file before it copies anything, and refuses
// tensors it does not read unless told to ignore them (unread_tensors.hpp).
// Parameters are stored under their network names ("0.weight") in their
// logical shapes; optimizer state as "optimizer.<group>.<name>" (flat), the
// step scalars as "controller.<name>", and the trainer's host step count in the
// metadata, so training resumed from a checkpoint repeats exactly the losses
// of training that never stopped (same data order, same dropout masks).
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "fusor/io/checkpoint.hpp"
#include "fusor/nn/network.hpp"
#include "fusor/optim/checkpoint_values.hpp"
#include "fusor/optim/state_domain.hpp"
#include "fusor/optim/unread_tensors.hpp"

namespace fusor::optim {

namespace detail {
// fn(view of the slot in its logical shape), rank 1 to 4.
template <class Flat, class Fn>
void with_parameter_shape(const nn::parameter_slot& slot, const Flat& flat, Fn&& fn) {
  using E = typename Flat::element_type;
  using S = typename Flat::space;
  const auto& s = slot.shape;
  switch (s.size()) {
    case 1: return fn(view<E, dextents<index_t, 1>, row_major, S>(flat.data(), s[0]));
    case 2: return fn(view<E, dextents<index_t, 2>, row_major, S>(flat.data(), s[0], s[1]));
    case 3: return fn(view<E, dextents<index_t, 3>, row_major, S>(flat.data(), s[0], s[1], s[2]));
    case 4: return fn(view<E, dextents<index_t, 4>, row_major, S>(flat.data(), s[0], s[1], s[2], s[3]));
    default: throw error("fusor: parameter '" + slot.name + "' has rank " + std::to_string(s.size()) + "; checkpoints store ranks 1 to 4");
  }
}

template <class Network>
void add_parameters(io::checkpoint_writer& writer, const Network& network) {
  network.for_each_parameter([&](const nn::parameter_slot& slot, const auto& values, const auto&) {
    with_parameter_shape(slot, values, [&](const auto& v) { writer.add(slot.name, v); });
  });
}
// Refuses, before anything is copied, a parameter of `network` that `reader` lacks or holds in another dtype or
// shape; fn(name, record) for each, for a caller that checks the values too.
template <class Network, class Fn>
void check_parameters(const io::checkpoint_reader& reader, Network& network, Fn&& fn) {
  network.for_each_parameter([&](const nn::parameter_slot& slot, const auto& values, const auto&) {
    with_parameter_shape(slot, values, [&](const auto& v) { fn(slot.name, reader.check(slot.name, v)); });
  });
}
template <class Network>
void read_parameters(const io::checkpoint_reader& reader, Network& network) {
  network.for_each_parameter([&](const nn::parameter_slot& slot, const auto& values, const auto&) {
    with_parameter_shape(slot, values, [&](const auto& v) { reader.read(slot.name, v); });
  });
}

// The tensors of `reader` outside `read`, but for names starting with one of `passed_over` (in the file's order).
inline std::vector<std::string> unread_names(const io::checkpoint_reader& reader, const std::set<std::string>& read,
                                             std::initializer_list<std::string_view> passed_over = {}) {
  std::vector<std::string> unread;
  for (const io::tensor_record& t : reader.contents().tensors) {
    bool passed = read.count(t.name) != 0;
    for (const std::string_view prefix : passed_over) passed = passed || t.name.starts_with(prefix);
    if (!passed) unread.push_back(t.name);
  }
  return unread;
}
template <class Network>
std::set<std::string> parameter_names(const Network& network) {
  std::set<std::string> names;
  network.for_each_parameter([&](const nn::parameter_slot& slot, const auto&, const auto&) { names.insert(slot.name); });
  return names;
}

// Refuses, before anything is copied (a refused file leaves the trainer as it was), every tensor the trainer
// would read that is missing or of another dtype or shape, or holds values outside its domain
// (checkpoint_values.hpp).
template <class Trainer>
void check_training_state(const io::checkpoint_reader& reader, Trainer& trainer, std::uint64_t steps_taken,
                          unread_tensors unread) {
  const auto check = [&](const std::string& name, const io::tensor_record& record, state_domain domain) {
    const std::string source = "fusor: checkpoint '" + reader.file().string() + "': tensor '" + name + "'";
    check_values(record, domain, steps_taken, source, "fusor.steps_taken");
  };
  check_parameters(reader, trainer.network(), [&](const std::string& name, const io::tensor_record& record) {
    check(name, record, state_domain::finite);
  });
  std::set<std::string> read = parameter_names(trainer.network());
  trainer.for_each_state([&](const std::string& name, const auto& v, state_domain domain) {
    check(name, reader.check(name, v), domain);
    read.insert(name);
  });
  refuse_unread(unread_names(reader, read), unread, "fusor: checkpoint '" + reader.file().string() + "'",
                "this trainer does not read");
}
}  // namespace detail

/// The parameters alone (for inference, or PyTorch).
template <class Network>
void save_parameters(const std::filesystem::path& file, const Network& network,
                     const std::map<std::string, std::string>& metadata = {}) {
  io::checkpoint_writer writer;
  detail::add_parameters(writer, network);
  for (const auto& [k, v] : metadata) writer.add_metadata(k, v);
  writer.save(file);
}
/// Reads every parameter of `network` from `file` by name and logical shape, as save_parameters writes them
/// (save_training_state's files too: their optimizer and step state, "optimizer.*" and "controller.*", is passed
/// over). Throws io::checkpoint_error, the network unchanged, for a missing tensor, a different element type or
/// shape, or (unless `unread` is ignore) a tensor the network does not read.
template <class Network>
void load_parameters(const std::filesystem::path& file, Network& network, unread_tensors unread = unread_tensors::refuse) {
  const io::checkpoint_reader reader(file);
  detail::check_parameters(reader, network, [](const std::string&, const io::tensor_record&) {});
  detail::refuse_unread(detail::unread_names(reader, detail::parameter_names(network), {"optimizer.", "controller."}),
                        unread, "fusor: checkpoint '" + file.string() + "'", "this network does not read");
  detail::read_parameters(reader, network);
}

/// Parameters, optimizer state, step scalars and the host step count.
template <class Trainer>
void save_training_state(const std::filesystem::path& file, Trainer& trainer,
                         const std::map<std::string, std::string>& metadata = {}) {
  io::checkpoint_writer writer;
  detail::add_parameters(writer, trainer.network());
  trainer.for_each_state([&](const std::string& name, const auto& v) { writer.add(name, v); });
  writer.add_metadata("fusor.steps_taken", std::to_string(trainer.steps_taken()));
  for (const auto& [k, v] : metadata) writer.add_metadata(k, v);
  writer.save(file);
}
/// Bytes that save_training_state(file, trainer) writes, about: every
/// parameter and every optimizer and controller state tensor at its element
/// size, plus 64 KiB for the header (names, shapes, metadata). What
/// io::check_destination needs to prove a save will fit before training starts.
template <class Trainer>
std::uint64_t training_state_bytes(Trainer& trainer) {
  std::uint64_t bytes = std::uint64_t(1) << 16;
  trainer.network().for_each_group([&](const auto& group) {
    bytes += std::uint64_t(group.size()) * sizeof(typename std::remove_cvref_t<decltype(group)>::element_type);
  });
  trainer.for_each_state([&](const std::string&, const auto& v) {
    bytes += std::uint64_t(v.size()) * sizeof(typename std::remove_cvref_t<decltype(v)>::element_type);
  });
  return bytes;
}

/// Restores what save_training_state wrote into `trainer` and its network.
/// Returns the metadata, for the caller's own keys (the epoch, say). Throws
/// io::checkpoint_error, with the trainer unchanged, for a file that lacks a
/// tensor, holds one of another dtype or shape, or holds values a trainer never
/// saves (outside each state's state_domain: Inf or NaN, a negative step count,
/// a loss scale not above 0, a negative second moment), or (unless `unread` is
/// ignore) a tensor the trainer does not read: another network's layers,
/// another optimizer's state.
template <class Trainer>
std::map<std::string, std::string> load_training_state(const std::filesystem::path& file, Trainer& trainer,
                                                       unread_tensors unread = unread_tensors::refuse) {
  const io::checkpoint_reader reader(file);
  const auto steps_taken = reader.metadata_number<std::uint64_t>("fusor.steps_taken");
  detail::check_training_state(reader, trainer, steps_taken, unread);
  detail::read_parameters(reader, trainer.network());
  trainer.for_each_state([&](const std::string& name, const auto& v) { reader.read(name, v); });
  trainer.set_steps_taken(steps_taken);
  return reader.contents().metadata;
}

}  // namespace fusor::optim
