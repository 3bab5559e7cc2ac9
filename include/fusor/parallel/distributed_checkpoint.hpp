// fusor/parallel/distributed_checkpoint.hpp — a training run saved by every
// rank of a mesh, each rank its own part, and resumed on any other mesh
// (issue 14): 8 ranks as 2 (data) x 2 (tensor) x 2 (pipeline) save; 1 rank, or
// 8 as 4 x 1 x 2, load and train on.
//
//   fusor::comm::mpi world;
//   parallel::mesh grid(world, {.data = 2, .tensor = 2, .pipeline = 2});
//   ... a trainer over the mesh: parallel::pipeline, parallel::data_parallel or optim::trainer ...
//   parallel::save_distributed("run/step-1200", train, world, parallel::checkpoint_rank_of(grid), "step-1200",
//                              {{"epoch", "3"}}, ex);                  // every rank; collective
//   ...
//   train.initialize(ex);                                           // then, on any mesh:
//   auto meta = parallel::load_distributed("run/step-1200", train, world, parallel::checkpoint_rank_of(grid), ex);
//
// What is saved, under the names of the whole, unsplit network (so the files
// do not depend on the mesh, and a plain optim::trainer on one process reads
// them): each parameter ("3.weight", in its unsplit shape), each parameter's
// optimizer state ("optimizer.3.weight.exp_avg", the parameter's shape), the
// step scalars ("controller.step"), and in the metadata the steps taken, the
// network's seed (dropout draws by it) and the mesh. Who saves what: a
// parameter and its state by data rank 0 (the data group holds copies), except
// optimizer state that ZeRO-1 shards over the data group, which every data
// rank saves its part of; a tensor-parallel slice by its tensor rank, a
// parameter that every tensor rank holds whole by tensor rank 0; a pipeline
// stage its own layers; the step scalars world rank 0. Under PowerSGD, its
// error feedback and warm start too ("powersgd.3.weight.error", every data
// rank its row; see detail::save_compression_state).
//
// The files are io/sharded_checkpoint.hpp's: one shard per rank, written
// atomically, then (after every rank agreed that its shard is written) the
// manifest by world rank 0, last. A rank whose save fails makes every rank
// throw, naming how many failed, instead of leaving the others waiting.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "fusor/comm/communicator.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/io/file.hpp"
#include "fusor/io/sharded_checkpoint.hpp"
#include "fusor/nn/parameters.hpp"
#include "fusor/optim/checkpoint_refusals.hpp"
#include "fusor/optim/checkpoint_values.hpp"
#include "fusor/optim/state_domain.hpp"
#include "fusor/optim/state_layout.hpp"
#include "fusor/optim/unread_tensors.hpp"
#include "fusor/parallel/mesh.hpp"
#include "fusor/parallel/rank_numbers.hpp"

namespace fusor::parallel {

/// Where this rank sits, for a checkpoint: the mesh's shape and this rank's coordinates.
struct checkpoint_rank {
  mesh_shape shape;     ///< the mesh's shape
  mesh_coordinates at;  ///< this rank's coordinates in it
  /// This rank's world rank under the mesh's layout.
  int world_rank() const { return rank_of(at, shape); }
  /// The ranks of the world: shape.size().
  int world_size() const { return shape.size(); }
};
/// Where this rank sits in `grid`, for save_distributed and load_distributed.
template <class Communicator>
checkpoint_rank checkpoint_rank_of(const mesh<Communicator>& grid) {
  return {grid.shape(), grid.at()};
}
/// One process, or a trainer that is alone in its world.
inline constexpr checkpoint_rank single_process{};

namespace detail {

inline constexpr const char* steps_key = "training.steps_taken";
inline constexpr const char* seed_key = "training.seed";
inline constexpr const char* mesh_key = "training.mesh";
// Marks the saves of save_distributed_latest, the only complete saves it removes.
inline constexpr const char* rolling_key = "training.rolling";

// Whether `id` names a folder right under the root: not empty, not . or .., no separators or spaces.
inline bool is_folder_name(const std::string& id) {
  return !id.empty() && id != "." && id != ".." && id.find_first_of("/\\ \t\r\n") == std::string::npos;
}

inline std::string mesh_text(const mesh_shape& s) {
  return std::to_string(s.data) + "x" + std::to_string(s.tensor) + "x" + std::to_string(s.pipeline);
}

// fn(piece, flat view of its elements) for each piece of one parameter's
// values or state: `state` holds the group's elements [span.begin, span.end)
// from span.at, for each span of `layout`; `place` says where the parameter's
// own elements lie in the whole tensor.
template <class Flat, class Fn>
void for_each_piece(const nn::parameter_slot& slot, const nn::parameter_placement& place,
                    const optim::state_layout& layout, const Flat& state, Fn&& fn) {
  for (const optim::state_span& span : layout.spans) {
    // The parameter's own elements [lo, hi) that this span holds.
    const index_t lo = std::max(span.begin, slot.offset) - slot.offset;
    const index_t hi = std::min(span.end, slot.offset + slot.size) - slot.offset;
    for (const nn::parameter_segment& segment : place.segments) {
      const index_t a = std::max(lo, segment.offset), b = std::min(hi, segment.offset + segment.elements());
      if (a >= b) continue;
      io::tensor_piece piece{place.whole_shape, segment.begin, segment.shape, a - segment.offset, b - a};
      if (piece.first == 0 && piece.count == segment.elements()) piece.count = -1;  // the whole box
      const index_t at = span.at + (slot.offset + a - span.begin);
      fn(piece, Flat(state.data() + at, b - a));
    }
  }
}

// Where the trainer keeps a group's parameters on this rank: the network's
// buffer, or (data_parallel under ZeRO-3) this rank's shard.
template <class Trainer, class Group>
auto parameter_values(Trainer& trainer, const Group& group) {
  if constexpr (requires { trainer.parameter_values(group); }) return trainer.parameter_values(group);
  else return std::pair{group.values(), optim::state_layout::whole(group.size())};
}

// fn(name, piece, flat view, saved_here, domain) for every piece of this rank's
// parameters and optimizer state; saved_here: this rank is the one that saves it;
// domain: the values it can hold (optim/state_domain.hpp).
template <class Trainer, class Fn>
void for_each_trainer_piece(Trainer& trainer, const checkpoint_rank& where, Fn&& fn) {
  const auto& network = trainer.network();
  trainer.for_each_optimizer([&](const auto& group, auto& optimizer, const optim::state_layout& layout) {
    // Named, not a structured binding: clang before 16 cannot capture one in the lambdas below.
    const auto where_values = parameter_values(trainer, group);
    const auto& values = where_values.first;
    const optim::state_layout& values_layout = where_values.second;
    for (const nn::parameter_slot& slot : group.slots()) {
      const nn::parameter_placement place = network.placement(slot);
      const bool tensor_saver = place.split || where.at.tensor == 0;
      for_each_piece(slot, place, values_layout, values, [&](const io::tensor_piece& piece, const auto& v) {
        fn(slot.name, piece, v, tensor_saver && (values_layout.sharded || where.at.data == 0),
           optim::state_domain::finite);
      });
      optimizer.for_each_state([&](const auto& state_name, const auto& state, optim::state_domain domain) {
        const std::string name = "optimizer." + slot.name + "." + std::string(state_name);
        for_each_piece(slot, place, layout, state, [&](const io::tensor_piece& piece, const auto& v) {
          fn(name, piece, v, tensor_saver && (layout.sharded || where.at.data == 0), domain);
        });
      });
    }
  });
}

// PowerSGD's state (data_parallel with communication = powersgd), for each
// weight matrix it compresses: "powersgd.<name>.error", the error feedback E
// of every data rank as one tensor [data ranks, the unsplit parameter's
// shape], each data rank its row; "powersgd.<name>.q", the warm start Q of
// each tensor rank [tensor ranks, columns x r], by data rank 0 (Q is the same
// on every data rank). On another number of data ranks each rank starts from
// the saved E's sum over ranks divided by the new number, so the sum that the
// next step adds to the gradients stays the same; Q is read only where the
// tensor split is the saved one (else the seed's Q: a warm start, not state).
struct ignore_compression_state {
  template <class... Args>
  void operator()(Args&&...) const {}
};
template <class Trainer>
inline constexpr bool keeps_compression_state =
    requires(Trainer& t) { t.for_each_compression_state(ignore_compression_state{}); };

inline std::string error_feedback_name(const nn::parameter_slot& slot) { return "powersgd." + slot.name + ".error"; }
inline std::string warm_start_name(const nn::parameter_slot& slot) { return "powersgd." + slot.name + ".q"; }

// `piece` of a parameter, as data rank `rank`'s row of [ranks, the parameter's shape].
inline io::tensor_piece of_data_rank(io::tensor_piece piece, index_t rank, index_t ranks) {
  piece.global_shape.insert(piece.global_shape.begin(), ranks);
  piece.begin.insert(piece.begin.begin(), rank);
  piece.shape.insert(piece.shape.begin(), 1);
  return piece;
}
// Tensor rank `where.at.tensor`'s row of [tensor ranks, elements].
inline io::tensor_piece of_tensor_rank(const checkpoint_rank& where, index_t elements) {
  return io::tensor_piece::slice({where.shape.tensor, elements}, 0, where.at.tensor, where.shape.tensor);
}
// A compressed matrix's own state: its elements of the group, from 0.
inline optim::state_layout own_elements(const nn::parameter_slot& slot) {
  return {{{slot.offset, slot.offset + slot.size, 0}}, false};
}

template <class Trainer>
void save_compression_state(io::shard_writer& shard, Trainer& trainer, const checkpoint_rank& where) {
  if constexpr (keeps_compression_state<Trainer>) {
    const auto& network = trainer.network();
    trainer.for_each_compression_state([&](const auto&, const nn::parameter_slot& slot, const auto& e, const auto& q) {
      const nn::parameter_placement place = network.placement(slot);
      if (place.split || where.at.tensor == 0)  // an unsplit matrix's E is the same on every tensor rank
        for_each_piece(slot, place, own_elements(slot), e, [&](const io::tensor_piece& piece, const auto& v) {
          shard.add(error_feedback_name(slot), of_data_rank(piece, where.at.data, where.shape.data), v);
        });
      if (where.at.data == 0) shard.add(warm_start_name(slot), of_tensor_rank(where, index_t(q.size())), q);
    });
  }
}

// E and Q from `reader`; E is zero where the checkpoint has none (saved without PowerSGD).
template <class Trainer>
void load_compression_state(const io::sharded_checkpoint_reader& reader, Trainer& trainer, const checkpoint_rank& where) {
  if constexpr (keeps_compression_state<Trainer>) {
    const auto& network = trainer.network();
    trainer.for_each_compression_state([&](const auto&, const nn::parameter_slot& slot, const auto& e, const auto& q) {
      const std::string errors = error_feedback_name(slot);
      const bool saved = reader.contains(errors) && !reader.global_shape(errors).empty();
      const index_t saved_ranks = saved ? reader.global_shape(errors).front() : 0;
      for_each_piece(slot, network.placement(slot), own_elements(slot), e, [&](const io::tensor_piece& piece, const auto& v) {
        if (saved_ranks == where.shape.data) return reader.read(errors, of_data_rank(piece, where.at.data, saved_ranks), v);
        std::vector<float> sum(std::size_t(v.size()), 0.0f), one(sum.size());
        const view<float, dextents<index_t, 1>> one_view(one.data(), index_t(one.size()));
        for (index_t r = 0; r < saved_ranks; ++r) {
          reader.read(errors, of_data_rank(piece, r, saved_ranks), one_view);
          for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += one[i];
        }
        for (float& x : sum) x /= float(where.shape.data);
        copy(v, view<float, dextents<index_t, 1>>(sum.data(), index_t(sum.size())));
      });
      const std::string warm_start = warm_start_name(slot);
      const io::tensor_piece mine = of_tensor_rank(where, index_t(q.size()));
      if (reader.contains(warm_start) && reader.global_shape(warm_start) == mine.global_shape)
        reader.read(warm_start, mine, q);
    });
  }
}

template <class Executor>
void finish_work(const Executor& ex) {
  if constexpr (requires { ex.synchronize(); }) ex.synchronize();
}

inline std::uint64_t parse_unsigned(const std::string& text, const std::filesystem::path& dir, const char* key) {
  std::uint64_t n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc{} || end != text.data() + text.size())
    throw io::checkpoint_error("fusor: sharded checkpoint '" + dir.string() + "': metadata '" + key + "' is '" + text +
                               "', not a whole number");
  return n;
}

// Refuses, before this rank copies anything, every piece it would read (parameters, optimizer state, step
// scalars) that is missing, of another dtype or shape, or holds values outside its domain
// (optim/checkpoint_values.hpp).
template <class Trainer>
void check_pieces(const io::sharded_checkpoint_reader& reader, Trainer& trainer, const checkpoint_rank& where,
                  std::uint64_t steps_taken, const std::filesystem::path& dir) {
  const auto check = [&](const std::string& name, const io::tensor_piece& piece, const auto& v,
                         optim::state_domain domain) {
    // Elements are counted in the piece; where it is not the whole tensor, the message says which piece.
    const bool whole = piece.shape == piece.global_shape && piece.count < 0;
    const std::string at = whole ? std::string()
                                 : " (this rank's piece: the box " + io::shape_text(piece.shape) + " at " +
                                       io::shape_text(piece.begin) +
                                       (piece.count < 0 ? "" : ", from its element " + std::to_string(piece.first)) +
                                       ")";
    optim::detail::check_values(reader.check(name, piece, v), domain, steps_taken,
                                "fusor::parallel::load_distributed: '" + dir.string() + "': tensor '" + name + "'" + at,
                                steps_key);
  };
  for_each_trainer_piece(trainer, where,
                         [&](const std::string& name, const io::tensor_piece& piece, const auto& v, bool,
                             optim::state_domain domain) { check(name, piece, v, domain); });
  trainer.controller().for_each_state([&](const auto& name, const auto& v, optim::state_domain domain) {
    check("controller." + std::string(name), io::tensor_piece::whole({}), v, domain);
  });
}

inline void check_world_matches(int rank, int size, const checkpoint_rank& where, const char* who) {
  if (size != where.world_size() || rank != where.world_rank())
    throw error(std::string(who) + ": the communicator is rank " + std::to_string(rank) + " of " +
                std::to_string(size) + ", but the mesh " + to_string(where.shape) + " places this rank at " +
                std::to_string(where.world_rank()) + " of " + std::to_string(where.world_size()) +
                ": pass the world communicator the mesh was made from");
}

// Everything load_distributed refuses, found before it copies anything: a network of another seed (dropout),
// metadata that is not a number, and check_pieces's faults. Returns the steps taken.
template <class Trainer>
std::uint64_t check_loadable(const io::sharded_checkpoint_reader& reader, Trainer& trainer, const checkpoint_rank& where,
                             const std::filesystem::path& dir) {
  auto& network = trainer.network();
  const std::uint64_t seed = parse_unsigned(reader.metadata(seed_key), dir, seed_key);
  if constexpr (std::remove_cvref_t<decltype(network)>::draws_random_numbers)
    if (seed != network.seed())
      throw optim::detail::seed_mismatch("fusor::parallel::load_distributed: '" + dir.string() + "'", seed,
                                         network.seed());
  const std::uint64_t steps_taken = parse_unsigned(reader.metadata(steps_key), dir, steps_key);
  check_pieces(reader, trainer, where, steps_taken, dir);
  return steps_taken;
}

// For each tensor of `reader` (reader.names()), 1 where this rank reads it or passes over it, else 0. Passed
// over: PowerSGD's state, which a trainer without PowerSGD leaves aside (its error feedback restarts at zero).
template <class Trainer>
std::vector<double> read_here(const io::sharded_checkpoint_reader& reader, Trainer& trainer,
                              const checkpoint_rank& where) {
  std::set<std::string> read;
  for_each_trainer_piece(trainer, where, [&](const std::string& name, const auto&...) { read.insert(name); });
  trainer.controller().for_each_state(
      [&](const auto& name, const auto&) { read.insert("controller." + std::string(name)); });
  const std::vector<std::string> names = reader.names();
  std::vector<double> flags(names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    flags[i] = read.count(names[i]) != 0 || names[i].starts_with("powersgd.") ? 1.0 : 0.0;
  return flags;
}
// Refuses (unless `unread` is ignore) `reader`'s tensors whose `readers` (read_here's flags, summed over the
// ranks that load it) are 0.
inline void refuse_unread(const io::sharded_checkpoint_reader& reader, const std::vector<double>& readers,
                          optim::unread_tensors unread, const std::filesystem::path& dir, const std::string& who) {
  const std::vector<std::string> names = reader.names();
  std::vector<std::string> none;
  for (std::size_t i = 0; i < names.size(); ++i)
    if (readers[i] == 0) none.push_back(names[i]);
  optim::detail::refuse_unread(none, unread, "fusor::parallel::load_distributed: '" + dir.string() + "'", who);
}

// Copies what check_loadable accepted into the trainer.
template <class Trainer, class Executor>
std::map<std::string, std::string> load_checked(const io::sharded_checkpoint_reader& reader, Trainer& trainer,
                                                const checkpoint_rank& where, std::uint64_t steps_taken,
                                                const Executor& ex) {
  for_each_trainer_piece(trainer, where,
                         [&](const std::string& name, const io::tensor_piece& piece, const auto& values, bool,
                             optim::state_domain) { reader.read(name, piece, values); });
  load_compression_state(reader, trainer, where);
  trainer.controller().for_each_state([&](const auto& name, const auto& v) {
    reader.read("controller." + std::string(name), io::tensor_piece::whole({}), v);
  });
  if constexpr (requires { trainer.parameters_loaded(ex); }) trainer.parameters_loaded(ex);
  if constexpr (requires { trainer.replace_pruning({}); }) trainer.replace_pruning({});  // the save held no masks
  trainer.set_steps_taken(steps_taken);
  finish_work(ex);
  return reader.all_metadata();
}

// What every save refuses before it writes: the caller's metadata keys that fusor reserves, and a pruned
// trainer, whose masks a distributed save does not hold (save_training_state does).
template <class Trainer>
void check_savable(const std::map<std::string, std::string>& metadata, const Trainer& trainer, const char* who) {
  optim::detail::check_caller_metadata(metadata, who, {"training.", "fusor."});
  if constexpr (requires { trainer.pruned(); })
    if (trainer.pruned())
      throw error(std::string(who) + ": the trainer prunes, and a distributed checkpoint does not hold pruning "
                  "masks (resumed, it would stop pruning): save with fusor::optim::save_training_state");
}

// save_distributed's work, once its arguments are checked; `metadata` may hold fusor's own keys.
template <class Trainer, class Communicator, class Executor>
void save_shards_and_manifest(const std::filesystem::path& dir, Trainer& trainer, Communicator& world,
                              const checkpoint_rank& where, const std::string& save_id,
                              const std::map<std::string, std::string>& metadata, const Executor& ex) {
  using space = typename std::remove_cvref_t<decltype(trainer.network())>::space;
  rank_numbers<space, Communicator> ranks(world);  // how many ranks failed, agreed by all
  finish_work(ex);
  std::string failure;
  try {
    io::shard_writer shard(dir, where.world_rank(), where.world_size(), save_id);
    for_each_trainer_piece(trainer, where, [&](const std::string& name, const io::tensor_piece& piece,
                                               const auto& values, bool saved_here, optim::state_domain) {
      if (saved_here) shard.add(name, piece, values);
    });
    save_compression_state(shard, trainer, where);
    if (where.world_rank() == 0)
      trainer.controller().for_each_state([&](const auto& name, const auto& v) {
        shard.add("controller." + std::string(name), io::tensor_piece::whole({}), v);
      });
    shard.save();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (const int failed = ranks.count(world, !failure.empty()))
    throw io::checkpoint_error("fusor::parallel::save_distributed: " + std::to_string(failed) + " of " +
                               std::to_string(world.size()) + " ranks could not save their shard of '" + dir.string() +
                               "'" + ranks.failure_note(world, failure) +
                               " (no manifest written: the save is incomplete)");
  if (where.world_rank() == 0) {
    try {
      std::map<std::string, std::string> all = metadata;
      all[steps_key] = std::to_string(trainer.steps_taken());
      all[seed_key] = std::to_string(trainer.network().seed());
      all[mesh_key] = mesh_text(where.shape);
      io::write_manifest(dir, where.world_size(), save_id, all);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  // Nobody returns before the manifest is there (or every rank knows it is not).
  if (ranks.count(world, !failure.empty()) != 0)
    throw io::checkpoint_error("fusor::parallel::save_distributed: writing the manifest of '" + dir.string() +
                               "' failed" + ranks.failure_note(world, failure));
}
}  // namespace detail

/// Saves the trainer's whole state as this rank's shard of checkpoint `dir`,
/// and (world rank 0, once every rank's shard is written) the manifest. A
/// collective over `world` (every rank of the mesh calls it, with the same
/// `save_id`: a word naming this save, such as "step-1200"). `metadata`: the
/// caller's own strings (the epoch, the data position); keys starting
/// "training." or "fusor." are reserved. A pruned optim::trainer is refused:
/// its masks would be lost (save_training_state keeps them).
template <class Trainer, class Communicator, class Executor>
void save_distributed(const std::filesystem::path& dir, Trainer& trainer, Communicator& world,
                      const checkpoint_rank& where, const std::string& save_id,
                      const std::map<std::string, std::string>& metadata, const Executor& ex) {
  detail::check_world_matches(world.rank(), world.size(), where, "fusor::parallel::save_distributed");
  detail::check_savable(metadata, trainer, "fusor::parallel::save_distributed");
  detail::save_shards_and_manifest(dir, trainer, world, where, save_id, metadata, ex);
}

/// Loads checkpoint `dir` (saved by save_distributed on any mesh) into this
/// rank's part of the trainer: its parameters, optimizer state, step scalars and
/// step count. Call it after trainer.initialize(ex). Every rank reads its own
/// pieces (no communication). Throws io::checkpoint_error, this rank's trainer
/// unchanged, where a piece of its parameters, optimizer state or step scalars
/// is missing, of another dtype or shape, or holds values a trainer never saves
/// (optim/checkpoint_values.hpp); PowerSGD's state is read after them. Alone
/// in its world (where.world_size() == 1) it also refuses, unless `unread` is
/// ignore, a checkpoint holding tensors the trainer does not read (another
/// network's layers, another optimizer's state). Returns the save's metadata
/// (the caller's keys, and training.mesh, the mesh it was saved on). A pruned
/// optim::trainer stops pruning: the save holds no masks. On several
/// ranks prefer the overload with the world: a rank that refuses alone would
/// leave the others training into a collective it never joins, and only the
/// ranks together know which tensors none of them reads.
template <class Trainer, class Executor>
std::map<std::string, std::string> load_distributed(const std::filesystem::path& dir, Trainer& trainer,
                                                    const checkpoint_rank& where, const Executor& ex,
                                                    optim::unread_tensors unread = optim::unread_tensors::refuse) {
  detail::finish_work(ex);
  const io::sharded_checkpoint_reader reader(dir);
  const std::uint64_t steps_taken = detail::check_loadable(reader, trainer, where, dir);
  if (where.world_size() == 1)  // alone, this rank reads everything the trainer reads
    detail::refuse_unread(reader, detail::read_here(reader, trainer, where), unread, dir, "this trainer does not read");
  return detail::load_checked(reader, trainer, where, steps_taken, ex);
}

/// load_distributed as a collective over `world` (every rank of the mesh calls
/// it): every rank checks its pieces, then all agree; where any rank refuses,
/// every rank throws io::checkpoint_error naming how many refused, the first of
/// them and its reason (and this rank's), and no rank has loaded anything. Unless `unread` is ignore,
/// every rank also refuses a checkpoint holding tensors that no rank reads (a
/// larger network's layers, another optimizer's state; PowerSGD's state is
/// passed over where the trainer has none). Every rank passes the same `unread`.
template <class Trainer, class Communicator, class Executor>
std::map<std::string, std::string> load_distributed(const std::filesystem::path& dir, Trainer& trainer,
                                                    Communicator& world, const checkpoint_rank& where,
                                                    const Executor& ex,
                                                    optim::unread_tensors unread = optim::unread_tensors::refuse) {
  using space = typename std::remove_cvref_t<decltype(trainer.network())>::space;
  detail::rank_numbers<space, Communicator> ranks(world);  // how many ranks failed, agreed by all
  detail::check_world_matches(world.rank(), world.size(), where, "fusor::parallel::load_distributed");
  detail::finish_work(ex);
  std::optional<io::sharded_checkpoint_reader> reader;
  std::uint64_t steps_taken = 0;
  std::string failure;
  try {
    reader.emplace(dir);
    steps_taken = detail::check_loadable(*reader, trainer, where, dir);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (const int failed = ranks.count(world, !failure.empty()))
    throw io::checkpoint_error("fusor::parallel::load_distributed: " + std::to_string(failed) + " of " +
                               std::to_string(world.size()) + " ranks refused '" + dir.string() + "'" +
                               ranks.failure_note(world, failure) + " (no rank loaded anything)");
  if (unread == optim::unread_tensors::refuse) {  // tensors that no rank reads: every rank finds the same
    std::vector<double> readers = detail::read_here(*reader, trainer, where);
    ranks.all_reduce(world, readers, comm::reduction_op::sum);
    detail::refuse_unread(*reader, readers, unread, dir, "no rank of this trainer reads");
  }
  return detail::load_checked(*reader, trainer, where, steps_taken, ex);
}

// A folder of saves, for a run that saves again and again: each save goes to
// its own subfolder <root>/<save_id>; once it is complete, <root>/latest
// (written atomically) names it, and the older saves of the series are removed
// (other saves under `root`, such as a best model's, are kept). A crash at any
// moment leaves `latest` naming a complete save (or no `latest` before the
// first save finished): never a half-written one, and never none where there was one.
//
//   parallel::save_distributed_latest("run", train, world, where, "epoch-3", {{"epoch", "3"}}, ex);
//   if (const auto last = parallel::latest_distributed_save("run"))
//     parallel::load_distributed(*last, train, world, where, ex);
/// The file under a folder of saves that names its newest complete save.
inline constexpr const char* latest_name = "latest";

/// The newest complete save under `root`, or nothing when no save finished there.
/// Throws io::checkpoint_error where `latest` names no complete save.
inline std::optional<std::filesystem::path> latest_distributed_save(const std::filesystem::path& root) {
  const std::filesystem::path pointer = root / latest_name;
  if (!std::filesystem::exists(pointer)) return std::nullopt;
  const std::vector<std::byte> bytes = io::read_file(pointer);
  std::string id(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();  // written by `echo id > latest`
  if (!detail::is_folder_name(id) || id == latest_name)
    throw io::checkpoint_error("fusor: '" + pointer.string() + "' should name a save folder, but holds '" + id + "'");
  const std::filesystem::path dir = root / id;
  if (!std::filesystem::exists(dir / io::detail::manifest_name))
    throw io::checkpoint_error("fusor: '" + pointer.string() + "' names the save '" + id + "', but '" + dir.string() +
                               "' has no " + io::detail::manifest_name);
  return dir;
}

/// save_distributed into `<root>/<save_id>`; once that is complete, `<root>/latest` names it and older saves
/// under `root` are removed (see above). A collective over `world`. Throws io::checkpoint_error where
/// `save_id` is not a plain folder name or is the latest save's.
template <class Trainer, class Communicator, class Executor>
void save_distributed_latest(const std::filesystem::path& root, Trainer& trainer, Communicator& world,
                             const checkpoint_rank& where, const std::string& save_id,
                             const std::map<std::string, std::string>& metadata, const Executor& ex) {
  if (!detail::is_folder_name(save_id) || save_id == latest_name)
    throw io::checkpoint_error("fusor::parallel::save_distributed_latest: the save id '" + save_id +
                               "' must be a folder name (not '.', '..' or 'latest', no slashes or spaces)");
  detail::check_world_matches(world.rank(), world.size(), where, "fusor::parallel::save_distributed_latest");
  detail::check_savable(metadata, trainer, "fusor::parallel::save_distributed_latest");
  // Every rank reads the same `latest` (the last save's final agreement below orders it).
  const auto previous = latest_distributed_save(root);
  if (previous && previous->filename() == save_id)
    throw io::checkpoint_error("fusor::parallel::save_distributed_latest: '" + save_id +
                               "' is the latest complete save in '" + root.string() +
                               "'; give each save its own id (the step or epoch) so that it is never overwritten");
  using space = typename std::remove_cvref_t<decltype(trainer.network())>::space;
  detail::rank_numbers<space, Communicator> ranks(world);  // how many ranks failed, agreed by all
  std::map<std::string, std::string> marked = metadata;
  marked[detail::rolling_key] = "1";
  detail::save_shards_and_manifest(root / save_id, trainer, world, where, save_id, marked, ex);
  std::string failure;
  if (where.world_rank() == 0) {
    try {
      const std::span<const std::byte> id(reinterpret_cast<const std::byte*>(save_id.data()), save_id.size());
      io::write_file_atomically(root / latest_name, id);
      // Older saves of this series (complete folders whose manifest is marked rolling) go, and so do unfinished
      // saves (shards but no manifest, even where a crash left only a temporary file). Complete saves made
      // otherwise (save_distributed into root/best, say) stay. (Each file's own stale temporaries go when it is
      // written again: io/file.hpp.)
      for (const auto& entry : std::filesystem::directory_iterator(root)) {
        if (!entry.is_directory() || entry.path().filename() == save_id) continue;
        bool remove = false;
        if (std::filesystem::exists(entry.path() / io::detail::manifest_name)) {
          try {  // a manifest that cannot be read is not this series'
            remove = io::sharded_checkpoint_reader(entry.path()).all_metadata().count(detail::rolling_key) != 0;
          } catch (const io::checkpoint_error&) {
          }
        } else {
          for (const auto& file : std::filesystem::directory_iterator(entry.path())) {
            const std::string name = file.path().filename().string();
            remove = remove || name.rfind("shard-", 0) == 0 || name.rfind(".shard-", 0) == 0 ||
                     name.rfind(std::string(".") + io::detail::manifest_name, 0) == 0;
          }
        }
        if (remove) std::filesystem::remove_all(entry.path());
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (ranks.count(world, !failure.empty()) != 0)
    throw io::checkpoint_error("fusor::parallel::save_distributed_latest: '" + (root / save_id).string() +
                               "' is complete, but naming it in '" + (root / latest_name).string() + "' failed" +
                               ranks.failure_note(world, failure));
}

}  // namespace fusor::parallel
