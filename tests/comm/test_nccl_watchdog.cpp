// The NCCL communicator's waiting policy (fusor/comm/nccl_watchdog.hpp), on the
// host with a fake clock: a wait that never completes times out at the timeout,
// aborts once and names the call, rank, peer and time waited; a reported error
// aborts at once and is named; a wait that completes returns; the pause between
// polls grows and is capped; the timeout comes from the option, then
// FUSOR_NCCL_TIMEOUT_S, then 10 minutes, and a bad value is named.
#include <fusor/comm/nccl_watchdog.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "support/text.hpp"

using fusor::comm::nccl_error;
using fusor::comm::nccl_operation;
using fusor::comm::poll_status;
using fusor::comm::seconds_d;
using fusor_test::contains;
using namespace std::chrono_literals;

namespace {

// Time moves only when the watchdog pauses (a yield moves it 1 ns).
struct fake_clock {
  std::chrono::nanoseconds now{1'000'000'000};
  std::vector<std::chrono::nanoseconds> pauses;
};
struct fake_now {
  fake_clock* clock;
  std::chrono::nanoseconds operator()() const { return clock->now; }
};
struct fake_pause {
  fake_clock* clock;
  void operator()(std::chrono::nanoseconds pause) const {
    clock->pauses.push_back(pause);
    clock->now += pause.count() == 0 ? 1ns : pause;
  }
};
using fake_watchdog = fusor::comm::nccl_watchdog<fake_now, fake_pause>;

fake_watchdog make_watchdog(fake_clock& clock, seconds_d timeout) {
  return fake_watchdog(timeout, fake_now{&clock}, fake_pause{&clock});
}


const nccl_operation all_reduce{"ncclAllReduce (4099 x bfloat16, sum)", 3, -1};
const nccl_operation send_to_1{"ncclSend (10 x float32)", 0, 1};

}  // namespace

TEST_CASE("nccl_watchdog: a wait that never completes times out, aborts once and names the call") {
  fake_clock clock;
  auto watchdog = make_watchdog(clock, seconds_d(2.0));
  int polls = 0, aborts = 0;
  std::string abort_message;
  std::string thrown;
  try {
    watchdog.wait(
        all_reduce,
        [&] {
          ++polls;
          return poll_status::pending();
        },
        [&](const std::string& why) {
          ++aborts;
          abort_message = why;
        });
    FAIL_CHECK("the wait returned although the query never completed");
  } catch (const nccl_error& e) {
    thrown = e.what();
  }
  INFO("message: ", thrown);
  CHECK(aborts == 1);
  CHECK(abort_message == thrown);
  for (const char* part : {"fusor::comm::nccl: ncclAllReduce (4099 x bfloat16, sum) on rank 3, all ranks",
                           "not complete after waiting 2.0 s", "the timeout is 2.0 s", "FUSOR_NCCL_TIMEOUT_S",
                           "aborted (ncclCommAbort)"})
    CHECK_MESSAGE(contains(thrown, part), "expected to find: ", part);
  // It gave up once the timeout had passed, and no later than one pause after.
  const auto waited = clock.now - std::chrono::nanoseconds(1'000'000'000);
  CHECK(waited >= 2s);
  CHECK(waited <= 2s + 2ms);
  CHECK(polls == static_cast<int>(clock.pauses.size()) + 1);
}

TEST_CASE("nccl_watchdog: an error reported while waiting aborts at once and is named") {
  fake_clock clock;
  auto watchdog = make_watchdog(clock, seconds_d(600.0));
  int polls = 0, aborts = 0;
  std::string thrown;
  try {
    watchdog.wait(
        send_to_1,
        [&] {
          return ++polls < 100 ? poll_status::pending()
                               : poll_status::failed("NCCL reports remote process exited or there was a network error");
        },
        [&](const std::string&) { ++aborts; });
    FAIL_CHECK("the wait returned although the query failed");
  } catch (const nccl_error& e) {
    thrown = e.what();
  }
  INFO("message: ", thrown);
  CHECK(polls == 100);
  CHECK(aborts == 1);
  for (const char* part : {"ncclSend (10 x float32) on rank 0, peer 1", "failed after waiting",
                           "remote process exited or there was a network error", "aborted (ncclCommAbort)"})
    CHECK_MESSAGE(contains(thrown, part), "expected to find: ", part);
  CHECK_FALSE(contains(thrown, "not complete"));
}

TEST_CASE("nccl_watchdog: a wait that completes returns after as many polls, without aborting") {
  std::mt19937 rng(20240512);
  std::uniform_int_distribution<int> polls_needed(1, 3000);
  for (int trial = 0; trial < 20; ++trial) {
    fake_clock clock;
    auto watchdog = make_watchdog(clock, seconds_d(600.0));
    const int needed = polls_needed(rng);
    int polls = 0, aborts = 0;
    watchdog.wait(
        all_reduce, [&] { return ++polls < needed ? poll_status::pending() : poll_status::done(); },
        [&](const std::string&) { ++aborts; });
    CHECK(polls == needed);
    CHECK(aborts == 0);
    CHECK(clock.pauses.size() == static_cast<std::size_t>(needed - 1));
  }
}

TEST_CASE("nccl_watchdog: check() polls once") {
  fake_clock clock;
  auto watchdog = make_watchdog(clock, seconds_d(1.0));
  int aborts = 0;
  const auto count_abort = [&](const std::string&) { ++aborts; };
  CHECK_FALSE(watchdog.check(all_reduce, [] { return poll_status::pending(); }, count_abort));
  CHECK(watchdog.check(all_reduce, [] { return poll_status::done(); }, count_abort));
  CHECK(aborts == 0);
  CHECK(clock.pauses.empty());
  try {
    (void)watchdog.check(send_to_1, [] { return poll_status::failed("cudaEventQuery: an illegal memory access"); },
                         count_abort);
    FAIL_CHECK("check() did not throw for a failed poll");
  } catch (const nccl_error& e) {
    CHECK(contains(e.what(), "ncclSend (10 x float32) on rank 0, peer 1"));
    CHECK(contains(e.what(), "an illegal memory access"));
  }
  CHECK(aborts == 1);
}

TEST_CASE("poll_pause: yields first, then grows from 50 us to at most 2 ms") {
  using fusor::comm::poll_pause;
  for (std::size_t poll = 0; poll < 64; ++poll) CHECK(poll_pause(poll) == 0ns);
  CHECK(poll_pause(64) == 50us);
  CHECK(poll_pause(65) == 100us);
  for (std::size_t poll = 1; poll < 10000; ++poll) {
    CHECK(poll_pause(poll) >= poll_pause(poll - 1));
    CHECK(poll_pause(poll) <= 2ms);
  }
  CHECK(poll_pause(1000) == 2ms);
}

TEST_CASE("nccl timeout: the option, else FUSOR_NCCL_TIMEOUT_S, else 10 minutes; bad values named") {
  using fusor::comm::resolve_nccl_timeout;
  CHECK(resolve_nccl_timeout({}, nullptr) == seconds_d(600.0));
  CHECK(resolve_nccl_timeout({}, "") == seconds_d(600.0));
  CHECK(resolve_nccl_timeout({}, "30") == seconds_d(30.0));
  CHECK(resolve_nccl_timeout({}, "0.5") == seconds_d(0.5));
  CHECK(resolve_nccl_timeout(seconds_d(7.0), "30") == seconds_d(7.0));  // the communicator's own wins
  for (const char* bad : {"abc", "0", "-3", "10s", "inf", "nan", " "}) {
    INFO("FUSOR_NCCL_TIMEOUT_S=", bad);
    try {
      (void)resolve_nccl_timeout({}, bad);
      FAIL_CHECK("no error for a bad value");
    } catch (const fusor::error& e) {
      CHECK(contains(e.what(), std::string("FUSOR_NCCL_TIMEOUT_S=\"") + bad + "\""));
    }
  }
  CHECK_THROWS_AS((void)resolve_nccl_timeout(seconds_d(0.0), nullptr), fusor::error);
  CHECK_THROWS_AS((void)resolve_nccl_timeout(seconds_d(-1.0), nullptr), fusor::error);

  // Read from the environment.
  ::setenv("FUSOR_NCCL_TIMEOUT_S", "42", 1);
  CHECK(fusor::comm::nccl_timeout_from_environment() == seconds_d(42.0));
  CHECK(fusor::comm::nccl_timeout_from_environment(seconds_d(3.0)) == seconds_d(3.0));
  ::unsetenv("FUSOR_NCCL_TIMEOUT_S");
  CHECK(fusor::comm::nccl_timeout_from_environment() == seconds_d(600.0));
}

TEST_CASE("nccl_wait_message: a collective names all ranks, a send its peer; short timeouts keep their digits") {
  using fusor::comm::nccl_wait_message;
  const std::string timed_out = nccl_wait_message(all_reduce, seconds_d(0.25), seconds_d(0.25), "");
  CHECK(contains(timed_out, "rank 3, all ranks"));
  CHECK(contains(timed_out, "after waiting 0.25 s"));
  const std::string failed = nccl_wait_message(send_to_1, seconds_d(12.34), seconds_d(600.0), "why");
  CHECK(contains(failed, "rank 0, peer 1: failed after waiting 12.3 s: why"));
}
