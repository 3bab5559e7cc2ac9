// fusor/comm/mpi_types.hpp — how fusor's element types travel through MPI, and the
// reductions MPI lacks for them. Include <mpi.h> users only (fusor/comm/mpi.hpp does).
//
// fp32, fp64 and the integers map to MPI's own types and operations. MPI has no
// bf16 or fp16: they travel as MPI_UINT16_T and are reduced by user-defined
// operations that convert each pair to float, combine, and round back — so a sum
// over n ranks rounds n - 1 times in 16 bits, like a ring all-reduce in bf16.
#pragma once

// The C++ bindings (deprecated, and noisy under -Wextra) are not needed.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <fusor/core/precision.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace fusor::comm::detail {

template <class T>
inline constexpr bool is_16_bit_float_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

template <class T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (is_16_bit_float_v<T>) return MPI_UINT16_T;
  else if constexpr (std::is_same_v<T, std::int8_t>) return MPI_INT8_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return MPI_UINT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else static_assert(sizeof(T) == 0, "fusor: fusor::comm::mpi: this element type has no MPI datatype");
}

// inout[i] = combine(in[i], inout[i]) in float, for MPI_Op_create.
template <class T, bool Max>
void reduce_16_bit(void* in, void* inout, int* length, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) {
    const float x = convert<float>(a[i]), y = convert<float>(b[i]);
    b[i] = convert<T>(Max ? std::max(x, y) : x + y);
  }
}

// The four user-defined operations, made with MPI_Op_create once MPI is running.
struct half_ops {
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL, fp16_sum = MPI_OP_NULL, fp16_max = MPI_OP_NULL;

  void create() {
    MPI_Op_create(&reduce_16_bit<bfloat16, false>, 1, &bf16_sum);
    MPI_Op_create(&reduce_16_bit<bfloat16, true>, 1, &bf16_max);
    MPI_Op_create(&reduce_16_bit<float16, false>, 1, &fp16_sum);
    MPI_Op_create(&reduce_16_bit<float16, true>, 1, &fp16_max);
  }
  void free() {
    for (MPI_Op* op : {&bf16_sum, &bf16_max, &fp16_sum, &fp16_max})
      if (*op != MPI_OP_NULL) MPI_Op_free(op);
  }
  // avg is sum here; the caller divides by the number of ranks afterwards.
  template <class T>
  MPI_Op get(bool max) const {
    if constexpr (std::is_same_v<T, bfloat16>) return max ? bf16_max : bf16_sum;
    else if constexpr (std::is_same_v<T, float16>) return max ? fp16_max : fp16_sum;
    else return max ? MPI_MAX : MPI_SUM;
  }
};

}  // namespace fusor::comm::detail
