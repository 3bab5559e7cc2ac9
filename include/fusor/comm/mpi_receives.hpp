// fusor/comm/mpi_receives.hpp — receives whose message is measured before MPI
// is given the buffer (with the collective check on).
//
// Why: Open MPI 4.1 (measured) writes a message longer than its receive buffer
// past the buffer's end before it reports MPI_ERR_TRUNCATE. A checked recv
// therefore does not post MPI_Irecv at once: it waits in this process's list
// until MPI_Improbe finds its message, whose size is compared with the buffer
// first. A message of another size is received into scratch memory and thrown
// as mpi_mismatch_error naming both sizes; the buffer is never written. A
// message of the right size is received into the buffer (MPI_Imrecv).
//
// Matching order is MPI's: receives from one peer with one tag on one
// communicator probe in the order they were started, each for the earliest
// message, as MPI_Irecv would match them. Probing happens when a recv starts and
// whenever any fusor MPI request is tested or waited for (comm/mpi_watchdog.hpp),
// so a rank waiting for its own send still takes in the peer's messages.
// MPI is called from one thread (as MPI_Init promises), so the list has no lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <mpi.h>

#include "fusor/comm/mpi_error.hpp"

namespace fusor::comm {

namespace detail {

// One recv waiting for its message, then receiving it.
struct checked_receive {
  MPI_Comm comm = MPI_COMM_NULL;
  void* data = nullptr;
  int count = 0;  // elements of `type`
  MPI_Datatype type = MPI_DATATYPE_NULL;
  std::int64_t bytes = 0;  // the buffer's size
  int peer = 0, tag = 0;
  std::string call{};  // as messages name it: "recv from rank 1 (tag 3, 512 x float)"
  MPI_Request request = MPI_REQUEST_NULL;  // MPI_Imrecv's, once matched
  bool matched = false;
  std::string failure{};  // why it will never complete, else empty
  bool mismatch = false;  // the failure: a message of another size
};

// This process's checked receives that have no message yet, in the order they started.
class checked_receives {
 public:
  void add(std::shared_ptr<checked_receive> receive) { waiting_.push_back(std::move(receive)); }

  // Matches every waiting receive whose message has arrived (in starting order per communicator, peer and
  // tag). Throws mpi_mismatch_error for a message of another size than its receive (the receive fails too).
  void match() {
    std::set<std::tuple<MPI_Comm, int, int>> blocked;  // an earlier receive of these still has no message
    for (std::size_t i = 0; i < waiting_.size();) {
      checked_receive& r = *waiting_[i];
      const auto key = std::make_tuple(r.comm, r.peer, r.tag);
      if (blocked.count(key) != 0) {
        ++i;
        continue;
      }
      int found = 0;
      MPI_Message message = MPI_MESSAGE_NULL;
      MPI_Status status;
      mpi_check(MPI_Improbe(r.peer, r.tag, r.comm, &found, &message, &status), "MPI_Improbe");
      if (!found) {
        blocked.insert(key);
        ++i;
        continue;
      }
      const std::shared_ptr<checked_receive> mine = waiting_[i];
      waiting_.erase(waiting_.begin() + std::ptrdiff_t(i));
      int bytes = 0;
      mpi_check(MPI_Get_count(&status, MPI_BYTE, &bytes), "MPI_Get_count");
      if (bytes == r.bytes) {
        mpi_check(MPI_Imrecv(r.data, r.count, r.type, &message, &r.request), "MPI_Imrecv");
        r.matched = true;
        continue;
      }
      std::vector<char> scratch(static_cast<std::size_t>(std::max(bytes, 1)));
      mpi_check(MPI_Mrecv(scratch.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
      r.failure = "fusor::comm::mpi: " + r.call + ": rank " + std::to_string(r.peer) + " sent " +
                  std::to_string(bytes) + " bytes, this recv's buffer holds " + std::to_string(r.bytes) +
                  " (a send and its recv of different sizes); the buffer was not written";
      r.mismatch = true;
      throw mpi_mismatch_error(r.failure);
    }
  }
  // Fails the receives over `comm` that still wait (the communicator is being freed).
  void drop(MPI_Comm comm) {
    std::erase_if(waiting_, [&](const std::shared_ptr<checked_receive>& r) {
      if (r->comm != comm) return false;
      r->failure = "fusor::comm::mpi: " + r->call + ": the communicator was destroyed before a message arrived";
      return true;
    });
  }
  // Takes `receive` out of the list (its wait timed out): MPI never gets its buffer.
  void abandon(const checked_receive& receive) {
    std::erase_if(waiting_, [&](const std::shared_ptr<checked_receive>& r) { return r.get() == &receive; });
  }
  bool empty() const { return waiting_.empty(); }

 private:
  std::vector<std::shared_ptr<checked_receive>> waiting_;
};

// The process's list.
inline checked_receives& waiting_receives() {
  static checked_receives list;
  return list;
}

}  // namespace detail
}  // namespace fusor::comm
