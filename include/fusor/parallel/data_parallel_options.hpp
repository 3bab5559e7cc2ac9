// fusor/parallel/data_parallel_options.hpp — what a user chooses for data
// parallelism (parallel/data_parallel.hpp) and what it reports back: the memory
// each rank holds and when, within the last step, each bucket was communicated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusor/core/extents.hpp"

namespace fusor::parallel {

/// How data parallelism hands gradients to the collectives (data_parallel_options::communication).
enum class gradient_communication {
  native,    ///< the gradients' own element type
  bf16,      ///< half the bytes of fp32: rounded to bf16 for the collective, read back in fp32
  powersgd,  ///< weight matrices as rank-r factors with error feedback (parallel/powersgd.hpp)
};

/// PowerSGD's settings (gradient_communication::powersgd).
struct powersgd_options {
  int rank = 4;                ///< r: the factors' columns; more is closer to the exact sum, and more bytes
  index_t warmup_steps = 0;    ///< steps communicated uncompressed first
  std::uint64_t seed = 20190;  ///< Q's first values (the same on every rank)
};

/// What a user chooses for data parallelism (parallel::data_parallel): bucket size, overlap, micro-batches,
/// how gradients are communicated, and ZeRO sharding.
struct data_parallel_options {
  index_t bucket_bytes = index_t{1} << 20;  ///< bytes as communicated; a layer larger than this is a bucket alone
  bool overlap = true;  ///< start a bucket's collective as soon as backward has produced it (false: after backward)
  index_t micro_batches = 1;  ///< each rank's share of the batch runs in this many pieces; communicate after the last
  gradient_communication communication = gradient_communication::native;  ///< native, bf16 or PowerSGD
  bool shard_optimizer_state = false;  ///< ZeRO-1: each rank keeps and updates 1/ranks of the optimizer state
  powersgd_options powersgd = {};      ///< with communication = powersgd
  /// ZeRO-2: the gradients too. Each bucket's gradients live in one of two
  /// bucket-sized slabs only until its reduce_scatter has read them; each rank
  /// keeps its shard of the sum (implies shard_optimizer_state).
  bool shard_gradients = false;
  /// ZeRO-3: the parameters too (implies shard_gradients). Each rank keeps its
  /// shard; a bucket's parameters are all-gathered into one of two slabs just
  /// before its layers run, forward and backward, the next bucket's gather
  /// started meanwhile. Not with tied parameters.
  bool shard_parameters = false;
};

/// Bytes held on one rank (data_parallel::memory()).
struct memory_report {
  index_t parameters = 0;       ///< the network's parameter values (ZeRO-3: this rank's shard and two bucket slabs)
  index_t gradients = 0;        ///< the network's gradients (ZeRO-2: two bucket slabs and this rank's shard of the
                                ///<   sum), and the fp32 sums of micro-batches (micro_batches > 1)
  index_t optimizer_state = 0;  ///< moments and master weights: this rank's shard under ZeRO-1
  index_t communication = 0;    ///< copies communication needs: bf16 or padded gradients, gradient and parameter shards
  /// Of `parameters` and `gradients` above, the bucket slabs ZeRO-2/3 gather parameters into and reduce gradients
  /// from (two a kind): the ZeRO paper's "temporary buffers", whose size is the largest bucket's, not 1/N.
  index_t slabs = 0;
  /// Every byte above, summed (`slabs` are inside `parameters` and `gradients`, counted once).
  index_t total() const { return parameters + gradients + optimizer_state + communication; }
  /// The model states the ZeRO paper's formulas count (Rajbhandari et al. 2020, section 5: 16 Psi / N bytes for
  /// ZeRO-3 with fp32 AdamW): everything but the slabs.
  index_t model_states() const { return total() - slabs; }
};

/// One collective of the last step, in seconds since the step began. `completed`
/// is when the host saw it finished (a test() from backward's hook or the final
/// wait); under a stream-ordered communicator (nccl) the host never waits, so it
/// may be later than the GPU finished, or -1 if the host never saw it.
struct bucket_record {
  std::size_t group = 0;   ///< parameter group (element type), in the network's order
  std::size_t bucket = 0;  ///< in the group's plan (0: the last layers')
  /// \var lowest_layer
  /// The lowest layer whose gradients the bucket holds.
  /// \var highest_layer
  /// The highest layer whose gradients the bucket holds.
  std::size_t lowest_layer = 0, highest_layer = 0;
  index_t bytes = 0;  ///< handed to the collective
  /// \var issued
  /// When the collective was issued.
  /// \var completed
  /// When the host saw it finished (see above).
  double issued = -1, completed = -1;
};

/// When each part of the last step happened on this rank (data_parallel::timeline()), in seconds since the
/// step began; -1 for a part the step did not have.
struct step_timeline {
  double backward_start = 0;  ///< the last micro-batch's backward: its start
  double backward_end = 0;    ///< the last micro-batch's backward: its end
  std::vector<bucket_record> buckets;  ///< gradient collectives, in the order issued
  /// \var gather_start
  /// ZeRO-1's all-gather of the parameters: its start.
  /// \var gather_end
  /// ZeRO-1's all-gather of the parameters: its end.
  double gather_start = -1, gather_end = -1;
  double compression_end = -1;                ///< PowerSGD: its factors and collectives done (after backward_end)
  double step_end = 0;                        ///< the step's end
};

}  // namespace fusor::parallel
