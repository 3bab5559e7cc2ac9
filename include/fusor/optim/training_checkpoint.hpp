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
// step scalars as "controller.<name>", a pruned trainer's masks as
// "pruning.<group>.mask", and the trainer's host step count in the metadata,
// so training resumed from a checkpoint repeats exactly the losses of training
// that never stopped (same data order, same dropout masks, same pruning).
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "fusor/io/checkpoint.hpp"
#include "fusor/nn/network.hpp"
#include "fusor/optim/checkpoint_refusals.hpp"
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

inline constexpr const char* steps_key = "fusor.steps_taken";
inline constexpr const char* seed_key = "fusor.seed";
// The families of tensors a trainer saves besides the parameters: load_parameters passes over them.
inline constexpr std::string_view training_state_families[] = {"optimizer.", "controller.", "pruning."};

// Whether `Trainer` prunes (optim::trainer): its masks are part of its training state.
template <class Trainer>
inline constexpr bool keeps_pruning = requires(Trainer& t) { t.unpruned_masks(); };

// The caller's metadata of `reader`: without fusor's own keys.
inline std::map<std::string, std::string> caller_metadata(const io::checkpoint_reader& reader) {
  std::map<std::string, std::string> mine;
  for (const auto& [key, value] : reader.contents().metadata)
    if (!key.starts_with("fusor.")) mine.emplace(key, value);
  return mine;
}

// The tensors of `reader` outside `read`, but for names starting with one of `passed_over` (in the file's order).
inline std::vector<std::string> unread_names(const io::checkpoint_reader& reader, const std::set<std::string>& read,
                                             std::span<const std::string_view> passed_over = {}) {
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
  network.for_each_parameter(
      [&](const nn::parameter_slot& slot, const auto&, const auto&) { names.insert(slot.name); });
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
    check_values(record, domain, steps_taken, source, steps_key);
  };
  std::set<std::string> read = parameter_names(trainer.network());
  trainer.for_each_state([&](const std::string& name, const auto&) { read.insert(name); });
  if constexpr (keeps_pruning<Trainer>) {  // the masks a pruned trainer saves, pruned or not now
    std::size_t group = 0;
    trainer.for_each_optimizer([&](const auto&...) { read.insert(Trainer::pruning_mask_name(group++)); });
  }
  const std::vector<std::string> extra = unread_names(reader, read);
  try {
    check_parameters(reader, trainer.network(), [&](const std::string& name, const io::tensor_record& record) {
      check(name, record, state_domain::finite);
    });
    trainer.for_each_state([&](const std::string& name, const auto& v, state_domain domain) {
      check(name, reader.check(name, v), domain);
    });
  } catch (const io::checkpoint_error& e) {
    // A larger network's optimizer state is larger too (one flat tensor per group): name the layers behind it.
    if (extra.empty()) throw;
    throw io::checkpoint_error(std::string(e.what()) + "; the file also holds " + std::to_string(extra.size()) +
                               " tensor(s) this trainer does not read, first '" + extra.front() +
                               "' (saved by another network? its parameters alone load with load_parameters and "
                               "unread_tensors::ignore)");
  }
  refuse_unread(extra, unread, "fusor: checkpoint '" + reader.file().string() + "'", "this trainer does not read");
}
// The seed of the network that saved `reader`, where the network draws random numbers (dropout): another
// seed would draw other masks, so resumed training would not repeat the losses. (Older files have none.)
template <class Network>
void check_seed(const io::checkpoint_reader& reader, const Network& network) {
  if constexpr (Network::draws_random_numbers) {
    if (reader.contents().metadata.count(seed_key) == 0) return;
    const auto seed = reader.metadata_number<std::uint64_t>(seed_key);
    if (seed != network.seed())
      throw seed_mismatch("fusor: checkpoint '" + reader.file().string() + "'", seed, network.seed());
  }
}
// The pruning masks `reader` holds, checked (one per group, each element 0 or 1) and copied into masks of
// `trainer`'s groups, which it does not change yet; none where the file holds none (saved unpruned).
template <class Trainer>
auto read_pruning_masks(const io::checkpoint_reader& reader, Trainer& trainer) {
  decltype(trainer.unpruned_masks()) masks;
  for (const io::tensor_record& t : reader.contents().tensors)
    if (t.name.starts_with("pruning.")) {
      masks = trainer.unpruned_masks();
      break;
    }
  for (std::size_t k = 0; k < masks.size(); ++k) {
    const std::string name = Trainer::pruning_mask_name(k);
    check_values(reader.check(name, masks[k].mask()), state_domain::zero_or_one, 0,
                 "fusor: checkpoint '" + reader.file().string() + "': tensor '" + name + "'", steps_key);
  }
  for (std::size_t k = 0; k < masks.size(); ++k) reader.read(Trainer::pruning_mask_name(k), masks[k].mask());
  return masks;
}
}  // namespace detail

/// The parameters alone (for inference, or PyTorch); `metadata`: the caller's strings (keys starting "fusor."
/// are reserved).
template <class Network>
void save_parameters(const std::filesystem::path& file, const Network& network,
                     const std::map<std::string, std::string>& metadata = {}) {
  detail::check_caller_metadata(metadata, "fusor::optim::save_parameters");
  io::checkpoint_writer writer;
  detail::add_parameters(writer, network);
  for (const auto& [k, v] : metadata) writer.add_metadata(k, v);
  writer.save(file);
}
/// Reads every parameter of `network` from `file` by name and logical shape, as save_parameters writes them
/// (save_training_state's files too: their optimizer state, step scalars and pruning masks, "optimizer.*",
/// "controller.*" and "pruning.*", are passed over; in a file without a step count they are unread tensors).
/// Throws io::checkpoint_error, the network unchanged, for a missing tensor, a different element type or shape, a
/// value that is Inf or NaN, or (unless `unread` is ignore) a tensor the network does not read. A trainer of 16-bit
/// parameters keeps fp32 master weights: load before trainer.initialize(), which copies the parameters into them
/// (or call it again after), else the next step starts from the master weights of before.
template <class Network>
void load_parameters(const std::filesystem::path& file, Network& network,
                     unread_tensors unread = unread_tensors::refuse) {
  const io::checkpoint_reader reader(file);
  detail::check_parameters(reader, network, [&](const std::string& name, const io::tensor_record& record) {
    detail::check_values(record, state_domain::finite, 0,
                         "fusor: checkpoint '" + file.string() + "': tensor '" + name + "'", detail::steps_key);
  });
  // A training state's optimizer, controller and pruning tensors are passed over; in a file of parameters alone
  // (no step count: save_parameters or another program) such names are tensors like any other.
  const bool training_state = reader.contents().metadata.count(detail::steps_key) != 0;
  detail::refuse_unread(detail::unread_names(reader, detail::parameter_names(network),
                                            training_state ? std::span<const std::string_view>(
                                                                 detail::training_state_families)
                                                           : std::span<const std::string_view>()),
                        unread, "fusor: checkpoint '" + file.string() + "'", "this network does not read");
  detail::read_parameters(reader, network);
}

/// Parameters, optimizer state, step scalars, pruning masks (once pruned), the host step count and the network's
/// seed; `metadata`: the caller's own strings (keys starting "fusor." are reserved).
template <class Trainer>
void save_training_state(const std::filesystem::path& file, Trainer& trainer,
                         const std::map<std::string, std::string>& metadata = {}) {
  detail::check_caller_metadata(metadata, "fusor::optim::save_training_state");
  io::checkpoint_writer writer;
  detail::add_parameters(writer, trainer.network());
  trainer.for_each_state([&](const std::string& name, const auto& v) { writer.add(name, v); });
  if constexpr (detail::keeps_pruning<Trainer>)
    trainer.for_each_pruning_mask([&](const std::string& name, const auto& mask) { writer.add(name, mask); });
  writer.add_metadata(detail::steps_key, std::to_string(trainer.steps_taken()));
  writer.add_metadata(detail::seed_key, std::to_string(trainer.network().seed()));
  for (const auto& [k, v] : metadata) writer.add_metadata(k, v);
  writer.save(file);
}
/// Bytes that save_training_state(file, trainer) writes, about: every
/// parameter, every optimizer and controller state tensor and every pruning
/// mask at its element size, plus 64 KiB for the header (names, shapes, metadata). What
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
  if constexpr (detail::keeps_pruning<Trainer>)
    trainer.for_each_pruning_mask([&](const std::string&, const auto& mask) { bytes += std::uint64_t(mask.size()); });
  return bytes;
}

/// Restores what save_training_state wrote into `trainer` and its network.
/// Returns the metadata, for the caller's own keys (the epoch, say). Throws
/// io::checkpoint_error, with the trainer unchanged, for a file that lacks a
/// tensor, holds one of another dtype or shape, or holds values a trainer never
/// saves (outside each state's state_domain: Inf or NaN, a negative step count,
/// a loss scale not above 0, a negative second moment), was saved by a network
/// of another seed whose layers draw random numbers (dropout), or (unless
/// `unread` is ignore) holds a tensor the trainer does not read: another
/// optimizer's state. (Another network's optimizer state has another size: it
/// never loads; load_parameters with ignore takes the parameters.) The
/// returned metadata holds the caller's keys only (fusor's start "fusor.").
/// From then on the trainer prunes as the saving one did: with the file's
/// masks, or, where the file holds none, not at all.
template <class Trainer>
std::map<std::string, std::string> load_training_state(const std::filesystem::path& file, Trainer& trainer,
                                                       unread_tensors unread = unread_tensors::refuse) {
  const io::checkpoint_reader reader(file);
  if (reader.contents().metadata.count(detail::steps_key) == 0)
    throw io::checkpoint_error("fusor: checkpoint '" + file.string() + "' has no metadata '" + detail::steps_key +
                               "': it is not a training state (a file of save_parameters? load it with "
                               "load_parameters)");
  const auto steps_taken = reader.metadata_number<std::uint64_t>(detail::steps_key);
  detail::check_seed(reader, trainer.network());
  detail::check_training_state(reader, trainer, steps_taken, unread);
  if constexpr (detail::keeps_pruning<Trainer>) {
    auto masks = detail::read_pruning_masks(reader, trainer);  // checked before the trainer changes
    detail::read_parameters(reader, trainer.network());
    trainer.replace_pruning(std::move(masks));  // none: the saving trainer did not prune, nor does this one now
  } else {
    detail::read_parameters(reader, trainer.network());
  }
  trainer.for_each_state([&](const std::string& name, const auto& v) { reader.read(name, v); });
  trainer.set_steps_taken(steps_taken);
  return detail::caller_metadata(reader);
}

}  // namespace fusor::optim
