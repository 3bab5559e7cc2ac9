// fusor/config.hpp — macros every fusor header relies on, and feature detection.
//
// fusor compiles with plain g++/clang++ (host only: CCCL, cuda_bf16.h and
// cuda_fp16.h are the only CUDA pieces it needs) and with nvcc. CUDA runtime
// features (device memory, the cuda executor) exist only in translation units
// compiled by nvcc, where FUSOR_HAS_CUDA is 1.
#pragma once

#if defined(__CUDACC__)
#define FUSOR_HAS_CUDA 1
#define FUSOR_HOST_DEVICE __host__ __device__
#define FUSOR_DEVICE __device__
#define FUSOR_FORCE_INLINE __forceinline__
#else
#define FUSOR_HAS_CUDA 0
#define FUSOR_HOST_DEVICE
#define FUSOR_DEVICE
#define FUSOR_FORCE_INLINE inline __attribute__((always_inline))
#endif

#if defined(__CUDA_ARCH__)
#define FUSOR_DEVICE_PASS 1
#else
#define FUSOR_DEVICE_PASS 0
#endif

#if defined(_OPENMP)
#define FUSOR_HAS_OPENMP 1
#else
#define FUSOR_HAS_OPENMP 0
#endif

// Hint to unroll a loop with a compile-time trip count: `unroll` in device code;
// nothing in nvcc's host pass (its front end rejects GCC's spelling); `GCC
// unroll` for plain host compilers.
#if defined(__CUDA_ARCH__)
#define FUSOR_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define FUSOR_UNROLL
#else
#define FUSOR_UNROLL _Pragma("GCC unroll 16")
#endif

// Separate compilation (optional): with FUSOR_SEPARATE_COMPILATION defined
// (linking the CMake target fusor::runtime defines it), fusor's non-template
// functions -- file formats, data sets, the command line -- are only declared
// by the headers and compiled once, in the fusor_runtime library, so a
// training program compiles in seconds less. Without it (the default) fusor is
// header only: each header includes its definitions (its impl/*.ipp file) and
// FUSOR_DECL makes them inline. The definitions never depend on
// FUSOR_HAS_CUDA, so one library serves g++ and nvcc translation units.
#if defined(FUSOR_SEPARATE_COMPILATION)
#define FUSOR_DECL
#else
#define FUSOR_DECL inline
#endif

// Its GPU counterpart (optional): with FUSOR_CUDA_SEPARATE_COMPILATION defined
// (linking fusor::cuda_runtime defines it), the GPU path's most common
// instances -- for bf16 and fp32 networks the loss, nn::linear's matmuls,
// AdamW, the update controller, the loaders; the cuBLASLt plans -- are
// compiled once by nvcc, in the fusor_cuda_runtime library, for the
// architectures fusor was built for (CMAKE_CUDA_ARCHITECTURES); a program's
// .cu files only declare them (`extern template`; FUSOR_CUDA_DECL for
// non-template functions) and compile in about half the time.
// FUSOR_CUDA_PRECOMPILED is 1 in nvcc translation units of such programs.
#if defined(FUSOR_CUDA_SEPARATE_COMPILATION) && FUSOR_HAS_CUDA
#define FUSOR_CUDA_PRECOMPILED 1
#define FUSOR_CUDA_DECL
#else
#define FUSOR_CUDA_PRECOMPILED 0
#define FUSOR_CUDA_DECL inline
#endif

namespace fusor {
/// Largest kernel-parameter block a launch may take: 32764 bytes on Volta and
/// later with CUDA 12.1+. Expression trees are checked against it at compile time.
inline constexpr unsigned long kernel_parameter_limit = 32764;
}  // namespace fusor
