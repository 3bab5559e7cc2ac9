// fusor/parallel/pipeline_messages.hpp — the point-to-point traffic of one
// pipeline stage (parallel/pipeline.hpp): the activation it receives before a
// forward and sends after it, the gradient it receives before a backward and
// sends after it, and how long the stage waited for its neighbours.
//
// Tags name the micro-batch and the direction (pipeline_tag). Sends are
// non-blocking: each is kept per context and waited for only before that
// context's buffer is written again (its next forward or backward) or at the
// end of the step. The send that follows an action is issued together with the
// receive that precedes the next one, in one group(): NCCL needs that, or two
// stages sending to each other at once would each wait for the other's receive.
// Communicators whose calls are ordered on a CUDA stream (nccl) are never
// waited for on the host: the stream orders them, and idle time stays 0.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "fusor/core/extents.hpp"
#include "fusor/nn/parameters.hpp"
#include "fusor/parallel/pipeline_schedule.hpp"

namespace fusor::parallel {

/// The point-to-point traffic of one pipeline stage: activations forward, gradients back, and the time the
/// stage waited for its neighbours.
template <class Network, class Communicator>
class pipeline_messages {
  using kind = pipeline_action::kind;
  using clock = std::chrono::steady_clock;
  using request_type = decltype(std::declval<Communicator&>().send(
      std::declval<nn::flat_view<float, typename Network::space>>(), 0, 0));

 public:
  /// Whether the communicator's calls are ordered on a CUDA stream (then the executor must run there).
  static constexpr bool stream_ordered = requires(const Communicator& c) { c.stream(); };

  /// The traffic of this rank's stage over `communicator` (rank = stage), with `contexts` micro-batches in flight.
  pipeline_messages(Communicator& communicator, index_t contexts)
      : comm_(communicator), stage_(communicator.rank()), stages_(communicator.size()),
        forward_sends_(std::size_t(contexts)), backward_sends_(std::size_t(contexts)) {}

  /// Before action `a` (a forward) in `net`: that context's last activation must
  /// have left, and the stage's input arrives (stage 0 reads the images instead).
  void receive_input(Network& net, const pipeline_action& a, index_t count) {
    wait_send(forward_sends_[std::size_t(a.context)]);
    std::optional<request_type> incoming;
    {
      [[maybe_unused]] auto group = comm_.group();
      issue_pending_send();
      if (stage_ > 0)
        net.with_stage_input(count, [&](const auto& in) {
          (void)incoming.emplace(comm_.recv(in, stage_ - 1, pipeline_tag(a.micro_batch, kind::forward)));
        });
    }
    if (incoming) wait(*incoming);
  }
  /// Before action `a` (a backward): that context's last input gradient must have
  /// left, and the gradient of the stage's output arrives (the last stage has it
  /// from the loss).
  void receive_output_gradient(Network& net, const pipeline_action& a) {
    wait_send(backward_sends_[std::size_t(a.context)]);
    std::optional<request_type> incoming;
    {
      [[maybe_unused]] auto group = comm_.group();
      issue_pending_send();
      if (stage_ + 1 < stages_)
        net.with_stage_output_gradient([&](const auto& g) {
          (void)incoming.emplace(comm_.recv(g, stage_ + 1, pipeline_tag(a.micro_batch, kind::backward)));
        });
    }
    if (incoming) wait(*incoming);
  }
  /// After action `a` in `net`: what it produced goes to the neighbour, issued
  /// with the next receive (or by finish()). Nothing leaves the last stage's
  /// forward or stage 0's backward.
  void send_after(Network& net, const pipeline_action& a) {
    const bool forward = a.what == kind::forward;
    if (forward ? stage_ + 1 < stages_ : stage_ > 0) pending_ = {&net, a};
  }
  /// The last send issued and every send waited for: the step is over.
  void finish() {
    if (pending_.network != nullptr) {
      [[maybe_unused]] auto group = comm_.group();
      issue_pending_send();
    }
    for (auto* sends : {&forward_sends_, &backward_sends_})
      for (auto& request : *sends) wait_send(request);
  }

  /// request.wait(), its time counted as waiting for a peer (nothing under a stream-ordered communicator).
  template <class Request>
  void wait(Request& request) {
    if constexpr (stream_ordered) return;  // the stream orders it; the host goes on
    const auto start = clock::now();
    request.wait();
    idle_seconds_ += std::chrono::duration<double>(clock::now() - start).count();
  }
  /// Seconds the host waited for peers since reset_idle().
  double idle_seconds() const { return idle_seconds_; }
  /// Restarts the idle count (a step does, at its start).
  void reset_idle() { idle_seconds_ = 0; }
  /// Micro-batches (sets of activations) the stage holds in flight.
  index_t contexts() const { return index_t(forward_sends_.size()); }

 private:
  void issue_pending_send() {
    if (pending_.network == nullptr) return;
    // Named, not a structured binding: clang before 16 cannot capture one in the lambdas below.
    const pending_send send = std::exchange(pending_, {});
    Network* const net = send.network;
    const pipeline_action& a = send.action;
    const std::size_t c = std::size_t(a.context);
    if (a.what == kind::forward)
      net->with_stage_output([&](const auto& out) {
        (void)forward_sends_[c].emplace(comm_.send(out, stage_ + 1, pipeline_tag(a.micro_batch, kind::forward)));
      });
    else
      net->with_stage_input_gradient([&](const auto& g) {
        (void)backward_sends_[c].emplace(comm_.send(g, stage_ - 1, pipeline_tag(a.micro_batch, kind::backward)));
      });
  }
  void wait_send(std::optional<request_type>& request) {
    if (request) wait(*request);
    request.reset();
  }

  struct pending_send {
    Network* network = nullptr;
    pipeline_action action;
  };
  Communicator& comm_;
  int stage_, stages_;
  std::vector<std::optional<request_type>> forward_sends_, backward_sends_;  // per context
  pending_send pending_;
  double idle_seconds_ = 0;
};

}  // namespace fusor::parallel
