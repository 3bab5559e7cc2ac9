// fusor/comm/nccl_types.hpp — how fusor's element types and reductions are
// named to NCCL (ncclDataType_t, ncclRedOp_t), and in fusor's messages. NCCL
// reduces bf16 and fp16 itself and has avg (ncclAvg). nvcc units only
// (fusor/comm/nccl.hpp includes it).
#pragma once

#include <nccl.h>

#include <fusor/comm/communicator.hpp>
#include <fusor/core/precision.hpp>

#include <cstdint>
#include <type_traits>

namespace fusor::comm {
namespace detail {
template <class T>
ncclDataType_t nccl_datatype() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else if constexpr (std::is_same_v<T, bfloat16>) return ncclBfloat16;
  else if constexpr (std::is_same_v<T, float16>) return ncclFloat16;
  else if constexpr (std::is_same_v<T, std::int8_t>) return ncclInt8;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return ncclUint8;
  else if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return ncclUint32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
  else static_assert(sizeof(T) == 0, "fusor: fusor::comm::nccl: this element type has no NCCL datatype");
}
template <class T>
const char* nccl_type_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, double>) return "float64";
  else if constexpr (std::is_same_v<T, bfloat16>) return "bfloat16";
  else if constexpr (std::is_same_v<T, float16>) return "float16";
  else if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
  else return "int64";
}

inline ncclRedOp_t nccl_op(reduction_op op) {
  switch (op) {
    case reduction_op::sum: return ncclSum;
    case reduction_op::avg: return ncclAvg;
    case reduction_op::max: return ncclMax;
  }
  return ncclSum;
}
}  // namespace detail

}  // namespace fusor::comm
