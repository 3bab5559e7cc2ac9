// Which GPU an NCCL rank uses (fusor/comm/device_choice.hpp), on the host:
// local rank r takes visible device r % count — device r with every GPU
// visible, device 0 where CUDA_VISIBLE_DEVICES gives each process one — and
// the stderr line names rank, local rank, device, count and the variable.
#include <fusor/comm/device_choice.hpp>

#include <doctest/doctest.h>

#include <random>
#include <string>

#include "support/text.hpp"

using fusor::comm::choose_device;
using fusor::comm::device_choice_line;
using fusor_test::contains;

TEST_CASE("choose_device: local rank modulo the visible devices") {
  // 4 ranks per node, CUDA_VISIBLE_DEVICES giving each process its own GPU:
  // every process sees one device (local rank r used to ask for device r and fail).
  for (int local_rank = 0; local_rank < 4; ++local_rank) CHECK(choose_device(local_rank, 1, "2") == 0);
  // Every GPU visible: local rank r takes device r.
  for (int local_rank = 0; local_rank < 8; ++local_rank) CHECK(choose_device(local_rank, 8) == local_rank);
  // Random layouts, fixed seed.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> visible_count(1, 16), local(0, 63);
  for (int trial = 0; trial < 200; ++trial) {
    const int visible = visible_count(rng), local_rank = local(rng);
    const int device = choose_device(local_rank, visible);
    CHECK(device == local_rank % visible);
    CHECK(device >= 0);
    CHECK(device < visible);
  }
}

TEST_CASE("choose_device: no device, or a negative local rank, is an error naming CUDA_VISIBLE_DEVICES") {
  try {
    (void)choose_device(2, 0, "");
    FAIL_CHECK("no error without a visible device");
  } catch (const fusor::error& e) {
    CHECK(contains(e.what(), "local rank 2 sees no CUDA device"));
    CHECK(contains(e.what(), "CUDA_VISIBLE_DEVICES="));
  }
  try {
    (void)choose_device(-1, 4, nullptr);
    FAIL_CHECK("no error for a negative local rank");
  } catch (const fusor::error& e) {
    CHECK(contains(e.what(), "local rank -1"));
    CHECK(contains(e.what(), "CUDA_VISIBLE_DEVICES not set"));
  }
}

TEST_CASE("device_choice_line: one line naming rank, local rank, device, count and CUDA_VISIBLE_DEVICES") {
  const std::string line = device_choice_line(5, 1, 1, 4, "0,1,2,3");
  CHECK(line == "fusor::comm::nccl: rank 5 (local rank 1) uses CUDA device 1 of 4 visible (CUDA_VISIBLE_DEVICES=0,1,2,3)");
  const std::string unset = device_choice_line(0, 0, 0, 2, nullptr);
  CHECK(contains(unset, "CUDA_VISIBLE_DEVICES not set"));
  CHECK_FALSE(contains(unset, "warning"));
  // More local ranks than devices: ranks would share one, which NCCL refuses.
  const std::string shared = device_choice_line(6, 6, 2, 4, nullptr);
  CHECK(contains(shared, "uses CUDA device 2 of 4 visible"));
  CHECK(contains(shared, "warning: more ranks on this machine than visible devices"));
  for (const std::string& l : {line, unset, shared}) CHECK(l.find('\n') == std::string::npos);
}

TEST_CASE("quiet_requested: FUSOR_QUIET set to anything but empty or 0") {
  using fusor::comm::quiet_requested;
  CHECK_FALSE(quiet_requested(nullptr));
  CHECK_FALSE(quiet_requested(""));
  CHECK_FALSE(quiet_requested("0"));
  CHECK(quiet_requested("1"));
  CHECK(quiet_requested("yes"));
}
