// fusor/comm/device_choice.hpp — which GPU a rank uses, and the line that says so.
//
// One GPU per rank: local rank r (its place among the ranks on its machine)
// uses visible device r % (number of visible devices). With every GPU visible,
// local rank r takes device r; where the launcher gives each process its own
// GPU through CUDA_VISIBLE_DEVICES (srun --gpus-per-task=1, a wrapper script),
// each process sees one device and takes device 0. (Choosing device r alone
// failed there with "invalid device ordinal".) More local ranks than visible
// devices would put two ranks on one device, which NCCL refuses within one
// communicator: the line warns.
//
// Plain C++ (no CUDA), tested on the host (tests/comm/test_device_choice.cpp);
// comm/nccl.hpp asks CUDA for the count, sets the device and prints the line on
// stderr unless asked to be quiet (nccl_options::quiet, or FUSOR_QUIET set to
// anything but "" or "0").
#pragma once

#include <cstring>
#include <string>

#include "fusor/core/error.hpp"

namespace fusor::comm {

/// The environment variable that, set to anything but "" or "0", keeps the device line from being printed.
inline constexpr const char* quiet_variable = "FUSOR_QUIET";

/// The device local rank `local_rank` uses among `visible_devices`;
/// `cuda_visible_devices` (the variable's value, or null) names them in errors.
/// Throws fusor::error for a negative local rank or no visible device.
inline int choose_device(int local_rank, int visible_devices, const char* cuda_visible_devices = nullptr) {
  const std::string visible = cuda_visible_devices == nullptr
                                  ? std::string("CUDA_VISIBLE_DEVICES not set")
                                  : std::string("CUDA_VISIBLE_DEVICES=") + cuda_visible_devices;
  if (local_rank < 0)
    throw error("fusor::comm::nccl: local rank " + std::to_string(local_rank) + " is negative (" + visible + ")");
  if (visible_devices < 1)
    throw error("fusor::comm::nccl: local rank " + std::to_string(local_rank) + " sees no CUDA device (" + visible +
                ")");
  return local_rank % visible_devices;
}

/// The line that says which device a rank uses, with a warning appended when ranks must share a device:
/// "fusor::comm::nccl: rank 5 (local rank 1) uses CUDA device 1 of 4 visible (CUDA_VISIBLE_DEVICES=0,1,2,3)"
inline std::string device_choice_line(int rank, int local_rank, int device, int visible_devices,
                                      const char* cuda_visible_devices) {
  std::string line = "fusor::comm::nccl: rank " + std::to_string(rank) + " (local rank " +
                     std::to_string(local_rank) + ") uses CUDA device " + std::to_string(device) + " of " +
                     std::to_string(visible_devices) + " visible (" +
                     (cuda_visible_devices == nullptr ? std::string("CUDA_VISIBLE_DEVICES not set")
                                                      : std::string("CUDA_VISIBLE_DEVICES=") + cuda_visible_devices) +
                     ")";
  if (local_rank >= visible_devices)
    line += "; warning: more ranks on this machine than visible devices, so ranks share a device, which NCCL "
            "refuses within one communicator";
  return line;
}

/// Whether FUSOR_QUIET's value (null when unset) asks fusor not to print.
inline bool quiet_requested(const char* fusor_quiet) {
  return fusor_quiet != nullptr && *fusor_quiet != '\0' && std::strcmp(fusor_quiet, "0") != 0;
}

}  // namespace fusor::comm
