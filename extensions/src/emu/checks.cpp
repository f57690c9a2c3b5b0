// memcheck, racecheck and initcheck on the emulated device (what they check: emulator.h). The
// emulated kernels are compiled with gcc's -fsanitize=thread instrumentation, which calls
// __tsan_read4(addr), __tsan_write8(addr), __tsan_atomic32_fetch_add(addr, ...) and so on before
// every load, store and atomic operation (scalar, vector, TLS, through any pointer), and with
// -fsanitize=bounds, which calls __ubsan_handle_out_of_bounds for an array index past a known
// bound (static __shared__ arrays). This file defines those hooks itself: no sanitizer runtime is
// linked, so the hooks cost a call and a few compares, and they check only while a kernel runs
// (the caller's stack pointer lies in the emulator's fiber stacks). memcpy, memmove and memset in
// the emulated sources come here too (cuda_runtime.h renames them).
#define GPUMAT_EMU_ENGINE  // the C library's memcpy, memset (see cuda_runtime.h)
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "internal.h"

namespace gpumat::emulator::detail {

namespace {

// ============================================================================ modules

// Static __shared__ variables are thread-local variables of the module (shared object or
// executable) that holds the kernel: an instrumented access inside any module's thread-local block
// is a shared-memory access. A kernel may also read its module's constants and write its
// __device__ variables: the loaded segments of a module whose code made an access are allowed.
std::atomic<bool> g_instrumented{false};

struct ModuleScan {
  uintptr_t code = 0;                                   // find the module holding this address (0: none)
  std::vector<std::pair<uintptr_t, uintptr_t>> tls;     // this thread's TLS block of each module
  std::vector<std::pair<uintptr_t, uintptr_t>> images;  // the loaded segments of the module of `code`
};

int scan_module(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<ModuleScan*>(data);
  bool holds_code = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) & ph = info->dlpi_phdr[i];
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (ph.p_type == PT_LOAD && out->code >= lo && out->code < hi) holds_code = true;
    if (ph.p_type == PT_TLS && info->dlpi_tls_data != nullptr && ph.p_memsz > 0)
      out->tls.emplace_back(reinterpret_cast<uintptr_t>(info->dlpi_tls_data),
                            reinterpret_cast<uintptr_t>(info->dlpi_tls_data) + ph.p_memsz);
  }
  if (holds_code)
    for (int i = 0; i < info->dlpi_phnum; ++i)
      if (info->dlpi_phdr[i].p_type == PT_LOAD)
        out->images.emplace_back(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr,
                                 info->dlpi_addr + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz);
  return 0;
}

// Per worker thread: the loaded segments of the modules whose kernels it has run.
thread_local std::vector<std::pair<uintptr_t, uintptr_t>> t_images;

// Finds the thread-local blocks of this thread (the emulator's own module first: most shared
// accesses are its kernels'), keeping the shadow of those already known; with `code`, also the
// loaded segments of the module that holds that address.
void refresh_modules(Active& a, uintptr_t code = 0) {
  const bool quiet = a.quiet;
  a.quiet = true;  // the emulator's own containers below
  ModuleScan r;
  r.code = code;
  dl_iterate_phdr(scan_module, &r);
  const uintptr_t own = reinterpret_cast<uintptr_t>(&t_images);
  std::stable_partition(r.tls.begin(), r.tls.end(), [own](const std::pair<uintptr_t, uintptr_t>& t) {
    return own >= t.first && own < t.second;
  });
  std::vector<SharedRegion> tls;
  for (auto [lo, hi] : r.tls) {
    SharedRegion region;
    for (SharedRegion& old : a.tls)
      if (old.lo == lo && old.size == hi - lo) region = std::move(old);
    region.lo = lo;
    region.size = hi - lo;
    region.resize((region.size + 3) / 4);
    tls.push_back(std::move(region));
  }
  a.tls = std::move(tls);
  a.tls0_lo = a.tls.empty() ? 0 : a.tls[0].lo;
  a.tls0_size = a.tls.empty() ? 0 : a.tls[0].size;
  a.tls0_shadow = a.tls.empty() ? nullptr : a.tls[0].shadow.data();
  a.tls0_read_ok = a.tls.empty() ? nullptr : a.tls[0].read_ok.data();
  a.tls0_epochs = a.tls.empty() ? nullptr : a.tls[0].epochs.data();
  t_images.insert(t_images.end(), r.images.begin(), r.images.end());
  a.quiet = quiet;
}

// ============================================================================ reports

std::string hex(uintptr_t p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#" PRIxPTR, p);
  return buf;
}

const char* access_name(unsigned kind) {
  if (kind & kAtomic) return "atomic";
  return (kind & kWrite) ? "write" : "read";
}

// Ends the running thread's block with the report what() builds, when `check` is enabled (else
// returns). The report is built with the hooks quiet (its strings are the emulator's own memory).
template <typename What>
void report(const Active& a, unsigned check, What what) {
  if ((a.checks & check) == 0) return;
  const_cast<Active&>(a).quiet = true;  // the fiber ends here: the engine's code from now on
  const char* name = check == kMemcheck ? "memcheck" : check == kRacecheck ? "racecheck" : "initcheck";
  fault_running_thread(std::string(name) + ": " + what());
}

std::string sized(size_t n, unsigned kind, const char* space, uintptr_t p) {
  return std::string("invalid ") + space + " " + access_name(kind) + " of " + std::to_string(n) +
         " bytes at " + hex(p);
}

// ============================================================================ global memory

// The plain-write shadow word: the launch, and the block (low 22 bits) and thread that wrote.
constexpr uint64_t writer_tag(uint32_t launch, uint64_t block, uint32_t thread) {
  return uint64_t{launch} << 32 | (block & 0x3FFFFF) << 10 | thread;
}

// Racecheck's shadow of segment s, allocated at the first plain kernel write to it. Without host
// memory for it the launch fails as out of memory (not unchecked): tried once per launch (the
// launch's other threads fail without trying again), and again by the next launch.
uint64_t* race_shadow(Active& a, Segment* s) {
  uint64_t* r = s->race.load(std::memory_order_acquire);
  if (r != nullptr) return r;
  const size_t shadow_bytes = s->capacity / 4 * sizeof(uint64_t);
  if (s->race_failed.load(std::memory_order_relaxed) != a.launch_seq) {
    if (auto* fresh = new (std::nothrow) uint64_t[s->capacity / 4]()) {
      if (s->race.compare_exchange_strong(r, fresh, std::memory_order_acq_rel)) {
        race_shadow_made(s);
        return fresh;
      }
      delete[] fresh;
      return r;
    }
    s->race_failed.store(a.launch_seq, std::memory_order_relaxed);
  }
  fault_running_thread("racecheck: no host memory for the " + std::to_string(shadow_bytes) +
                           "-byte shadow of the " + std::to_string(s->bytes) + "-byte allocation at " +
                           hex(s->base) + " (GPUMAT_EMU_CHECKS=memcheck,initcheck runs without racecheck)",
                       /*out_of_memory=*/true);
}

// Whether racecheck's writer tag `old` of a word this thread (tag `me`) writes is another block's
// in the same launch: a plain write of each, a lost update on a GPU.
inline bool other_blocks_write(const Active& a, uint64_t old, uint64_t me) {
  return (old >> 32) == a.launch_seq && ((old ^ me) >> 10 & 0x3FFFFF) != 0;
}

[[gnu::noinline]] void report_plain_write_race(Active& a, const Active::CachedSegment& c, size_t w,
                                               uint64_t old) {
  report(a, kRacecheck, [&] {
    return "plain writes to the same global memory at " + hex(c.base + (w << 2)) + " (" +
           describe_device_address(c.base + (w << 2), 4) + ") by " + block_coords(old >> 10 & 0x3FFFFF) +
           " " + thread_coords(static_cast<uint32_t>(old & 0x3FF)) +
           " and by this thread, of another block, in one launch (a lost update: make it an atomic, or write "
           "each address from one block)";
  });
}

// An access inside segment c's live bytes.
void global_access(Active& a, Active::CachedSegment& c, uintptr_t p, size_t n, unsigned kind) {
  if (!(kind & kUnaligned) && n > 1 && (p & (n - 1)) != 0)
    report(a, kMemcheck, [&] {
      return sized(n, kind, "__global__", p) + ": misaligned (a " + std::to_string(n) +
             "-byte access needs a multiple of " + std::to_string(n) + ")";
    });
  const size_t off = p - c.base;
  uint8_t* init = c.init;
  const bool words = (off & 3) == 0 && (n & 3) == 0;
  if ((kind & kRead) && (a.checks & kInitcheck)) {
    bool ok = true;
    if (words)
      for (size_t w = off >> 2, e = (off + n) >> 2; w < e; ++w) ok &= init[w] == 0x0F;
    else
      for (size_t i = off; i < off + n; ++i) ok &= (init[i >> 2] >> (i & 3)) & 1u;
    if (__builtin_expect(!ok, 0))
      report(a, kInitcheck, [&] {
        return std::string(access_name(kind)) + " of " + std::to_string(n) +
               " bytes of uninitialised device memory at " + hex(p) + " (" + describe_device_address(p, n) +
               "): no kernel, copy or memset has written it since it was allocated";
      });
  }
  if (!(kind & kWrite)) return;
  if (words) {
    for (size_t w = off >> 2, e = (off + n) >> 2; w < e; ++w)
      if (init[w] != 0x0F) init[w] = 0x0F;
  } else {
    for (size_t i = off; i < off + n; ++i)
      if (!((init[i >> 2] >> (i & 3)) & 1u))
        __atomic_fetch_or(&init[i >> 2], uint8_t(1u << (i & 3)), __ATOMIC_RELAXED);
  }
  // Racecheck: a plain write of 4 or more bytes to a word that another block of this launch wrote
  // (per 4-byte word, so smaller writes are not compared).
  if ((kind & kAtomic) || !(a.checks & kRacecheck) || n < 4) return;
  if (c.race == nullptr) c.race = race_shadow(a, c.seg);  // or the launch ends here
  const uint64_t me = writer_tag(a.launch_seq, a.block_linear, a.thread);
  for (size_t w = off >> 2, e = (off + n + 3) >> 2; w < e; ++w) {
    const uint64_t old = __atomic_exchange_n(&c.race[w], me, __ATOMIC_RELAXED);
    if (__builtin_expect(other_blocks_write(a, old, me), 0)) report_plain_write_race(a, c, w, old);
  }
}

// The fast path of an aligned plain write of N bytes (a multiple of 4) at offset `off` of cached
// segment c: true when done (the words were initialised already; racecheck's writer tags set),
// false for global_access to do it.
template <size_t N>
[[gnu::always_inline]] inline bool global_write_fast(Active& a, const Active::CachedSegment& c,
                                                     uintptr_t off) {
  const size_t w0 = off >> 2;
  for (size_t w = 0; w < N / 4; ++w)
    if (c.init[w0 + w] != 0x0F) return false;
  if (!(a.checks & kRacecheck)) return true;
  if (c.race == nullptr) return false;
  const uint64_t me = writer_tag(a.launch_seq, a.block_linear, a.thread);
  for (size_t w = w0; w < w0 + N / 4; ++w) {
    const uint64_t old = __atomic_exchange_n(&c.race[w], me, __ATOMIC_RELAXED);
    if (__builtin_expect(other_blocks_write(a, old, me), 0)) {
      report_plain_write_race(a, c, w, old);  // ends the thread
      return true;
    }
  }
  return true;
}

// ============================================================================ shared memory

// Whether the access by the running thread is ordered after one by `other` (thread + 1) at warp
// epoch `epoch` in the same barrier interval: both in one warp, and this thread has passed a warp
// collective since (taken to include the other lane).
bool warp_ordered(const Active& a, uint32_t other, uint32_t epoch) {
  return (other - 1) / 32 == a.thread / 32 && a.warp_epoch > epoch;
}

std::string where_shared(const Active& a, const SharedRegion& r, uintptr_t p) {
  const bool dynamic = &r == &a.dynamic_smem;
  return std::string(dynamic ? "dynamic" : "static") + " shared memory at " + hex(p) +
         (dynamic ? " (byte " + std::to_string(p - r.lo) + " of " + std::to_string(r.size) + ")" : "");
}

void shared_access(Active& a, SharedRegion& r, uintptr_t p, size_t n, unsigned kind) {
  if (!(kind & kUnaligned) && n > 1 && (p & (n - 1)) != 0)
    report(a, kMemcheck, [&] { return sized(n, kind, "__shared__", p) + ": misaligned"; });
  if (p + n > r.lo + r.size) {
    report(a, kMemcheck, [&] {
      return sized(n, kind, "__shared__", p) + ": past the end of the block's " +
             (&r == &a.dynamic_smem ? std::to_string(r.size) + " bytes of dynamic" : std::string("static")) +
             " shared memory";
    });
    return;  // memcheck is off: nothing to track
  }
  const uint16_t me = static_cast<uint16_t>(a.thread + 1);
  const uint16_t warp = static_cast<uint16_t>(a.thread / 32);
  const uint32_t interval = a.interval;
  const bool race = !(kind & kAtomic) && (a.checks & kRacecheck);
  for (uintptr_t word = p & ~uintptr_t{3}; word < p + n; word += 4) {
    const uintptr_t lo = std::max(word, p), hi = std::min(word + 4, p + n);
    const uint8_t mask = static_cast<uint8_t>(((1u << (hi - lo)) - 1) << (lo - word));
    const size_t index = (word - r.lo) >> 2;
    SharedWord& e = r.shadow[index];
    WordEpochs& ep = r.epochs[index];
    if (e.write_interval < a.first_interval) e.init = 0;  // nothing written in this block yet
    if (e.read_interval < a.first_interval) e.reader = 0;
    if (kind & kRead) {
      if ((e.init & mask) != mask) {
        // Poison (NaN bytes) what this block has not written: the value a GPU leaves there is
        // undefined, not the previous block's.
        for (int b = 0; b < 4; ++b)
          if ((mask >> b & 1u) && !(e.init >> b & 1u)) reinterpret_cast<volatile uint8_t*>(word)[b] = 0xFF;
        report(a, kInitcheck, [&] {
          return std::string(access_name(kind)) + " of " + std::to_string(n) + " bytes of " +
                 where_shared(a, r, p) +
                 " that no thread of this block has written (shared memory starts undefined in every block)";
        });
      }
      if (race) {
        if (e.write_interval == interval && e.writer != 0 && e.writer != me &&
            !warp_ordered(a, e.writer, ep.write))
          report(a, kRacecheck, [&] {
            return "read-after-write hazard on " + where_shared(a, r, p) + ": " +
                   thread_coords(e.writer - 1u) +
                   " wrote it and this thread reads it with no __syncthreads() (or __syncwarp() in one warp) "
                   "between";
          });
        if (e.read_interval != interval) {
          e.read_interval = interval;
          e.reader = me;
          e.read_warp = warp;
          ep.read = a.warp_epoch;
        } else {
          if (e.reader != me) e.reader = kManyReaders;
          if (e.read_warp != warp) e.read_warp = kManyWarps;
          ep.read = std::max(ep.read, a.warp_epoch);
          // Written in an earlier interval of this block, read by several threads in this one: a
          // further read in this interval finds nothing and changes nothing (see read_ok).
          if (e.reader == kManyReaders && e.write_interval != interval &&
              e.write_interval >= a.first_interval && e.init == 0x0F)
            r.read_ok[index] = SharedRegion::ReadOk{interval, e.read_warp};
        }
      }
    }
    if (kind & kWrite) {
      r.read_ok[index] = SharedRegion::ReadOk{};
      if (e.init == 0 && mask != 0x0F) {
        // A partial first write: the word's other bytes are undefined too.
        for (int b = 0; b < 4; ++b)
          if (!(mask >> b & 1u)) reinterpret_cast<volatile uint8_t*>(word)[b] = 0xFF;
      }
      if (race) {
        if (e.write_interval == interval && e.writer != 0 && e.writer != me &&
            !warp_ordered(a, e.writer, ep.write))
          report(a, kRacecheck, [&] {
            return "write-after-write hazard on " + where_shared(a, r, p) + ": " +
                   thread_coords(e.writer - 1u) +
                   " and this thread write it with no __syncthreads() (or __syncwarp() in one warp) between";
          });
        if (e.read_interval == interval && e.reader != 0 && e.reader != me) {
          // Ordered when every reader is in this thread's warp and it has passed a collective since.
          const bool ordered = e.read_warp == warp && a.warp_epoch > ep.read;
          if (!ordered)
            report(a, kRacecheck, [&] {
              return "write-after-read hazard on " + where_shared(a, r, p) + ": " +
                     (e.reader == kManyReaders ? std::string("other threads")
                                               : thread_coords(e.reader - 1u)) +
                     " read it and this thread overwrites it with no __syncthreads() (or __syncwarp() in one "
                     "warp) between";
            });
        }
        e.writer = me;
        ep.write = a.warp_epoch;
      } else if (e.write_interval != interval) {
        e.writer = 0;  // an atomic, or racecheck off: no plain writer to compare with
      }
      e.write_interval = interval;
      e.init |= mask;
    }
  }
}

// ============================================================================ dispatch

bool in_range(uintptr_t p, uintptr_t lo, uintptr_t size) { return p - lo < size; }

// Everything but the running thread's stack, the last global segment and the emulator's own module's
// static shared memory; `code` is the instrumented code that made the access.
[[gnu::noinline]] void check_slow(Active& a, uintptr_t p, size_t n, unsigned kind, uintptr_t code,
                                  bool retried = false) {
  for (size_t i = 1; i < a.tls.size(); ++i)  // static shared memory of kernels in other modules
    if (in_range(p, a.tls[i].lo, a.tls[i].size)) return shared_access(a, a.tls[i], p, n, kind);
  // Global memory not in the cached segments: it becomes the most recent one.
  if (Segment* s = segment_at(p)) {
    const size_t live = s->live.load(std::memory_order_relaxed);
    if (p - s->base < live && n <= live - (p - s->base) && !s->cached.load(std::memory_order_relaxed)) {
      for (int i = Active::kCachedSegments - 1; i > 0; --i) a.seg[i] = a.seg[i - 1];
      a.seg[0] =
          Active::CachedSegment{s->base, live, s->init.get(), s->race.load(std::memory_order_acquire), s};
      return global_access(a, a.seg[0], p, n, kind);
    }
    return report(a, kMemcheck,
                  [&] { return sized(n, kind, "__global__", p) + ": " + describe_device_address(p, n); });
  }
  if (in_range(p, reinterpret_cast<uintptr_t>(gpumat_emu_slots.headers),
               (gpumat_emu_slots.size >> kSlotShift) * sizeof(SlotHeader)))
    return;  // the slot headers (read without quiet_load on other processors)
  if (on_slot(p))
    return report(a, kMemcheck, [&] { return sized(n, kind, "local", p) + ": the stack of another thread"; });
  for (auto [lo, hi] : t_images)
    if (p >= lo && p < hi) return;  // constants and __device__ variables of the kernel's module
  if (a.dynamic_smem.size > 0 && p + 4096 > a.dynamic_smem.lo &&
      p < a.dynamic_smem.lo + a.dynamic_smem.size + 4096)
    return report(a, kMemcheck, [&] {
      return sized(n, kind, "__shared__", p) + ": outside the block's " +
             std::to_string(a.dynamic_smem.size) + " bytes of dynamic shared memory";
    });
  if (!retried) {  // learn the kernel's module, and thread-local blocks allocated since
    refresh_modules(a, code);
    return check_slow(a, p, n, kind, code, true);
  }
  report(a, kMemcheck, [&] {
    return sized(n, kind, "__global__", p) + ": " + describe_device_address(p, n) +
           " (a host address? kernels may only use device memory)";
  });
}

// The running kernel thread's view, or nullptr for host code and for the emulator's own code.
inline Active* running() {
  const uintptr_t sp = stack_pointer();
  if (!on_slot(sp)) return nullptr;  // not a kernel: host code
  Active* a = static_cast<Active*>(slot_header(sp)->checks);
  return a->quiet ? nullptr : a;
}

void classify(Active& a, uintptr_t p, size_t n, unsigned kind, uintptr_t code) {
  for (Active::CachedSegment& c : a.seg)
    if (p - c.base < c.live && n <= c.live - (p - c.base)) return global_access(a, c, p, n, kind);
  if (p - a.slot < kSlotBytes) return;          // the thread's own stack
  if (p - a.params_lo < a.params_size) return;  // the launch's argument block
  if (p - a.tls0_lo < a.tls0_size) return shared_access(a, a.tls[0], p, n, kind);
  if (p - a.dynamic_smem.lo < a.dynamic_smem.size) return shared_access(a, a.dynamic_smem, p, n, kind);
  check_slow(a, p, n, kind, code);
}

// Quiet meanwhile: the checks' own code may share library functions with instrumented code.
[[gnu::noinline]] void check(Active& a, uintptr_t p, size_t n, unsigned kind, uintptr_t code) {
  a.quiet = true;
  classify(a, p, n, kind, code);
  a.quiet = false;
}

// An access while the launch is profiled: counted, then checked.
[[gnu::noinline]] void profile_and_check(Active& a, uintptr_t p, size_t n, unsigned kind, uintptr_t code) {
  profile_access(a, p, n, kind, code);
  check(a, p, n, kind, code);
}

// check() of an access known to be in the emulator's module's static shared memory (tls[0]).
[[gnu::noinline]] void check_static_shared(Active& a, uintptr_t p, size_t n, unsigned kind) {
  a.quiet = true;
  shared_access(a, a.tls[0], p, n, kind);
  a.quiet = false;
}

// `code`: where the instrumented access is (the hook's return address).
inline void hook(const volatile void* p, size_t n, unsigned kind, void* code) {
  if (Active* a = running()) {
    if (__builtin_expect(a->profile != nullptr, 0))
      profile_access(*a, reinterpret_cast<uintptr_t>(p), n, kind, reinterpret_cast<uintptr_t>(code));
    check(*a, reinterpret_cast<uintptr_t>(p), n, kind, reinterpret_cast<uintptr_t>(code));
  }
}

// shared_access's common transitions of an aligned 4-byte plain access to static shared word
// `index` (tls[0]) with racecheck on, none of which can find a hazard, with the same effect on the
// shadow; false: shared_access must decide. Reads of a word written in an earlier interval of this
// block: the interval's first read, this thread's again, another thread's (then read_ok); writes:
// the interval's first access, or this thread's own whole word again.
template <unsigned Kind>
[[gnu::always_inline]] inline bool static_shared_fast(Active& a, size_t index) {
  SharedWord& e = a.tls0_shadow[index];
  const uint16_t me = static_cast<uint16_t>(a.thread + 1);
  const uint16_t warp = static_cast<uint16_t>(a.thread / 32);
  const uint32_t interval = a.interval;
  if constexpr (Kind == kRead) {
    if (e.write_interval < a.first_interval || e.write_interval == interval || e.init != 0x0F)
      return false;  // not written in this block (initcheck), or in this interval (a hazard?)
    if (e.read_interval != interval) {  // the interval's first read
      e.read_interval = interval;
      e.reader = me;
      e.read_warp = warp;
      a.tls0_epochs[index].read = a.warp_epoch;
      return true;
    }
    WordEpochs& ep = a.tls0_epochs[index];
    ep.read = std::max(ep.read, a.warp_epoch);
    if (e.reader == me) return true;  // only this thread's reads so far
    e.reader = kManyReaders;
    if (e.read_warp != warp) e.read_warp = kManyWarps;
    a.tls0_read_ok[index] = SharedRegion::ReadOk{interval, e.read_warp};
    return true;
  } else {
    if (e.write_interval == interval) {  // this thread's own whole word again, nobody else read it
      if (e.writer != me || e.init != 0x0F || (e.read_interval == interval && e.reader != me)) return false;
      a.tls0_epochs[index].write = a.warp_epoch;
      return true;
    }
    if (e.read_interval == interval) return false;
    // The interval's first access: a whole-word write, nothing to compare with.
    if (e.read_interval < a.first_interval) e.reader = 0;
    a.tls0_read_ok[index] = SharedRegion::ReadOk{};
    e.writer = me;
    a.tls0_epochs[index].write = a.warp_epoch;
    e.write_interval = interval;
    e.init = 0x0F;
    return true;
  }
}

// The common cases of an aligned N-byte plain load or store, decided inline (N and the kind known at
// compile time): a static shared word in its read_ok state, the thread's own stack, a global word
// already initialised (loads; stores set racecheck's tag), static_shared_fast's transitions.
// Anything else goes through check().
template <size_t N, unsigned Kind>
[[gnu::always_inline]] inline void fast_hook(const volatile void* vp, void* code) {
  Active* a = running();
  if (a == nullptr) return;
  const uintptr_t p = reinterpret_cast<uintptr_t>(vp);
  // gpumat.profile: one load and a branch not taken when it is off (a tail call when on, so that
  // the fast path below makes no call and needs no stack frame).
  if (__builtin_expect(a->profile != nullptr, 0))
    return profile_and_check(*a, p, N, Kind, reinterpret_cast<uintptr_t>(code));
  if ((p & (N - 1)) == 0) {
    if constexpr (N == 4) {
      const uintptr_t soff = p - a->tls0_lo;
      if (soff < a->tls0_size) {        // static shared memory
        if constexpr (Kind == kRead) {  // a word in its read-only state
          const SharedRegion::ReadOk ok = a->tls0_read_ok[soff >> 2];
          if (ok.interval == a->interval &&
              (ok.warp == kManyWarps || (ok.warp == a->thread / 32 && a->warp_epoch == 0)))
            return;
        }
        if ((a->checks & kRacecheck) && static_shared_fast<Kind>(*a, soff >> 2)) return;
        return check_static_shared(*a, p, N, Kind);
      }
    }
    if (p - a->slot < kSlotBytes) return;  // the thread's own stack (by-value parameters)
    // The two most recent global segments (a kernel's loads alternate between its inputs).
    for (int i = 0; i < 2; ++i) {
      const Active::CachedSegment& c = a->seg[i];
      const uintptr_t off = p - c.base;
      if (off >= c.live || off + N > c.live) continue;
      if constexpr (Kind == kRead) {
        const uint8_t* init = c.init + (off >> 2);
        bool ok;
        if constexpr (N <= 4)
          ok = ((*init >> (off & 3)) & ((1u << N) - 1)) == (1u << N) - 1;
        else if constexpr (N == 8)
          ok = init[0] == 0x0F && init[1] == 0x0F;
        else
          ok = init[0] == 0x0F && init[1] == 0x0F && init[2] == 0x0F && init[3] == 0x0F;
        if (ok) return;
      } else if constexpr (N >= 4) {
        if (global_write_fast<N>(*a, c, off)) return;
      }
      break;
    }
  }
  check(*a, p, N, Kind, reinterpret_cast<uintptr_t>(code));
}
#define GPUMAT_CALLER __builtin_return_address(0)

}  // namespace

// ============================================================================ engine interface

bool enabled_checks(unsigned* bits, std::string* error) {
  const char* v = std::getenv("GPUMAT_EMU_CHECKS");
  *bits = kMemcheck | kRacecheck | kInitcheck;
  if (v == nullptr) return true;
  // Strict: a misspelt or unknown value is an error naming the valid ones, never "checks off".
  auto invalid = [&](const std::string& why) {
    *error = "GPUMAT_EMU_CHECKS=\"" + std::string(v) + "\": " + why +
             "; use all, none, or a comma list of memcheck, racecheck, initcheck";
    return false;
  };
  unsigned out = 0;
  bool none = false, any = false;
  std::string rest(v);
  for (size_t start = 0; start <= rest.size();) {
    size_t end = rest.find(',', start);
    if (end == std::string::npos) end = rest.size();
    std::string token = rest.substr(start, end - start);
    token.erase(0, token.find_first_not_of(" \t"));
    token.erase(token.find_last_not_of(" \t") + 1);
    for (char& c : token) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (token == "all")
      out |= kMemcheck | kRacecheck | kInitcheck;
    else if (token == "memcheck")
      out |= kMemcheck;
    else if (token == "racecheck")
      out |= kRacecheck;
    else if (token == "initcheck")
      out |= kInitcheck;
    else if (token == "none")
      none = true;
    else
      return invalid(token.empty() ? "an empty entry" : "unknown check \"" + token + "\"");
    any = true;
    start = end + 1;
  }
  if (!any) return invalid("no check named");
  if (none && out != 0) return invalid("none together with checks");
  *bits = out;
  return true;
}

uint32_t check_repeats() {
  const char* v = std::getenv("GPUMAT_EMU_CHECK_REPEATS");
  if (v == nullptr || *v == '\0') return 3;
  if (std::strcmp(v, "all") == 0) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(env_u64("GPUMAT_EMU_CHECK_REPEATS", 3), UINT32_MAX));
}

bool instrumented() { return g_instrumented.load(std::memory_order_relaxed); }

void prepare_worker(Active& a) { refresh_modules(a); }

void prepare_block(Active& a, size_t dynamic_smem_bytes, uintptr_t dynamic_smem) {
  for (Active::CachedSegment& c : a.seg) c = Active::CachedSegment{};
  a.dynamic_smem.lo = dynamic_smem;
  a.dynamic_smem.size = dynamic_smem_bytes;
  if (a.dynamic_smem.shadow.size() < (dynamic_smem_bytes + 3) / 4)
    a.dynamic_smem.resize((dynamic_smem_bytes + 3) / 4);
}

void reset_shared_shadows(Active& a) {
  auto reset = [](SharedRegion& r) {
    std::fill(r.shadow.begin(), r.shadow.end(), SharedWord{});
    std::fill(r.epochs.begin(), r.epochs.end(), WordEpochs{});
    std::fill(r.read_ok.begin(), r.read_ok.end(), SharedRegion::ReadOk{});
  };
  reset(a.dynamic_smem);
  for (SharedRegion& r : a.tls) reset(r);
}

void check_access(const void* p, size_t n, bool write) {
  if (n > 0) hook(p, n, (write ? kWrite : kRead) | kUnaligned, GPUMAT_CALLER);
}

}  // namespace gpumat::emulator::detail

namespace gpumat::emulator {
bool checks_compiled() { return detail::instrumented(); }
}  // namespace gpumat::emulator

// ============================================================================ the hooks
// The entry points gcc's -fsanitize=thread instrumentation calls (the names and signatures of its
// runtime interface, libsanitizer's tsan_interface.h), and -fsanitize=bounds' handler.

namespace emu = gpumat::emulator::detail;

// Protected: calls from the instrumented objects of the same library bind to these directly.
#define GPUMAT_HOOK extern "C" __attribute__((visibility("protected")))

GPUMAT_HOOK void __tsan_init() { emu::g_instrumented = true; }  // every instrumented file's constructor
GPUMAT_HOOK void __tsan_func_entry(void*) {}
GPUMAT_HOOK void __tsan_func_exit() {}

#define GPUMAT_HOOK_RW(n)                                                                             \
  GPUMAT_HOOK void __tsan_read##n(void* p) { emu::fast_hook<n, emu::kRead>(p, GPUMAT_CALLER); }       \
  GPUMAT_HOOK void __tsan_write##n(void* p) { emu::fast_hook<n, emu::kWrite>(p, GPUMAT_CALLER); }     \
  GPUMAT_HOOK void __tsan_unaligned_read##n(void* p) {                                                \
    emu::hook(p, n, emu::kRead | emu::kUnaligned, GPUMAT_CALLER);                                     \
  }                                                                                                   \
  GPUMAT_HOOK void __tsan_unaligned_write##n(void* p) {                                               \
    emu::hook(p, n, emu::kWrite | emu::kUnaligned, GPUMAT_CALLER);                                    \
  }                                                                                                   \
  GPUMAT_HOOK void __tsan_volatile_read##n(void* p) { emu::hook(p, n, emu::kRead, GPUMAT_CALLER); }   \
  GPUMAT_HOOK void __tsan_volatile_write##n(void* p) { emu::hook(p, n, emu::kWrite, GPUMAT_CALLER); } \
  GPUMAT_HOOK void __tsan_unaligned_volatile_read##n(void* p) {                                       \
    emu::hook(p, n, emu::kRead | emu::kUnaligned, GPUMAT_CALLER);                                     \
  }                                                                                                   \
  GPUMAT_HOOK void __tsan_unaligned_volatile_write##n(void* p) {                                      \
    emu::hook(p, n, emu::kWrite | emu::kUnaligned, GPUMAT_CALLER);                                    \
  }
GPUMAT_HOOK_RW(1)
GPUMAT_HOOK_RW(2)
GPUMAT_HOOK_RW(4)
GPUMAT_HOOK_RW(8)
GPUMAT_HOOK_RW(16)
#undef GPUMAT_HOOK_RW

GPUMAT_HOOK void __tsan_read_range(void* p, size_t n) {
  if (n > 0) emu::hook(p, n, emu::kRead | emu::kUnaligned, GPUMAT_CALLER);
}
GPUMAT_HOOK void __tsan_write_range(void* p, size_t n) {
  if (n > 0) emu::hook(p, n, emu::kWrite | emu::kUnaligned, GPUMAT_CALLER);
}
GPUMAT_HOOK void __tsan_vptr_read(void** p) { emu::hook(p, sizeof(void*), emu::kRead, GPUMAT_CALLER); }
GPUMAT_HOOK void __tsan_vptr_update(void** p, void*) {
  emu::hook(p, sizeof(void*), emu::kWrite, GPUMAT_CALLER);
}

// Atomics: checked as one read-modify-write (or a read, or a write), then done with sequential
// consistency (at least the order asked for).
#define GPUMAT_HOOK_ATOMIC(bits, T)                                                                          \
  GPUMAT_HOOK T __tsan_atomic##bits##_load(const volatile T* a, int) {                                       \
    emu::hook(a, sizeof(T), emu::kRead | emu::kAtomic, GPUMAT_CALLER);                                       \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                          \
  GPUMAT_HOOK void __tsan_atomic##bits##_store(volatile T* a, T v, int) {                                    \
    emu::hook(a, sizeof(T), emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                                      \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                                \
  }                                                                                                          \
  GPUMAT_HOOK T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) {                                    \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                      \
  }                                                                                                          \
  GPUMAT_HOOK T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) {                                   \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                       \
  }                                                                                                          \
  GPUMAT_HOOK T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) {                                   \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                       \
  }                                                                                                          \
  GPUMAT_HOOK T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) {                                   \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                       \
  }                                                                                                          \
  GPUMAT_HOOK T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) {                                    \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                        \
  }                                                                                                          \
  GPUMAT_HOOK T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) {                                   \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                       \
  }                                                                                                          \
  GPUMAT_HOOK T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) {                                  \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                      \
  }                                                                                                          \
  GPUMAT_HOOK int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* expected, T v, int, int) { \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    return __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);           \
  }                                                                                                          \
  GPUMAT_HOOK int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* expected, T v, int, int) {   \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    return __atomic_compare_exchange_n(a, expected, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
  }                                                                                                          \
  GPUMAT_HOOK T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T expected, T v, int, int) {       \
    emu::hook(a, sizeof(T), emu::kRead | emu::kWrite | emu::kAtomic, GPUMAT_CALLER);                         \
    __atomic_compare_exchange_n(a, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                 \
    return expected;                                                                                         \
  }
GPUMAT_HOOK_ATOMIC(8, uint8_t)
GPUMAT_HOOK_ATOMIC(16, uint16_t)
GPUMAT_HOOK_ATOMIC(32, uint32_t)
GPUMAT_HOOK_ATOMIC(64, uint64_t)
#undef GPUMAT_HOOK_ATOMIC

GPUMAT_HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
GPUMAT_HOOK void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// memcpy, memmove and memset of the emulated translation units (see cuda_runtime.h).
GPUMAT_HOOK void* gpumat_emu_memcpy(void* __restrict dst, const void* __restrict src, size_t n) {
  if (n > 0) {
    emu::hook(src, n, emu::kRead | emu::kUnaligned, GPUMAT_CALLER);
    emu::hook(dst, n, emu::kWrite | emu::kUnaligned, GPUMAT_CALLER);
  }
  return std::memcpy(dst, src, n);
}
GPUMAT_HOOK void* gpumat_emu_memmove(void* dst, const void* src, size_t n) {
  if (n > 0) {
    emu::hook(src, n, emu::kRead | emu::kUnaligned, GPUMAT_CALLER);
    emu::hook(dst, n, emu::kWrite | emu::kUnaligned, GPUMAT_CALLER);
  }
  return std::memmove(dst, src, n);
}
GPUMAT_HOOK void* gpumat_emu_memset(void* dst, int value, size_t n) {
  if (n > 0) emu::hook(dst, n, emu::kWrite | emu::kUnaligned, GPUMAT_CALLER);
  return std::memset(dst, value, n);
}

// UBSan's handlers for -fsanitize=bounds and -fsanitize=alignment. Not in a sanitizer build
// (make emu-sanitize), where the sanitizer runtime's own handlers report (and end the process).
#if !defined(__SANITIZE_ADDRESS__)

// -fsanitize=bounds: an index past an array's known bound (UBSan's data layout, ubsan_handlers.h).
namespace {
struct SourceLocation {
  const char* file;
  uint32_t line, column;
};
struct TypeDescriptor {
  uint16_t kind, info;
  char name[1];
};
struct OutOfBoundsData {
  SourceLocation loc;
  const TypeDescriptor* array_type;
  const TypeDescriptor* index_type;
};

std::string index_text(const TypeDescriptor* t, uintptr_t value) {
  // An integer of at most 64 bits is passed by value; info = log2(bits) << 1 | signed.
  if (t->kind == 0 && (1u << (t->info >> 1)) <= 64) {
    const unsigned bits = 1u << (t->info >> 1);
    if (t->info & 1) {
      int64_t v = static_cast<int64_t>(value << (64 - bits)) >> (64 - bits);
      return std::to_string(v);
    }
    return std::to_string(bits == 64 ? value : value & ((uint64_t{1} << bits) - 1));
  }
  return "?";
}

void out_of_bounds(OutOfBoundsData* d, uintptr_t index) {
  auto what = [&] {
    return "index " + index_text(d->index_type, index) + " out of bounds for type " + d->array_type->name +
           " at " + d->loc.file + ":" + std::to_string(d->loc.line);
  };
  if (emu::Active* a = emu::running())
    return emu::report(*a, emu::kMemcheck, [&] { return "invalid array access: " + what(); });
  std::fprintf(stderr, "gpumat emulator: %s (host code)\n", what().c_str());
  std::abort();
}

// -fsanitize=alignment: an access through a pointer not aligned for its type (a float4* that is
// not 16-byte aligned, whichever of its fields the compiler then loads).
struct TypeMismatchData {
  SourceLocation loc;
  const TypeDescriptor* type;
  unsigned char log_alignment;
  unsigned char type_check_kind;
};

void type_mismatch(TypeMismatchData* d, uintptr_t pointer) {
  auto what = [&] {
    const uintptr_t alignment = uintptr_t{1} << d->log_alignment;
    std::string w;
    if (pointer == 0)
      w = std::string("null pointer of type ") + d->type->name;
    else if (pointer & (alignment - 1))
      w = "misaligned address " + emu::hex(pointer) + " for type " + d->type->name + ", which needs " +
          std::to_string(alignment) + "-byte alignment";
    else
      w = std::string("invalid use of a pointer to ") + d->type->name;
    return w + " at " + d->loc.file + ":" + std::to_string(d->loc.line);
  };
  if (emu::Active* a = emu::running()) return emu::report(*a, emu::kMemcheck, what);
  std::fprintf(stderr, "gpumat emulator: %s (host code)\n", what().c_str());
  std::abort();
}
}  // namespace

GPUMAT_HOOK void __ubsan_handle_type_mismatch_v1(TypeMismatchData* d, uintptr_t pointer) {
  type_mismatch(d, pointer);
}
GPUMAT_HOOK void __ubsan_handle_type_mismatch_v1_abort(TypeMismatchData* d, uintptr_t pointer) {
  type_mismatch(d, pointer);
  std::abort();
}

GPUMAT_HOOK void __ubsan_handle_out_of_bounds(OutOfBoundsData* d, uintptr_t index) {
  out_of_bounds(d, index);
}
GPUMAT_HOOK void __ubsan_handle_out_of_bounds_abort(OutOfBoundsData* d, uintptr_t index) {
  out_of_bounds(d, index);
  std::abort();  // memcheck is off: the -fno-sanitize-recover variant must not return
}

#endif  // !defined(__SANITIZE_ADDRESS__)
