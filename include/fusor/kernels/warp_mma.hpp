// fusor/kernels/warp_mma.hpp — tensor-core products held in registers, and
// the thread model that kernels built on them are written against.
//
// A kernel written against a `Simt` policy (the static functions below) runs
// on the GPU with `device_simt` (threadIdx, __syncthreads, mma.sync and
// ldmatrix in PTX) and on the CPU with `emulated_simt` (simt_emulator.hpp):
// the same source, so the fragment arithmetic of a tensor-core kernel is
// tested on a machine without a GPU. The policy:
//
//   int thread()                      this thread's index in its block (x only)
//   int block_threads()               the block's threads (blockDim.x)
//   index_t block_x(), block_y(), grid_x(), grid_y()
//   void sync_block()                 __syncthreads
//   T shfl_xor(T v, int mask)         __shfl_xor_sync over the whole warp, any
//   T shfl(T v, int lane)             trivially copyable T (4-byte word by word); shfl
//                                     takes lane `lane`'s v
//   T* shared_array<T, N, Tag>()      a block's static shared array of N T, one
//                                     per <T, N, Tag> (a __shared__ variable)
//   int cluster_blocks(), cluster_rank()  the cluster's blocks (1 without one)
//                                     and this block's rank in it
//   void cluster_sync()               a barrier of the cluster's threads (release, acquire)
//   T load_cluster_shared(const T* p, int rank)  p's T in block `rank`'s shared memory
//   float exp2(float)                 2^x (the GPU's ex2.approx.ftz)
//   ldmatrix_x4<Trans>(r, row)        four 8 x 8 matrices of 16-bit values
//                                     from shared memory; lane i gives the
//                                     address of row i % 8 of matrix i / 8
//   mma<T>(d, a, b0, b1)              d (16 x 8, fp32) += a (16 x 16) b (16 x 8), T bf16 or fp16
//   copy_async_16(to, from)           16 bytes global -> shared, in flight until
//                                     wait_async (cp.async.cg); commit_async() closes a group
//   copy_async_16_or_zero(to, from, inside)  the same, or 16 zero bytes where
//                                     not inside (one instruction: source size 0)
//   compiler_barrier()                no memory access moves across it when compiled
//                                     (a thread's reads of bytes it then copy_asyncs over)
//   wait_async()                      this thread's copies have landed (a
//                                     sync_block after it shows them to the others)
//   load_shared(p), store_shared(p, v) a plain read or write of shared memory
//   zero_shared_16(p)                 16 zero bytes to shared memory (16-byte aligned)
//   unsigned atomic_add(unsigned* p, unsigned v)  atomicAdd on global memory (the old value)
//   void fence_device()               __threadfence: this thread's writes before it are seen
//                                     by every block before its writes after it
//   V load_global_coherent(const V* p)  a global read from L2 (__ldcg), not an L1 line
//                                     that may predate another block's write (V: a
//                                     built-in or CUDA vector type, as __ldcg takes)
//
// Every shared-memory access goes through the policy, so the emulator checks
// each against the others (races, reads of unwritten bytes) as the GPU's
// compute-sanitizer would.
//
// Fragments (PTX ISA, mma.m16n8k16 with .row.col; g = lane / 4, q = lane % 4;
// a register holds two 16-bit values, the lower column or row first):
//   a[0]: A(g, 2q..2q+1)   a[1]: A(g+8, 2q..)   a[2]: A(g, 2q+8..)   a[3]: A(g+8, 2q+8..)
//   b0:   B(2q..2q+1, g)   b1:   B(2q+8.., g)
//   d[0], d[1]: D(g, 2q), D(g, 2q+1)            d[2], d[3]: D(g+8, 2q), D(g+8, 2q+1)
// ldmatrix gives lane t of matrix m the values (t / 4, 2 (t % 4)..+1) in
// register m; with Trans, ((2 (t % 4))..+1, t / 4), the transposed matrix's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"

namespace fusor::detail {

// Two values rounded to T (16 bits) in one register, `low` in the lower half:
// a row pair of an A fragment made from an fp32 accumulator.
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE std::uint32_t pack_pair(float low, float high) {
  static_assert(sizeof(T) == 2, "fusor: pack_pair packs 16-bit values (bf16, fp16)");
  const T lo = convert<T>(low), hi = convert<T>(high);
  std::uint16_t lo_bits, hi_bits;
  std::memcpy(&lo_bits, &lo, 2);
  std::memcpy(&hi_bits, &hi, 2);
  return std::uint32_t(lo_bits) | (std::uint32_t(hi_bits) << 16);
}

#if FUSOR_HAS_CUDA
// The GPU's own threads. mma and ldmatrix need sm_80 (bf16 m16n8k16); the
// host launches kernels using them only there (flash attention's launcher).
struct device_simt {
  __device__ static int thread() { return int(threadIdx.x); }
  __device__ static int block_threads() { return int(blockDim.x); }
  __device__ static index_t block_x() { return index_t(blockIdx.x); }
  __device__ static index_t block_y() { return index_t(blockIdx.y); }
  __device__ static index_t grid_x() { return index_t(gridDim.x); }
  __device__ static index_t grid_y() { return index_t(gridDim.y); }
  __device__ static void sync_block() { __syncthreads(); }

  // Shuffles: one instruction for a float or an int, else one per 4-byte word.
  template <class T>
  __device__ static T shfl_xor(const T& v, int mask) {
    return shuffle_words(v, [mask](auto w) { return __shfl_xor_sync(0xffffffffu, w, mask); });
  }
  template <class T>
  __device__ static T shfl(const T& v, int lane) {
    return shuffle_words(v, [lane](auto w) { return __shfl_sync(0xffffffffu, w, lane); });
  }
  template <class T, class Shuffle>
  __device__ static T shuffle_words(const T& v, const Shuffle& shuffle) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, int> || std::is_same_v<T, unsigned>) {
      return shuffle(v);
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "fusor: shuffles move trivially copyable values");
      unsigned words[(sizeof(T) + 3) / 4] = {};  // a value of 1 or 2 bytes (an int8 sum) in one word
      std::memcpy(words, &v, sizeof(T));
      FUSOR_UNROLL
      for (unsigned& w : words) w = shuffle(w);
      T out;
      std::memcpy(&out, words, sizeof(T));
      return out;
    }
  }

  // A __shared__ variable of this instantiation: one per <T, N, Tag> and block.
  template <class T, int N, class Tag>
  __device__ static T* shared_array() {
    __shared__ __align__(16) unsigned char bytes[sizeof(T) * N];
    return reinterpret_cast<T*>(bytes);
  }

  // Clusters (sm_90; launch_rows launches them only for sm_90 code).
  __device__ static int cluster_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return int(__clusterSizeInBlocks());
#else
    return 1;
#endif
  }
  __device__ static int cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return int(__clusterRelativeBlockRank());
#else
    return 0;
#endif
  }
  // Writes to shared memory before it are visible to the cluster's reads after it.
  __device__ static void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
#endif
  }
  template <class T>
  __device__ static T load_cluster_shared(const T* p, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return *static_cast<const T*>(__cluster_map_shared_rank(const_cast<T*>(p), unsigned(rank)));
#else
    (void)rank;
    return *p;  // no cluster: the block's own
#endif
  }
  __device__ static float exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
  __device__ static void copy_async_16(void* to, const void* from) { copy_async_16_or_zero(to, from, true); }
  // copy_async_16 where `inside`, else 16 zero bytes, landing alike: one
  // instruction either way (cp.async's source size 0 reads nothing and
  // fills zeros). `from` must be a valid address even when not inside.
  __device__ static void copy_async_16_or_zero(void* to, const void* from, bool inside) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned address = unsigned(__cvta_generic_to_shared(to));
    const std::size_t source = __cvta_generic_to_global(from);  // the instruction takes a global address
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(address), "l"(source),
                 "r"(inside ? 16u : 0u));
#else
    (void)to, (void)from, (void)inside;
    __trap();  // launched only on sm_80 and later
#endif
  }
  // No memory access moves across it in the compiled code (copy_async's asm
  // does not say which memory it touches).
  __device__ static void compiler_barrier() { asm volatile("" ::: "memory"); }
  __device__ static void commit_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;");
#endif
  }
  __device__ static void wait_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
  }
  template <class V>
  __device__ static V load_shared(const V* from) { return *from; }
  template <class V>
  __device__ static void store_shared(V* to, const V& v) { *to = v; }
  __device__ static void zero_shared_16(void* to) { *static_cast<uint4*>(to) = make_uint4(0, 0, 0, 0); }
  __device__ static unsigned atomic_add(unsigned* p, unsigned v) { return atomicAdd(p, v); }
  __device__ static void fence_device() { __threadfence(); }
  template <class V>
  __device__ static V load_global_coherent(const V* from) { return __ldcg(from); }
  template <bool Trans>
  __device__ static void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned address = unsigned(__cvta_generic_to_shared(row));
    if constexpr (Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(address));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(address));
#else
    (void)row;
    r[0] = r[1] = r[2] = r[3] = 0;
    __trap();  // launched only on sm_80 and later
#endif
  }
  template <class T>
  __device__ static void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, bfloat16>)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)d, (void)a, (void)b0, (void)b1;
    __trap();  // launched only on sm_80 and later
#endif
  }
};
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::detail
