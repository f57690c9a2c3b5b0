// gpumat.profile's counters: what a GPU's memory system would be asked for by each emulated launch,
// counted from the same load/store hooks the memory checks use (checks.cpp calls profile_access
// for every access of a kernel while its launch is profiled).
//
// Grouping, as a GPU groups them: the k-th access that a thread makes at one instruction (the
// hook's return address) and the k-th accesses of the other lanes of its warp at the same
// instruction form one warp-level request. The threads of a block run one after another as fibers,
// not in lockstep, so the accesses are recorded with (lane, instruction, address) in each thread's
// program order and grouped when every thread of the block has reached a barrier, and at the
// block's end. An instruction under a data-dependent branch in a loop is matched by loop iteration
// rather than by k (see number_warp): lanes that skip it in one iteration are inactive in that
// request, as they are on a GPU.
// - Global memory: a request touches 32-byte sectors; load (store) efficiency is the bytes the
//   lanes asked for (each byte once: lanes reading one word share it) over 32 x the sectors
//   touched, as Nsight Compute's sector counters give it.
//   The sectors a launch touches at least once (reads and writes apart) are the lower bound of its
//   DRAM traffic: everything else could be served by the caches.
// - Shared memory: 32 banks of 4-byte words; a request costs as many wavefronts as the most-used
//   bank has distinct words (lanes reading one word share it: a broadcast); the ideal is
//   ceil(distinct words / 32). Wavefronts beyond the ideal are bank conflicts.
// (NVIDIA, CUDA C++ Programming Guide, "Device Memory Accesses" and the compute capability 5.x+
// "Shared Memory" sections; Nsight Compute's Kernel Profiling Guide, "Memory Tables".)
#define GPUMAT_EMU_ENGINE  // the C library's memcpy, memset (see cuda_runtime.h)
#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "emulator.h"
#include "internal.h"

namespace gpumat::emulator::detail {

namespace {

// The counters of a launch, in the order of kFieldNames.
enum Field : int {
  kBlocks,
  kThreads,
  kBarriers,
  kGldRequests,
  kGldSectors,
  kGldBytes,
  kGldLanes,
  kGstRequests,
  kGstSectors,
  kGstBytes,
  kGstLanes,
  kAtomRequests,
  kAtomSectors,
  kAtomBytes,
  kAtomLanes,
  kLdsRequests,
  kLdsWavefronts,
  kLdsIdealWavefronts,
  kLdsLanes,
  kStsRequests,
  kStsWavefronts,
  kStsIdealWavefronts,
  kStsLanes,
  kDramReadSectors,
  kDramWriteSectors,
  kCounters
};
const char* const kFieldNames[] = {
    "blocks",
    "threads",
    "barriers",
    "global_load_requests",
    "global_load_sectors",
    "global_load_bytes",
    "global_load_lanes",
    "global_store_requests",
    "global_store_sectors",
    "global_store_bytes",
    "global_store_lanes",
    "global_atomic_requests",
    "global_atomic_sectors",
    "global_atomic_bytes",
    "global_atomic_lanes",
    "shared_load_requests",
    "shared_load_wavefronts",
    "shared_load_ideal_wavefronts",
    "shared_load_lanes",
    "shared_store_requests",
    "shared_store_wavefronts",
    "shared_store_ideal_wavefronts",
    "shared_store_lanes",
    "dram_read_sectors",
    "dram_write_sectors",
    // set per launch, not counted
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "dynamic_smem_bytes",
    "flops",
};
static_assert(sizeof(kFieldNames) / sizeof(kFieldNames[0]) == kCounters + 8, "a name per field");

using Counters = uint64_t[kCounters];

std::atomic<bool> g_on{false};
std::mutex g_records_mutex;
std::vector<std::pair<std::string, std::vector<double>>> g_records;
thread_local double t_noted_flops = -1;

// One access of one thread: which instruction, its k-th time there, where and how much.
struct Access {
  uintptr_t pc, addr;
  uint32_t epoch, k;  // set when the warp's accesses are grouped (BlockProfile::number_warp)
  uint32_t bytes;
  uint16_t thread;
  uint8_t kind;    // Kind bits
  uint8_t shared;  // 1: shared memory, 0: global
};

}  // namespace

struct LaunchProfile {
  std::string name;
  LaunchSpec spec;  // geometry and FLOPs (the body and arguments are not used)
  std::mutex mutex;
  Counters total = {};
  std::unordered_set<uint64_t> read_sectors, write_sectors;
};

struct BlockProfile {
  LaunchProfile* launch = nullptr;
  std::vector<Access> accesses;  // since the last barrier
  // flush's tables: per instruction of a warp, per instruction of a lane
  struct PcInfo {
    uint32_t count = 0, lanes = 0;
    bool convergent = true;
  };
  std::unordered_map<uintptr_t, PcInfo> pcs;
  std::unordered_map<uintptr_t, uint32_t> seen;
  std::unordered_map<uintptr_t, std::pair<uint32_t, uint32_t>> numbering;  // pc -> (epoch, k)
  Counters counts = {};
  std::vector<uint64_t> read_sectors, write_sectors, scratch;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint32_t banks[32] = {};

  // Groups the recorded accesses into warp requests and counts them.
  void flush() {
    // Each thread's accesses in program order (they were recorded so), threads in order.
    std::stable_sort(accesses.begin(), accesses.end(),
                     [](const Access& x, const Access& y) { return x.thread < y.thread; });
    for (size_t w0 = 0, e = accesses.size(); w0 < e;) {
      size_t w1 = w0;
      while (w1 < e && accesses[w1].thread / 32 == accesses[w0].thread / 32) ++w1;
      number_warp(w0, w1);
      w0 = w1;
    }
    std::sort(accesses.begin(), accesses.end(), [](const Access& x, const Access& y) {
      const int wx = x.thread / 32, wy = y.thread / 32;
      if (wx != wy) return wx < wy;
      if (x.pc != y.pc) return x.pc < y.pc;
      if (x.epoch != y.epoch) return x.epoch < y.epoch;
      if (x.k != y.k) return x.k < y.k;
      if (x.shared != y.shared) return x.shared < y.shared;
      if (x.kind != y.kind) return x.kind < y.kind;
      return x.thread < y.thread;
    });
    for (size_t i = 0, e = accesses.size(); i < e;) {
      size_t j = i + 1;
      const Access& a = accesses[i];
      while (j < e && accesses[j].thread / 32 == a.thread / 32 && accesses[j].pc == a.pc &&
             accesses[j].epoch == a.epoch && accesses[j].k == a.k && accesses[j].shared == a.shared &&
             accesses[j].kind == a.kind)
        ++j;
      request(i, j);
      i = j;
    }
    accesses.clear();
  }

  // Numbers the accesses of one warp (accesses[w0, w1), by lane, each in program order) so that
  // equal (pc, epoch, k) means one request. An instruction that every lane executing it executes
  // equally often is convergent: its k-th executions go together. One that lanes execute a
  // different number of times sits under a data-dependent branch (`if (y[i] > 0) ... dy[i]` in a
  // loop): its executions are matched by the loop iteration instead, counted by the anchor, the
  // convergent instruction that all lanes execute most often (the loop's unconditional access);
  // within one iteration, by k again.
  void number_warp(size_t w0, size_t w1) {
    pcs.clear();
    uint32_t lanes = 0;
    for (size_t t0 = w0; t0 < w1;) {
      size_t t1 = t0;
      seen.clear();
      while (t1 < w1 && accesses[t1].thread == accesses[t0].thread) ++seen[accesses[t1++].pc];
      for (const auto& [pc, n] : seen) {
        PcInfo& info = pcs[pc];
        if (info.lanes == 0) info.count = n;
        info.convergent &= info.count == n;
        ++info.lanes;
      }
      ++lanes;
      t0 = t1;
    }
    uintptr_t anchor = 0;
    uint32_t best = 0;
    for (const auto& [pc, info] : pcs)
      if (info.convergent && info.lanes == lanes &&
          (info.count > best || (info.count == best && pc < anchor))) {
        anchor = pc;
        best = info.count;
      }
    for (size_t t0 = w0; t0 < w1;) {
      size_t t1 = t0;
      seen.clear();
      numbering.clear();
      uint32_t epoch = 0;
      for (; t1 < w1 && accesses[t1].thread == accesses[t0].thread; ++t1) {
        Access& a = accesses[t1];
        if (a.pc == anchor) ++epoch;
        if (pcs[a.pc].convergent) {
          a.epoch = 0;
          a.k = seen[a.pc]++;
        } else {
          auto& [last_epoch, k] = numbering[a.pc];
          if (last_epoch != epoch) k = 0;
          last_epoch = epoch;
          a.epoch = epoch;
          a.k = k++;
        }
      }
      t0 = t1;
    }
  }

  // One warp request: accesses[i, j), one per lane.
  void request(size_t i, size_t j) {
    const Access& first = accesses[i];
    const uint64_t lanes = j - i;
    // The bytes asked for, each once (lanes reading one word share it, as a broadcast does).
    ranges.clear();
    for (size_t r = i; r < j; ++r)
      ranges.emplace_back(accesses[r].addr, accesses[r].addr + accesses[r].bytes);
    std::sort(ranges.begin(), ranges.end());
    uint64_t bytes = 0, covered = 0;
    for (auto [lo, hi] : ranges) {
      lo = std::max<uint64_t>(lo, covered);
      if (hi > lo) bytes += hi - lo;
      covered = std::max<uint64_t>(covered, hi);
    }
    scratch.clear();
    const unsigned shift = first.shared ? 2 : 5;  // 4-byte words (banks) or 32-byte sectors
    for (size_t r = i; r < j; ++r) {
      const Access& a = accesses[r];
      for (uint64_t u = a.addr >> shift, last = (a.addr + a.bytes - 1) >> shift; u <= last; ++u)
        scratch.push_back(u);
    }
    std::sort(scratch.begin(), scratch.end());
    scratch.erase(std::unique(scratch.begin(), scratch.end()), scratch.end());
    const uint64_t units = scratch.size();
    const bool write = first.kind & kWrite, read = first.kind & kRead;
    if (first.shared) {
      std::fill(std::begin(banks), std::end(banks), 0u);
      uint32_t wavefronts = 0;
      for (uint64_t word : scratch) wavefronts = std::max(wavefronts, ++banks[word & 31]);
      const uint64_t ideal = (units + 31) / 32;
      const bool store = write;  // an atomic counts as a store
      counts[store ? kStsRequests : kLdsRequests] += 1;
      counts[store ? kStsWavefronts : kLdsWavefronts] += wavefronts;
      counts[store ? kStsIdealWavefronts : kLdsIdealWavefronts] += ideal;
      counts[store ? kStsLanes : kLdsLanes] += lanes;
      return;
    }
    const int base = (first.kind & kAtomic) ? kAtomRequests : write ? kGstRequests : kGldRequests;
    counts[base] += 1;
    counts[base + 1] += units;
    counts[base + 2] += bytes;
    counts[base + 3] += lanes;
    if (read) read_sectors.insert(read_sectors.end(), scratch.begin(), scratch.end());
    if (write) write_sectors.insert(write_sectors.end(), scratch.begin(), scratch.end());
  }
};

namespace {

thread_local BlockProfile t_block;

void dedupe(std::vector<uint64_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

LaunchProfile* profile_launch_begin(const LaunchSpec& spec) {
  if (!g_on.load(std::memory_order_relaxed)) return nullptr;
  auto* p = new LaunchProfile();
  p->name = spec.name;
  p->spec.grid = spec.grid;
  p->spec.block = spec.block;
  p->spec.smem = spec.smem;
  p->spec.flops = spec.flops;
  return p;
}

void profile_block_begin(Active& a, LaunchProfile* launch) {
  if (launch == nullptr) return;
  const bool quiet = a.quiet;
  a.quiet = true;  // the profiler's containers share library code with instrumented kernels
  BlockProfile& b = t_block;
  b.launch = launch;
  b.accesses.clear();
  std::fill(std::begin(b.counts), std::end(b.counts), 0);
  b.read_sectors.clear();
  b.write_sectors.clear();
  a.profile = &b;
  a.quiet = quiet;
}

void profile_barrier(Active& a) {
  if (a.profile == nullptr) return;
  const bool quiet = a.quiet;
  a.quiet = true;
  a.profile->flush();
  a.profile->counts[kBarriers] += 1;
  // Bound the memory: the unique sectors seen so far, merged now and then.
  if (a.profile->read_sectors.size() + a.profile->write_sectors.size() > (1u << 20)) {
    dedupe(a.profile->read_sectors);
    dedupe(a.profile->write_sectors);
  }
  a.quiet = quiet;
}

void profile_block_end(Active& a, bool faulted) {
  BlockProfile* b = a.profile;
  if (b == nullptr) return;
  a.profile = nullptr;
  const bool quiet = a.quiet;
  a.quiet = true;
  if (!faulted) {
    b->flush();
    const Dim d = b->launch->spec.block;
    b->counts[kBlocks] += 1;
    b->counts[kThreads] += uint64_t{d.x} * d.y * d.z;
    dedupe(b->read_sectors);
    dedupe(b->write_sectors);
    LaunchProfile& L = *b->launch;
    std::lock_guard<std::mutex> lock(L.mutex);
    for (int f = 0; f < kCounters; ++f) L.total[f] += b->counts[f];
    L.read_sectors.insert(b->read_sectors.begin(), b->read_sectors.end());
    L.write_sectors.insert(b->write_sectors.begin(), b->write_sectors.end());
  }
  b->accesses.clear();
  a.quiet = quiet;
}

void profile_launch_end(LaunchProfile* launch, bool ok) {
  if (launch == nullptr) return;
  if (ok) {
    LaunchProfile& L = *launch;
    L.total[kDramReadSectors] = L.read_sectors.size();
    L.total[kDramWriteSectors] = L.write_sectors.size();
    std::vector<double> values(L.total, L.total + kCounters);
    const Dim g = L.spec.grid, b = L.spec.block;
    for (unsigned v : {g.x, g.y, g.z, b.x, b.y, b.z}) values.push_back(v);
    values.push_back(static_cast<double>(L.spec.smem));
    values.push_back(L.spec.flops);
    std::lock_guard<std::mutex> lock(g_records_mutex);
    g_records.emplace_back(L.name, std::move(values));
  }
  delete launch;
}

void profile_access(Active& a, uintptr_t p, size_t n, unsigned kind, uintptr_t pc) {
  if (p - a.slot < kSlotBytes || p - a.params_lo < a.params_size) return;  // stack, arguments
  bool shared = p - a.dynamic_smem.lo < a.dynamic_smem.size;
  for (size_t i = 0; !shared && i < a.tls.size(); ++i) shared = p - a.tls[i].lo < a.tls[i].size;
  const bool quiet = a.quiet;
  a.quiet = true;
  bool global = false;
  if (!shared) {
    for (const Active::CachedSegment& c : a.seg) global |= p - c.base < c.live;
    if (!global) global = segment_at(p) != nullptr;
  }
  if (shared || global) {
    BlockProfile& b = *a.profile;
    b.accesses.push_back(Access{pc, p, 0, 0, static_cast<uint32_t>(n), static_cast<uint16_t>(a.thread),
                                static_cast<uint8_t>(kind & (kRead | kWrite | kAtomic)),
                                static_cast<uint8_t>(shared)});
  }
  a.quiet = quiet;
}

double take_noted_flops() {
  const double f = t_noted_flops;
  t_noted_flops = -1;
  return f;
}

}  // namespace gpumat::emulator::detail

namespace gpumat::emulator {

void profile_enable(bool on) { detail::g_on.store(on, std::memory_order_relaxed); }
bool profile_enabled() { return detail::g_on.load(std::memory_order_relaxed); }

std::vector<std::string> profile_fields() {
  return std::vector<std::string>(std::begin(detail::kFieldNames), std::end(detail::kFieldNames));
}

int profile_summed_count() { return detail::kCounters; }

std::vector<std::pair<std::string, std::vector<double>>> profile_take() {
  std::lock_guard<std::mutex> lock(detail::g_records_mutex);
  std::vector<std::pair<std::string, std::vector<double>>> out;
  out.swap(detail::g_records);
  return out;
}

void note_flops(double flops) { detail::t_noted_flops = flops; }

}  // namespace gpumat::emulator
