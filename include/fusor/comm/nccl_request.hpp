// fusor/comm/nccl_request.hpp — what comm::nccl's calls return, and the
// bookkeeping that makes waiting for them correct and bounded.
//
// A request is done when its stream has passed the call: a CUDA event recorded
// after NCCL queued it. Inside group() NCCL queues nothing until the outermost
// ncclGroupEnd, so a request made there gets its event only then; the group's
// bookkeeping is per thread, as NCCL's groups are. A request of a group that
// has not ended yet is not done (test() is false) and may not be waited for
// (wait() throws: it would wait for itself).
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0): NCCL calls may
// return ncclInProgress, and nothing further may be queued until
// ncclCommGetAsyncError no longer says so (settle()). Every wait polls the
// event and ncclCommGetAsyncError under the communicator's nccl_watchdog
// (nccl_watchdog.hpp): a failure or the timeout aborts the communicator
// (ncclCommAbort) and throws nccl_error naming the call. Requests share the
// communicator's state, so one aborted or destroyed under them says so.
#pragma once

#include <fusor/config.hpp>

#if !FUSOR_HAS_CUDA
#error "fusor/comm/nccl_request.hpp needs a CUDA translation unit (nvcc)"
#else

#include <cuda_runtime.h>
#include <nccl.h>

#include <fusor/comm/nccl_watchdog.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fusor::comm {
namespace detail {

inline std::string nccl_result_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = std::string(ncclGetErrorString(result));
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
  }
  return text;
}

// What a communicator's requests share with it. `comm` is null once the
// communicator is finalized or aborted; `aborted_because` says why it was aborted.
struct nccl_state {
  ncclComm_t comm = nullptr;
  int rank = 0;
  seconds_d timeout = default_nccl_timeout;
  std::string aborted_because;

  void abort(const std::string& why) noexcept {
    if (comm != nullptr) (void)ncclCommAbort(comm);
    comm = nullptr;
    if (aborted_because.empty()) aborted_because = why;
  }
  void require_usable(const nccl_operation& op) const {
    if (!aborted_because.empty())
      throw nccl_error("fusor::comm::nccl: " + describe(op) + ": the communicator was aborted earlier: " +
                       aborted_because);
    if (comm == nullptr)
      throw nccl_error("fusor::comm::nccl: " + describe(op) + ": the communicator was finalized or moved from");
  }
  // ncclCommGetAsyncError: pending while ncclInProgress, failed on an error.
  poll_status async_status() const {
    if (comm == nullptr) return poll_status::done();  // finalized: every call it had has completed
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
    if (asked != ncclSuccess) return poll_status::failed("ncclCommGetAsyncError: " + nccl_result_text(asked, comm));
    if (state == ncclInProgress) return poll_status::pending();
    if (state != ncclSuccess) return poll_status::failed("NCCL reports " + nccl_result_text(state, comm));
    return poll_status::done();
  }
  // Waits, under the watchdog, until the last call is no longer ncclInProgress.
  void settle(const nccl_operation& op) {
    require_usable(op);
    nccl_watchdog<> watchdog(timeout);
    watchdog.wait(op, [&] { return async_status(); }, [&](const std::string& why) { abort(why); });
  }
  // A call's synchronous result: ncclSuccess and ncclInProgress go on; an error throws.
  void check(ncclResult_t result, const nccl_operation& op) const {
    if (result == ncclSuccess || result == ncclInProgress) return;
    throw nccl_error("fusor::comm::nccl: " + describe(op) + " failed: " + nccl_result_text(result, comm));
  }
};

inline void nccl_cuda_check(cudaError_t status, const nccl_operation& op, const char* call) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // reported here; do not let the next unrelated check report it again
  throw nccl_error("fusor::comm::nccl: " + describe(op) + ": " + call + " failed: " + cudaGetErrorString(status));
}

// One call's completion: the event recorded once the call is queued on its stream.
struct nccl_completion {
  nccl_completion(std::shared_ptr<nccl_state> s, nccl_operation o, cudaStream_t st)
      : state(std::move(s)), op(std::move(o)), stream(st) {}
  nccl_completion(const nccl_completion&) = delete;
  nccl_completion& operator=(const nccl_completion&) = delete;
  ~nccl_completion() {
    if (event != nullptr) (void)cudaEventDestroy(event);
  }
  void record() {
    nccl_cuda_check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), op, "cudaEventCreateWithFlags");
    nccl_cuda_check(cudaEventRecord(event, stream), op, "cudaEventRecord");
  }
  poll_status poll() const {
    const cudaError_t reached = cudaEventQuery(event);
    if (reached != cudaSuccess && reached != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return poll_status::failed(std::string("cudaEventQuery: ") + cudaGetErrorString(reached));
    }
    poll_status nccl = state->async_status();
    if (nccl.value == poll_status::state::failed) return nccl;
    return reached == cudaSuccess ? poll_status::done() : poll_status::pending();
  }

  std::shared_ptr<nccl_state> state;
  nccl_operation op;
  cudaStream_t stream;
  cudaEvent_t event = nullptr;
  std::string failure;  // the group it was issued in failed before it was queued
};

// This thread's open groups: how deep, and the calls waiting for the outermost end.
struct nccl_group_state {
  int depth = 0;
  std::vector<std::shared_ptr<nccl_completion>> pending;
};
inline nccl_group_state& this_thread_nccl_group() {
  thread_local nccl_group_state group;
  return group;
}

}  // namespace detail

/// Done when the stream has passed the call (for one issued in a group: once
/// the group has ended and its stream has passed it).
class [[nodiscard]] nccl_request {
 public:
  /// Made by nccl's calls, over the call's completion.
  explicit nccl_request(std::shared_ptr<detail::nccl_completion> completion) : completion_(std::move(completion)) {}

  /// Blocks until done, polling; a failure or the timeout aborts the
  /// communicator and throws nccl_error.
  void wait() {
    auto& c = *completion_;
    require_queued();
    nccl_watchdog<> watchdog(c.state->timeout);
    watchdog.wait(c.op, [&] { return c.poll(); }, [&](const std::string& why) { c.state->abort(why); });
  }
  /// Whether it is done, without waiting; false inside the group that issued it. A failure aborts the
  /// communicator and throws nccl_error, as wait() does.
  bool test() {
    auto& c = *completion_;
    if (c.event == nullptr && c.failure.empty() && detail::this_thread_nccl_group().depth > 0) return false;
    require_queued();
    nccl_watchdog<> watchdog(c.state->timeout);
    return watchdog.check(c.op, [&] { return c.poll(); }, [&](const std::string& why) { c.state->abort(why); });
  }

 private:
  // Throws unless the call is on its stream and its communicator was not aborted.
  void require_queued() const {
    auto& c = *completion_;
    if (!c.failure.empty()) throw nccl_error(c.failure);
    if (c.event == nullptr)
      throw nccl_error("fusor::comm::nccl: wait() for " + describe(c.op) +
                       " inside the group() that issued it: NCCL queues a group's calls when the group ends, so wait "
                       "after the group's scope");
    if (!c.state->aborted_because.empty()) c.state->require_usable(c.op);
  }
  std::shared_ptr<detail::nccl_completion> completion_;
};

}  // namespace fusor::comm

#endif  // FUSOR_HAS_CUDA
