// fusor/kernels/simt_emulator.hpp — runs a kernel written against a Simt
// policy (warp_mma.hpp) on the CPU, so that its kernels (tensor-core,
// row-wise, reductions) are tested where there is no GPU: every thread of a
// block is a fiber of one host thread (its own stack), switched at barriers
// and warp collectives, blocks (or clusters of blocks) one after another.
// Slow (a collective costs each thread a switch of stacks) and meant for tests.
//
// It checks what a GPU would leave undefined: a barrier or warp collective
// some threads never reach (an error naming the block, not a hang), a warp
// collective after a lane of the warp has exited, an ldmatrix row address
// outside the block's shared memory or not 16-byte aligned (copy_async_16's
// addresses too). Shared memory starts filled with 0xff bytes (NaN as bf16,
// fp16 and fp32), and an asynchronous copy lands at its thread's wait_async,
// not before.
//
// Static shared memory (shared_array) comes from an 8 KiB region after the
// launch's dynamic shared memory. The blocks of a cluster run together; the
// clusters (or blocks) of a launch in a fixed order that is not their index
// order, as a GPU may.
//
// Every shared-memory access made through the policy (ldmatrix,
// copy_async_16 and copy_async_16_or_zero, load_shared, store_shared,
// zero_shared_16, load_cluster_shared) is also checked byte by byte, as
// compute-sanitizer's racecheck and initcheck would on a GPU, and whatever
// order the fibers happen to run in: between two barriers, a byte one thread
// writes may be neither read nor written by another thread; nothing may
// touch a byte an async copy is in flight to (its own thread before
// wait_async included); a byte no one has written in this block may not be
// read; and another block of the cluster may read a byte only if it was
// written before a cluster_sync, and only until that block exits, nor may
// the byte be written again before the next cluster_sync. Each is an error
// naming the block, the threads and the bytes. emulate_kernel returns
// counters that bear on speed (simt_counters: ldmatrix's bank conflicts).
// What it does not model: timing, memory ordering between blocks, the GPU's
// rounding inside mma (it sums each product in double and adds it to the
// fp32 accumulator once).
//
// Host translation units only (g++, clang++): under nvcc the kernels' Simt
// code is device code, and this header declares nothing.
#pragma once

#include "fusor/config.hpp"

#if !FUSOR_HAS_CUDA
#include <ucontext.h>

// Under AddressSanitizer the fibers' stack switches are announced to it (below).
#if defined(__SANITIZE_ADDRESS__)
#define FUSOR_SIMT_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUSOR_SIMT_ASAN_FIBERS 1
#endif
#endif
#if FUSOR_SIMT_ASAN_FIBERS
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/kernels/warp_mma.hpp"

namespace fusor::detail {

// A grid of blocks, as a launch's gridDim (x, y).
struct simt_grid {
  index_t x = 1, y = 1;
};

// What a launch did that bears on its speed, counted by the emulator.
// ldmatrix reads each of its four 8 x 8 matrices in one pass over shared
// memory's 32 banks (128 bytes) when the matrix's eight 16-byte rows lie in
// distinct bank groups ((address / 16) % 8); rows sharing a group take one
// more pass each (a bank conflict), as Nsight Compute counts them.
struct simt_counters {
  std::uint64_t ldmatrix = 0;               // warp-wide ldmatrix.x4
  std::uint64_t ldmatrix_extra_passes = 0;  // passes beyond one per matrix
};

namespace simt_emulation {

inline constexpr std::size_t stack_bytes = std::size_t(256) << 10;

// Fiber stacks kept between launches (per host thread): allocating a block's
// 256 stacks for every launch, and faulting their pages in again, cost the
// reduction tests more time in the kernel than their threads' work.
inline std::vector<std::unique_ptr<char[]>>& stack_pool() {
  thread_local std::vector<std::unique_ptr<char[]>> pool;
  return pool;
}
inline constexpr std::size_t pooled_stacks = 1024;  // at most (256 MiB of address space); the rest are freed
inline std::unique_ptr<char[]> take_stack() {
  auto& pool = stack_pool();
  if (pool.empty()) return std::unique_ptr<char[]>(new char[stack_bytes]);
  std::unique_ptr<char[]> stack = std::move(pool.back());
  pool.pop_back();
  return stack;
}

// Switching between fibers. glibc's swapcontext makes a system call each
// time (the signal mask), which took 85 % of the emulated tests' time; on
// x86-64 a switch is instead the few instructions below, which save the
// registers a call must preserve (and the SSE and x87 control words) on the
// fiber's own stack. Elsewhere ucontext as before: on other machines and
// ABIs (x32, non-ELF), under a sanitizer that must see each stack switch
// and is not told of it here (ThreadSanitizer, MemorySanitizer and
// HWAddressSanitizer intercept swapcontext), and where code is built for
// Intel's shadow stack (CET), whose return addresses a switch by `ret` would
// not match. AddressSanitizer is told of each switch instead
// (__sanitizer_start_switch_fiber): its swapcontext clears the shadow of the
// whole 256 KiB stack at every switch (half of the row-wise suite's time,
// the system calls a quarter more).
#if defined(__x86_64__) && defined(__LP64__) && defined(__ELF__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_HWADDRESS__) && !(defined(__CET__) && (__CET__ & 2))
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(hwaddress_sanitizer)
#define FUSOR_SIMT_UCONTEXT 1
#endif
#endif
#else
#define FUSOR_SIMT_UCONTEXT 1
#endif

#if FUSOR_SIMT_UCONTEXT
struct context {
  ucontext_t uc{};
};
inline void switch_context(context& from, context& to) { swapcontext(&from.uc, &to.uc); }
// `c` starts in entry() on `stack` and continues in `link` when it returns.
[[gnu::noinline]] inline void make_context(context& c, char* stack, std::size_t bytes, void (*entry)(),
                                           context& link) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = &link.uc;
  makecontext(&c.uc, entry, 0);
}
#else
struct context {
  void* sp = nullptr;  // where the switch saved the registers
#if FUSOR_SIMT_ASAN_FIBERS
  const void* stack_bottom = nullptr;  // the stack it runs on (its lowest address), for AddressSanitizer
  std::size_t stack_size = 0;
#endif
};
}  // namespace simt_emulation
}  // namespace fusor::detail
// fusor_simt_switch(from, to): pushes rbp, rbx, r12-r15 and the control
// words, stores rsp in *from, loads rsp from `to` and pops the same.
// fusor_simt_trampoline: where a new fiber starts (make_context). Weak:
// every translation unit including this header defines them, the linker
// keeps one of each.
extern "C" void fusor_simt_switch(void** from, void* to);
extern "C" void fusor_simt_trampoline();
asm(R"(
  .pushsection .text
  .weak fusor_simt_switch
  .type fusor_simt_switch, @function
fusor_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size fusor_simt_switch, .-fusor_simt_switch
  .weak fusor_simt_trampoline
  .type fusor_simt_trampoline, @function
fusor_simt_trampoline:
  subq $8, %rsp
  movq %r12, %rdi
  movq %r13, %rsi
  call *%r14
  ud2
  .size fusor_simt_trampoline, .-fusor_simt_trampoline
  .popsection
)");
namespace fusor::detail {
namespace simt_emulation {
#if FUSOR_SIMT_ASAN_FIBERS
// AddressSanitizer's protocol: announce the stack switched to (keeping this
// stack's detect_stack_use_after_return frames aside), switch, and on coming
// back take them again. A fiber's first run and its end (fiber_main) make
// the other halves of the pairs.
inline void switch_context(context& from, context& to) {
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, to.stack_bottom, to.stack_size);
  fusor_simt_switch(&from.sp, to.sp);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
}
// The fake stacks (detect_stack_use_after_return) of fibers that ended, with
// no frame left in them, for the next fibers: making one per fiber (its own
// mappings) made the emulated suites three times slower than swapcontext.
struct fake_stack_pool {
  static constexpr int capacity = 2048;
  void* stacks[capacity];
  int count = 0;
};
inline fake_stack_pool& fake_stacks() {
  thread_local fake_stack_pool pool;
  return pool;
}
inline thread_local void* ended_fiber_sp = nullptr;  // where an ended fiber's last switch saves its registers
#else
inline void switch_context(context& from, context& to) { fusor_simt_switch(&from.sp, to.sp); }
#endif

// A new fiber's first switch "returns" into fusor_simt_trampoline (above),
// which calls r14 (fiber_main) with r12 (the entry) and r13 (the link), as
// make_context left them among the saved registers.
[[noreturn]] inline void fiber_main(void (*entry)(), context* link) {
#if FUSOR_SIMT_ASAN_FIBERS
  // The switch into this fiber completes here, with an ended fiber's fake
  // stack if one is pooled; the stack it came from is the link's (the
  // scheduler's: the host thread's own), learnt now.
  fake_stack_pool& pool = fake_stacks();
  __sanitizer_finish_switch_fiber(pool.count > 0 ? pool.stacks[--pool.count] : nullptr, &link->stack_bottom,
                                  &link->stack_size);
  entry();
  // Leaving for good: ASan hands this fiber's fake stack to the pool (or,
  // with the pool full, null makes it free the stack).
  __sanitizer_start_switch_fiber(pool.count < fake_stack_pool::capacity ? &pool.stacks[pool.count++] : nullptr,
                                 link->stack_bottom, link->stack_size);
  fusor_simt_switch(&ended_fiber_sp, link->sp);
#else
  entry();
  context finished;
  switch_context(finished, *link);
#endif
  __builtin_unreachable();
}
inline void make_context(context& c, char* stack, std::size_t bytes, void (*entry)(), context& link) {
#if FUSOR_SIMT_ASAN_FIBERS
  c.stack_bottom = stack;
  c.stack_size = bytes;
#endif
  // The stack as fusor_simt_switch leaves it, lowest address first: the
  // control words (this thread's MXCSR, the x87's default), r15, r14, r13, r12, rbx,
  // rbp, then the trampoline as the return address, entered with
  // rsp = 8 mod 16 as after a call, and a null return address above it.
  const auto top = (reinterpret_cast<std::uintptr_t>(stack) + bytes) / 16 * 16;
  auto* const slot = reinterpret_cast<std::uint64_t*>(top - 72);
  slot[0] = std::uint64_t(__builtin_ia32_stmxcsr()) | (std::uint64_t(0x037fu) << 32);
  slot[1] = 0;                                                // r15
  slot[2] = reinterpret_cast<std::uint64_t>(&fiber_main);     // r14
  slot[3] = reinterpret_cast<std::uint64_t>(&link);           // r13
  slot[4] = reinterpret_cast<std::uint64_t>(entry);           // r12
  slot[5] = slot[6] = 0;                                      // rbx, rbp
  slot[7] = reinterpret_cast<std::uint64_t>(&fusor_simt_trampoline);
  slot[8] = 0;
  c.sp = slot;
}
#endif

enum class wait_kind { none, warp, block, cluster };

// A copy_async in flight: done by wait_async, so a read before the wait sees
// what shared memory held before (as it may on a GPU).
struct pending_copy {
  std::size_t at;     // offset in shared memory
  const void* from;   // null: 16 zero bytes (copy_async_16_or_zero outside)
};

// What happened to one byte of shared memory in this block: the barrier
// epochs (block_state::block_generation) of its last write and last read,
// and by which threads; the cluster barrier's epochs
// (cluster_state::generation) of its last write and of its last read by
// another block of the cluster.
struct byte_history {
  static constexpr std::uint64_t never = ~std::uint64_t(0);
  static constexpr int several = -2;  // readers: more than one thread this epoch
  std::uint64_t written = never, read = never;
  std::uint64_t cluster_written = never, remote_read = never;
  int writer = -1, reader = -1;
  int remote_reader = -1;  // the block (its rank) that read it last
  int in_flight = -1;      // the thread whose copy_async to it has not landed
};

struct fiber {
  context state{};
  std::unique_ptr<char[]> stack;
  bool done = false;
  wait_kind waiting = wait_kind::none;
  std::uint64_t generation = 0;  // of the barrier it waits at
  std::vector<pending_copy> copies;
};

// What the lanes of a warp hand each other at a collective.
struct warp_exchange {
  static constexpr std::size_t value_bytes = 32;  // the largest value a shuffle moves
  int live = 32, arrived = 0;
  std::uint64_t generation = 0;
  unsigned char values[32][value_bytes];
  std::uint32_t words[32][6];
  const void* addresses[32];
};

struct block_state;

// The blocks of one cluster (one block without clusters), run together: the
// cluster barrier's count and epoch, and the static shared arrays' layout,
// the same in every block of the launch.
struct cluster_state {
  std::vector<block_state*> blocks;
  int arrived = 0;
  std::uint64_t generation = 0;
  // Static shared memory (shared_array), after the dynamic: each array's
  // key (one per instantiation) and offset; bytes taken so far.
  std::size_t static_used = 0;
  std::vector<std::pair<const void*, std::size_t>> static_arrays;
  int live() const;
};

struct block_state {
  index_t x = 0, y = 0;
  simt_grid grid;
  int threads = 0, live = 0, current = 0;
  int rank = 0;  // in its cluster
  cluster_state* cluster = nullptr;
  unsigned char* shared = nullptr;
  std::size_t shared_bytes = 0;  // dynamic shared memory, from `shared`
  std::size_t static_begin = 0;  // where the static arrays start
  std::vector<byte_history> history;  // one per byte of shared memory
  std::vector<fiber> fibers;
  std::vector<warp_exchange> warps;
  int block_arrived = 0;
  std::uint64_t block_generation = 0;
  context scheduler{};
  const std::function<void(unsigned char*)>* body = nullptr;
  std::exception_ptr error;
  simt_counters counters;

  std::string where() const {
    return "block (" + std::to_string(x) + ", " + std::to_string(y) + "), thread " + std::to_string(current);
  }
};

inline int cluster_state::live() const {
  int n = 0;
  for (const block_state* b : blocks) n += b->live;
  return n;
}

inline thread_local block_state* current = nullptr;

inline block_state& state() { return *current; }

// The cluster barrier's release: it orders every block's threads too.
inline void release_cluster(cluster_state& c) {
  c.arrived = 0;
  ++c.generation;
  for (block_state* b : c.blocks) ++b->block_generation;
}

// Releases a block or cluster barrier whose every live thread has arrived
// (after one exits). A warp collective is not released: its lanes wait for
// the one that left, and the scheduler reports them.
inline void release_complete_barrier(block_state& s) {
  if (s.block_arrived > 0 && s.block_arrived == s.live) {
    s.block_arrived = 0;
    ++s.block_generation;
  }
  if (s.cluster->arrived > 0 && s.cluster->arrived == s.cluster->live()) release_cluster(*s.cluster);
}

inline void suspend(wait_kind kind, std::uint64_t generation) {
  block_state& s = state();
  fiber& f = s.fibers[std::size_t(s.current)];
  f.waiting = kind;
  f.generation = generation;
  switch_context(f.state, s.scheduler);
}

inline void wait_block() {
  block_state& s = state();
  if (++s.block_arrived == s.live) {
    s.block_arrived = 0;
    ++s.block_generation;
    return;
  }
  suspend(wait_kind::block, s.block_generation);
}

inline void wait_cluster() {
  cluster_state& c = *state().cluster;
  if (++c.arrived == c.live()) {
    release_cluster(c);
    return;
  }
  suspend(wait_kind::cluster, c.generation);
}

inline warp_exchange& this_warp() { return state().warps[std::size_t(state().current / 32)]; }

inline void wait_warp() {
  block_state& s = state();
  warp_exchange& w = this_warp();
  if (w.live != 32)
    throw error("fusor: simt emulator: a warp collective in " + s.where() + " after a lane of its warp exited");
  if (++w.arrived == 32) {
    w.arrived = 0;
    ++w.generation;
    return;
  }
  suspend(wait_kind::warp, w.generation);
}

// Bytes of static shared memory (shared_array) a launch may take.
inline constexpr std::size_t static_shared_capacity = 8192;

// The offset of [p, p + n) in shared memory, which it must lie in (the
// dynamic, or the static arrays taken so far), aligned to `align` bytes.
inline std::size_t shared_offset(const block_state& s, const void* p, std::size_t n, std::size_t align,
                                 const char* what) {
  const auto* b = static_cast<const unsigned char*>(p);
  const unsigned char* statics = s.shared + s.static_begin;
  const bool inside = (b >= s.shared && b + n <= s.shared + s.shared_bytes) ||
                      (b >= statics && b + n <= statics + s.cluster->static_used);
  if (!inside || std::size_t(b - s.shared) % align != 0)
    throw error("fusor: simt emulator: " + std::string(what) + " in " + s.where() + " at " +
                (b < s.shared || b >= s.shared + s.shared_bytes
                     ? std::string("an address outside the block's shared memory")
                     : "byte " + std::to_string(b - s.shared) + " of the block's " + std::to_string(s.shared_bytes) +
                           " bytes of shared memory") +
                ", " + std::to_string(n) + " bytes" +
                ": it must lie inside it, " + std::to_string(align) + "-byte aligned");
  return std::size_t(b - s.shared);
}

[[noreturn]] inline void shared_hazard(const block_state& s, std::size_t at, std::size_t n, std::size_t byte,
                                       const std::string& what) {
  throw error("fusor: simt emulator: shared-memory hazard in " + s.where() + ", accessing bytes [" +
              std::to_string(at) + ", " + std::to_string(at + n) + "): byte " + std::to_string(byte) + " " + what);
}

inline std::string thread_name(int t) {
  return t == byte_history::several ? std::string("several threads") : "thread " + std::to_string(t);
}

// This thread reads bytes [at, at + n) of shared memory.
inline void note_read(block_state& s, std::size_t at, std::size_t n) {
  const std::uint64_t now = s.block_generation;
  for (std::size_t i = at; i < at + n; ++i) {
    byte_history& h = s.history[i];
    if (h.in_flight >= 0)
      shared_hazard(s, at, n, i,
                    "is read while " + thread_name(h.in_flight) + "'s copy_async to it is in flight (before " +
                        (h.in_flight == s.current ? "this thread's" : "that thread's") +
                        " wait_async" + (h.in_flight == s.current ? ")" : " and a sync_block)"));
    if (h.written == byte_history::never)
      shared_hazard(s, at, n, i,
                    "is read before any thread of the block wrote it (a sync_block missing after the write, "
                    "or a read past what the block fills)");
    if (h.written == now && h.writer != s.current)
      shared_hazard(s, at, n, i, "is read after " + thread_name(h.writer) + " wrote it, with no sync_block between");
    if (h.read != now) {
      h.read = now;
      h.reader = s.current;
    } else if (h.reader != s.current) {
      h.reader = byte_history::several;
    }
  }
}

// This thread writes bytes [at, at + n) of shared memory (or starts an async copy to them).
inline void note_write(block_state& s, std::size_t at, std::size_t n) {
  const std::uint64_t now = s.block_generation;
  for (std::size_t i = at; i < at + n; ++i) {
    byte_history& h = s.history[i];
    if (h.in_flight >= 0)
      shared_hazard(s, at, n, i, "is written while " + thread_name(h.in_flight) + "'s copy_async to it is in flight");
    if (h.written == now && h.writer != s.current)
      shared_hazard(s, at, n, i, "is written after " + thread_name(h.writer) + " wrote it, with no sync_block between");
    if (h.read == now && h.reader != s.current)
      shared_hazard(s, at, n, i, "is written after " + thread_name(h.reader) + " read it, with no sync_block between");
    if (h.remote_read == s.cluster->generation)
      shared_hazard(s, at, n, i,
                    "is written after block rank " + std::to_string(h.remote_reader) +
                        " of the cluster read it, with no cluster_sync between");
    h.written = now;
    h.writer = s.current;
    h.cluster_written = s.cluster->generation;
  }
}

// This thread (of block s) reads bytes [at, at + n) of block `owner`'s shared
// memory, another block of its cluster: written there before the last cluster barrier.
inline void note_remote_read(block_state& s, block_state& owner, std::size_t at, std::size_t n) {
  const cluster_state& c = *s.cluster;
  for (std::size_t i = at; i < at + n; ++i) {
    byte_history& h = owner.history[i];
    const std::string there = " in block rank " + std::to_string(owner.rank) + " of the cluster";
    if (h.in_flight >= 0) shared_hazard(s, at, n, i, "is read" + there + " while a copy_async to it is in flight");
    if (h.written == byte_history::never)
      shared_hazard(s, at, n, i, "is read" + there + " before any thread of that block wrote it");
    if (h.cluster_written == c.generation)
      shared_hazard(s, at, n, i,
                    "is read" + there + " after its " + thread_name(h.writer) + " wrote it, with no cluster_sync between");
    h.remote_read = c.generation;
    h.remote_reader = s.rank;
  }
}

// Counts one warp's ldmatrix.x4 and the passes its matrices take beyond one
// (simt_counters): per matrix, the most distinct rows in one bank group.
inline void count_ldmatrix(block_state& s, const void* const (&rows)[32]) {
  ++s.counters.ldmatrix;
  for (int m = 0; m < 4; ++m) {
    std::size_t distinct[8][8];  // per bank group, the distinct row offsets seen
    int count[8] = {};
    int passes = 1;
    for (int i = 0; i < 8; ++i) {
      const auto offset = std::size_t(static_cast<const unsigned char*>(rows[8 * m + i]) - s.shared);
      const std::size_t group = offset / 16 % 8;
      bool seen = false;  // the same row twice is one read (a broadcast)
      for (int j = 0; j < count[group]; ++j) seen = seen || distinct[group][j] == offset;
      if (!seen) distinct[group][count[group]++] = offset;
      passes = count[group] > passes ? count[group] : passes;
    }
    s.counters.ldmatrix_extra_passes += std::uint64_t(passes - 1);
  }
}

inline void fiber_entry() {
  block_state& s = state();
  const int me = s.current;
  try {
    (*s.body)(s.shared);
  } catch (...) {
    if (!s.error) s.error = std::current_exception();
  }
  s.fibers[std::size_t(me)].done = true;
  --s.live;
  --s.warps[std::size_t(me / 32)].live;
  release_complete_barrier(s);
}  // returns to s.scheduler (the context's link)

inline bool runnable(const block_state& s, int i) {
  const fiber& f = s.fibers[std::size_t(i)];
  if (f.done) return false;
  switch (f.waiting) {
    case wait_kind::block: return f.generation != s.block_generation;
    case wait_kind::cluster: return f.generation != s.cluster->generation;
    case wait_kind::warp: return f.generation != s.warps[std::size_t(i / 32)].generation;
    default: return true;
  }
}

template <class T>
float half_of(std::uint32_t word, int half) {
  return convert<float>(fusor::from_bits<T>(std::uint16_t(word >> (16 * half))));
}

}  // namespace simt_emulation

// The Simt policy of kernels run by emulate_kernel (see warp_mma.hpp).
struct emulated_simt {
  static int thread() { return simt_emulation::state().current; }
  static int block_threads() { return simt_emulation::state().threads; }
  static index_t block_x() { return simt_emulation::state().x; }
  static index_t block_y() { return simt_emulation::state().y; }
  static index_t grid_x() { return simt_emulation::state().grid.x; }
  static index_t grid_y() { return simt_emulation::state().grid.y; }
  static void sync_block() { simt_emulation::wait_block(); }
  static float exp2(float x) { return std::exp2(x); }

  template <class T>
  static T shfl_xor(const T& v, int mask) {
    return shuffle(v, (thread() % 32) ^ (mask & 31));
  }
  template <class T>
  static T shfl(const T& v, int lane) {
    return shuffle(v, lane & 31);
  }
  // Lane `from`'s v, every lane of the warp taking part.
  template <class T>
  static T shuffle(const T& v, int from) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= simt_emulation::warp_exchange::value_bytes,
                  "fusor: simt emulator: shuffles move trivially copyable values of up to 32 bytes");
    simt_emulation::warp_exchange& w = simt_emulation::this_warp();
    const int lane = thread() % 32;
    std::memcpy(w.values[lane], &v, sizeof(T));
    simt_emulation::wait_warp();
    T theirs;
    std::memcpy(static_cast<void*>(&theirs), w.values[from], sizeof(T));
    simt_emulation::wait_warp();  // every lane has read before the next collective writes
    return theirs;
  }

  // A block's static shared array, one per instantiation (as a __shared__
  // variable): taken from the launch's static region at its first call,
  // filled with 0xff bytes in every block like the rest.
  template <class T, int N, class Tag>
  static T* shared_array() {
    static const char key = 0;
    simt_emulation::block_state& s = simt_emulation::state();
    simt_emulation::cluster_state& c = *s.cluster;
    for (const auto& [k, offset] : c.static_arrays)
      if (k == &key) return reinterpret_cast<T*>(s.shared + offset);
    const std::size_t at = (c.static_used + 15) / 16 * 16, bytes = sizeof(T) * std::size_t(N);
    if (at + bytes > simt_emulation::static_shared_capacity)
      throw error("fusor: simt emulator: static shared arrays of more than " +
                  std::to_string(simt_emulation::static_shared_capacity) + " bytes in " + s.where());
    c.static_used = at + bytes;
    c.static_arrays.emplace_back(&key, s.static_begin + at);
    return reinterpret_cast<T*>(s.shared + s.static_begin + at);
  }

  // Clusters (emulate_kernel's cluster_blocks; 1 without).
  static int cluster_blocks() { return int(simt_emulation::state().cluster->blocks.size()); }
  static int cluster_rank() { return simt_emulation::state().rank; }
  static void cluster_sync() { simt_emulation::wait_cluster(); }
  // p's T in block `rank`'s shared memory: written there before the last
  // cluster_sync, and that block not yet exited.
  template <class T>
  static T load_cluster_shared(const T* p, int rank) {
    simt_emulation::block_state& s = simt_emulation::state();
    const std::size_t at = simt_emulation::shared_offset(s, p, sizeof(T), alignof(T), "load_cluster_shared");
    const auto& blocks = s.cluster->blocks;
    if (rank < 0 || rank >= int(blocks.size()))
      throw error("fusor: simt emulator: load_cluster_shared in " + s.where() + " from block rank " +
                  std::to_string(rank) + " of a cluster of " + std::to_string(blocks.size()));
    simt_emulation::block_state& owner = *blocks[std::size_t(rank)];
    if (&owner == &s) {
      simt_emulation::note_read(s, at, sizeof(T));
    } else {
      if (owner.live == 0)
        throw error("fusor: simt emulator: load_cluster_shared in " + s.where() + " from block rank " +
                    std::to_string(rank) + " of the cluster after that block exited (a cluster_sync missing)");
      simt_emulation::note_remote_read(s, owner, at, sizeof(T));
    }
    T v;
    std::memcpy(static_cast<void*>(&v), owner.shared + at, sizeof(T));
    return v;
  }

  static void copy_async_16(void* to, const void* from) { copy_async_16_or_zero(to, from, true); }
  // Zeros where not inside (nothing read from `from`), landing at the wait as a copy does.
  static void copy_async_16_or_zero(void* to, const void* from, bool inside) {
    simt_emulation::block_state& s = simt_emulation::state();
    const std::size_t at = simt_emulation::shared_offset(s, to, 16, 16, "copy_async_16");
    if (reinterpret_cast<std::uintptr_t>(from) % 16 != 0)
      throw error("fusor: simt emulator: copy_async_16 in " + s.where() +
                  " from a global address not 16-byte aligned");
    simt_emulation::note_write(s, at, 16);  // it may land at once
    for (std::size_t i = at; i < at + 16; ++i) s.history[i].in_flight = s.current;
    s.fibers[std::size_t(s.current)].copies.push_back({at, inside ? from : nullptr});
  }
  static void commit_async() {}
  static void compiler_barrier() {}  // the emulator runs the code as written
  static void wait_async() {
    simt_emulation::block_state& s = simt_emulation::state();
    auto& copies = s.fibers[std::size_t(s.current)].copies;
    for (const auto& c : copies) {
      if (c.from) std::memcpy(s.shared + c.at, c.from, 16);
      else std::memset(s.shared + c.at, 0, 16);
      for (std::size_t i = c.at; i < c.at + 16; ++i) {
        simt_emulation::byte_history& h = s.history[i];
        h.in_flight = -1;
        h.written = s.block_generation;
        h.writer = s.current;
      }
    }
    copies.clear();
  }

  // Plain shared-memory accesses, checked (the GPU's are ld.shared and st.shared).
  template <class V>
  static V load_shared(const V* from) {
    simt_emulation::block_state& s = simt_emulation::state();
    const std::size_t at = simt_emulation::shared_offset(s, from, sizeof(V), alignof(V), "load_shared");
    simt_emulation::note_read(s, at, sizeof(V));
    V v;
    std::memcpy(static_cast<void*>(&v), from, sizeof(V));
    return v;
  }
  template <class V>
  static void store_shared(V* to, const V& v) {
    simt_emulation::block_state& s = simt_emulation::state();
    const std::size_t at = simt_emulation::shared_offset(s, to, sizeof(V), alignof(V), "store_shared");
    simt_emulation::note_write(s, at, sizeof(V));
    std::memcpy(static_cast<void*>(to), &v, sizeof(V));
  }
  // Global memory shared by the blocks: they run one after another here, so
  // the fence orders nothing the emulator could reorder.
  static unsigned atomic_add(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
  static void fence_device() { std::atomic_thread_fence(std::memory_order_seq_cst); }
  template <class V>
  static V load_global_coherent(const V* from) { return *from; }

  static void zero_shared_16(void* to) {
    simt_emulation::block_state& s = simt_emulation::state();
    const std::size_t at = simt_emulation::shared_offset(s, to, 16, 16, "zero_shared_16");
    simt_emulation::note_write(s, at, 16);
    std::memset(to, 0, 16);
  }

  template <bool Trans>
  static void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
    simt_emulation::block_state& s = simt_emulation::state();
    simt_emulation::note_read(s, simt_emulation::shared_offset(s, row, 16, 16, "an ldmatrix row"), 16);
    simt_emulation::warp_exchange& w = simt_emulation::this_warp();
    const int lane = thread() % 32;
    w.addresses[lane] = row;
    simt_emulation::wait_warp();
    if (lane == 0) simt_emulation::count_ldmatrix(s, w.addresses);
    auto value = [&](int matrix, int r_, int c) {
      std::uint16_t bits;
      std::memcpy(&bits, static_cast<const unsigned char*>(w.addresses[matrix * 8 + r_]) + 2 * c, 2);
      return std::uint32_t(bits);
    };
    for (int m = 0; m < 4; ++m) {
      const int t4 = lane / 4, pair = 2 * (lane % 4);
      r[m] = Trans ? value(m, pair, t4) | (value(m, pair + 1, t4) << 16)
                   : value(m, t4, pair) | (value(m, t4, pair + 1) << 16);
    }
    simt_emulation::wait_warp();
  }

  template <class T>
  static void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    static_assert(std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>, "fusor: mma takes bf16 or fp16");
    simt_emulation::warp_exchange& w = simt_emulation::this_warp();
    const int lane = thread() % 32;
    for (int i = 0; i < 4; ++i) w.words[lane][i] = a[i];
    w.words[lane][4] = b0;
    w.words[lane][5] = b1;
    simt_emulation::wait_warp();
    auto A = [&](int m, int k) {
      return simt_emulation::half_of<T>(w.words[(m % 8) * 4 + (k % 8) / 2][(m >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2);
    };
    auto B = [&](int k, int n) {
      return simt_emulation::half_of<T>(w.words[n * 4 + (k % 8) / 2][k >= 8 ? 5 : 4], k % 2);
    };
    const int g = lane / 4, q = lane % 4;
    float out[4];
    for (int i = 0; i < 4; ++i) {
      const int m = g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
      double sum = 0;
      for (int k = 0; k < 16; ++k) sum += double(A(m, k)) * double(B(k, n));
      out[i] = float(double(d[i]) + sum);
    }
    simt_emulation::wait_warp();
    for (int i = 0; i < 4; ++i) d[i] = out[i];
  }
};

// Runs body(shared) in every thread of every block of `grid`, `threads` (a
// multiple of 32) threads a block with `shared_bytes` of shared memory, as a
// launch would; with cluster_blocks > 1 (up to 16, dividing grid.x), the
// blocks of each cluster run together (cluster_sync, load_cluster_shared).
// Rethrows the first error a thread raised, and throws one where threads
// wait at a barrier the others never reach. Returns the launch's counters.
inline simt_counters emulate_kernel(simt_grid grid, int threads, std::size_t shared_bytes,
                                    const std::function<void(unsigned char*)>& body, int cluster_blocks = 1) {
  if (threads <= 0 || threads % 32 != 0 || threads > 1024)
    throw error("fusor: simt emulator: blocks of " + std::to_string(threads) +
                " threads; it runs whole warps, up to 1024 threads");
  if (cluster_blocks < 1 || cluster_blocks > 16 || grid.x % cluster_blocks != 0)
    throw error("fusor: simt emulator: clusters of " + std::to_string(cluster_blocks) + " blocks over a grid of " +
                std::to_string(grid.x) + ": a cluster is 1 to 16 blocks and divides the grid's x");
  namespace se = simt_emulation;
  const std::size_t static_begin = (shared_bytes + 127) / 128 * 128,
                    all_bytes = static_begin + se::static_shared_capacity;
  se::cluster_state cluster;
  const auto block_count = static_cast<std::size_t>(cluster_blocks);
  std::vector<se::block_state> blocks(block_count);
  std::vector<std::vector<unsigned char>> shared_storage(block_count);
  simt_counters counters;
  for (int rank = 0; rank < cluster_blocks; ++rank) {
    se::block_state& s = blocks[std::size_t(rank)];
    std::vector<unsigned char>& storage = shared_storage[std::size_t(rank)];
    storage.resize(all_bytes + 128);
    s.shared = storage.data() + (128 - reinterpret_cast<std::uintptr_t>(storage.data()) % 128);
    s.grid = grid;
    s.threads = threads;
    s.rank = rank;
    s.cluster = &cluster;
    s.shared_bytes = shared_bytes;
    s.static_begin = static_begin;
    s.body = &body;
    s.fibers.resize(std::size_t(threads));
    for (se::fiber& f : s.fibers) f.stack = se::take_stack();
    cluster.blocks.push_back(&s);
  }
  se::stack_pool().reserve(se::pooled_stacks);  // returning a stack then never allocates (or throws)
  struct return_stacks {  // to the pool, whether the launch ends or throws
    std::vector<se::block_state>& blocks;
    ~return_stacks() {
      for (se::block_state& s : blocks)
        for (se::fiber& f : s.fibers)
          if (f.stack && se::stack_pool().size() < se::pooled_stacks) se::stack_pool().push_back(std::move(f.stack));
    }
  } return_stacks_at_exit{blocks};
  se::block_state* const outer = se::current;
  struct restore {
    se::block_state* outer;
    ~restore() { se::current = outer; }
  } restore_current{outer};

  // Clusters run one after another, but not in index order: a GPU runs them
  // in any order, so a kernel whose blocks meet through global memory (the
  // last to arrive finishes the work) must not count on the last being the
  // highest-numbered. The order is fixed: cluster k of the launch is the
  // (k * step + count / 2) % count-th, with step coprime to count.
  const index_t clusters_per_row = grid.x / cluster_blocks, count = clusters_per_row * grid.y;
  index_t step = std::max<index_t>(1, count * 5 / 8);
  while (std::gcd(step, count) != 1) ++step;
  for (index_t k = 0, c = count / 2; k < count; ++k, c = (c + step) % count) {
    const index_t y = c / clusters_per_row, x0 = c % clusters_per_row * cluster_blocks;
    cluster.arrived = 0;
    for (se::block_state& s : blocks) {
      se::current = &s;
      s.x = x0 + s.rank;
      s.y = y;
      s.live = threads;
      s.block_arrived = 0;
      s.warps.assign(std::size_t(threads / 32), se::warp_exchange{});
      std::memset(s.shared, 0xff, all_bytes);
      s.history.assign(all_bytes, se::byte_history{});
      for (int i = 0; i < threads; ++i) {
        se::fiber& f = s.fibers[std::size_t(i)];
        f.done = false;
        f.waiting = se::wait_kind::none;
        f.copies.clear();
        se::make_context(f.state, f.stack.get(), se::stack_bytes, se::fiber_entry, s.scheduler);
      }
    }
    while (cluster.live() > 0) {
      bool ran = false;
      for (se::block_state& s : blocks)
        for (int i = 0; i < threads; ++i) {
          if (!se::runnable(s, i)) continue;
          s.fibers[std::size_t(i)].waiting = se::wait_kind::none;
          se::current = &s;
          s.current = i;
          ran = true;
          se::switch_context(s.scheduler, s.fibers[std::size_t(i)].state);
          if (s.error) std::rethrow_exception(s.error);  // the first error; the other threads stop where they are
        }
      if (!ran && cluster.live() > 0)
        throw error("fusor: simt emulator: in block (" + std::to_string(x0) + ", " + std::to_string(y) + ")" +
                    (cluster_blocks > 1 ? " and the rest of its cluster of " + std::to_string(cluster_blocks)
                                        : std::string()) +
                    ", " + std::to_string(cluster.live()) +
                    " threads wait at a barrier or warp collective the others never reach");
    }
  }
  for (const se::block_state& s : blocks) {
    counters.ldmatrix += s.counters.ldmatrix;
    counters.ldmatrix_extra_passes += s.counters.ldmatrix_extra_passes;
  }
  return counters;
}

}  // namespace fusor::detail

#endif  // !FUSOR_HAS_CUDA
