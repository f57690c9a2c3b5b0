"""See why a kernel is fast without a GPU: per-kernel memory counters, occupancy and a roofline
estimate, from the emulated CUDA device.

While a :class:`Profiler` is active, every kernel launch that runs on an emulated device
(``gpumat.emu(i)``) records what a GPU's memory system would be asked for, counted from the real
kernel code by the emulator's load/store instrumentation (``extensions/src/emu/profile.cpp``):

- global memory, grouped as a GPU groups it (the k-th access of each lane of a warp at one
  instruction is one request): requests, 32-byte sectors touched and bytes asked for, so the
  load/store efficiency (bytes asked / (32 x sectors)) and sectors per request, as Nsight Compute
  reports them; active lanes per request;
- shared memory: requests and wavefronts (32 banks of 4-byte words: a request costs as many
  wavefronts as its most-used bank has distinct words), so bank conflicts;
- barriers; the sectors a launch touches at least once (the lower bound of its DRAM traffic).

Per kernel it adds registers per thread and static shared memory as ptxas reported them for the
chosen GPU's architecture (``gpumat/kernel_resources.json``, written by
``scripts/kernel_resources.py`` when nvcc exists) and the theoretical occupancy those give under
the CUDA occupancy rules; FLOPs where the launcher knows them from the op's shapes (the matrix
product, which also carries the convolutions' im2col products: 2*m*n*k).

The times are a **model, never a measurement**: for a named GPU (:data:`GPUS`: H100 SXM, H200 SXM,
A100, T4, from NVIDIA's data sheets) a launch takes at least
``max(DRAM bytes / (bandwidth * u), FLOPs / (FP32 peak * u), launch latency)``, with ``u =
min(1, blocks / SMs)`` the share of the GPU's SMs that the grid can occupy. The physical floor of a
sequence of kernels is ``max(sum of DRAM bytes / bandwidth, sum of FLOPs / peak)``.

Usage::

    with gpumat.profile.profile() as prof:      # like torch.profiler.profile
        step()                                  # kernels on gpumat.emu(0)
    print(prof.table("H100"))
    prof.to_json("H100")                        # dict for the ledger; prof.plot("H100"): matplotlib

    python -m gpumat.profile [--gpu H100] [--json OUT] [--plot PNG] script.py [args ...]

Sources: CUDA C++ Programming Guide (NVIDIA), "Device Memory Accesses", "Shared Memory" (compute
capability 5.x and later) and the table "Technical Specifications per Compute Capability"; the
CUDA Occupancy Calculator (Nsight Compute's occupancy rules); Nsight Compute Kernel Profiling
Guide, "Memory Tables"; Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import runpy
import sys
from pathlib import Path

from gpumat import _core
from gpumat.cuda._build import user_kernel_resources
from gpumat.devices import emu, synchronize

__all__ = [
    "GPUS",
    "GpuModel",
    "Profiler",
    "derived",
    "estimate",
    "kernel_resources",
    "main",
    "occupancy",
    "profile",
    "short_name",
]

#: Bytes of a global-memory sector, the unit of L2 <-> DRAM and L1 <-> L2 transfers.
SECTOR_BYTES = 32


@dataclasses.dataclass(frozen=True)
class GpuModel:
    """A GPU as the roofline model and the occupancy rules see it.

    Attributes:
        name: marketing name. arch: the ptxas architecture whose registers and shared memory
        are used (``"sm_90"``). sms: streaming multiprocessors.
        dram_bytes_per_s: peak DRAM bandwidth, bytes/s. fp32_flops_per_s: peak FP32 (non-tensor)
        FLOP/s. launch_s: the latency floor of one kernel launch, seconds (an assumption: the
        order of a small kernel's launch-to-completion time on a stream; calibrate with a GPU).
        max_warps_per_sm, max_blocks_per_sm, regs_per_sm, smem_per_sm (bytes),
        smem_reserved_per_block (bytes the system keeps per block), reg_alloc_unit (registers per
        warp are allocated in these), warp_alloc_granularity, smem_alloc_unit (bytes): the
        per-SM limits of the architecture (CUDA C++ Programming Guide, "Technical Specifications
        per Compute Capability"; the CUDA Occupancy Calculator's allocation granularities).
        source: where the numbers come from.
    """

    name: str
    arch: str
    sms: int
    dram_bytes_per_s: float
    fp32_flops_per_s: float
    max_warps_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int
    smem_reserved_per_block: int
    source: str
    launch_s: float = 2e-6
    regs_per_sm: int = 65536
    reg_alloc_unit: int = 256
    warp_alloc_granularity: int = 4
    smem_alloc_unit: int = 128


_H100 = GpuModel(
    name="NVIDIA H100 SXM5 80GB",
    arch="sm_90",
    sms=132,
    dram_bytes_per_s=3.35e12,
    fp32_flops_per_s=67e12,
    max_warps_per_sm=64,
    max_blocks_per_sm=32,
    smem_per_sm=228 * 1024,
    smem_reserved_per_block=1024,
    source="NVIDIA H100 Tensor Core GPU data sheet (SXM: FP32 67 TFLOPS, 3.35 TB/s HBM3); "
    "132 SMs: NVIDIA H100 Tensor Core GPU Architecture white paper; per-SM limits: CUDA C++ "
    "Programming Guide, compute capability 9.0",
)

#: The GPUs the roofline model knows, by short name ("H100", "H200", "A100", "T4"): each a
#: :class:`GpuModel` with its DRAM bandwidth (bytes/s), FP32 peak (FLOP/s), SM count and per-SM
#: limits, from the sources its ``source`` field names.
GPUS: dict[str, GpuModel] = {
    "H100": _H100,
    # The H100's Hopper processor with HBM3e: only the memory and its bandwidth differ.
    "H200": dataclasses.replace(
        _H100,
        name="NVIDIA H200 SXM 141GB",
        dram_bytes_per_s=4.8e12,
        source="NVIDIA H200 Tensor Core GPU data sheet (SXM: FP32 67 TFLOPS, 4.8 TB/s HBM3e); "
        "the H100's Hopper processor (132 SMs); per-SM limits: CUDA C++ Programming Guide, "
        "compute capability 9.0",
    ),
    "A100": GpuModel(
        name="NVIDIA A100 SXM4 80GB",
        arch="sm_80",
        sms=108,
        dram_bytes_per_s=2.039e12,
        fp32_flops_per_s=19.5e12,
        max_warps_per_sm=64,
        max_blocks_per_sm=32,
        smem_per_sm=164 * 1024,
        smem_reserved_per_block=1024,
        source="NVIDIA A100 Tensor Core GPU data sheet (80GB SXM: FP32 19.5 TFLOPS, 2,039 GB/s "
        "HBM2e); 108 SMs: NVIDIA A100 Tensor Core GPU Architecture white paper; per-SM limits: "
        "CUDA C++ Programming Guide, compute capability 8.0",
    ),
    "T4": GpuModel(
        name="NVIDIA T4",
        arch="sm_75",
        sms=40,
        dram_bytes_per_s=320e9,
        fp32_flops_per_s=8.1e12,
        max_warps_per_sm=32,
        max_blocks_per_sm=16,
        smem_per_sm=64 * 1024,
        smem_reserved_per_block=0,
        source="NVIDIA T4 Tensor Core GPU data sheet (FP32 8.1 TFLOPS, 320 GB/s GDDR6); 40 SMs: "
        "NVIDIA Turing GPU Architecture white paper; per-SM limits: CUDA C++ Programming Guide, "
        "compute capability 7.5",
    ),
}


def _gpu(gpu) -> GpuModel:
    if isinstance(gpu, GpuModel):
        return gpu
    if isinstance(gpu, str) and gpu in GPUS:
        return GPUS[gpu]
    raise ValueError(f"gpumat.profile: unknown gpu {gpu!r}; choose one of {sorted(GPUS)}")


# ---------------------------------------------------------------------------- kernel resources


def short_name(name: str) -> str:
    """A kernel's name as the table shows it and as ``kernel_resources`` matches it: no
    ``gpumat::emu::`` / ``gpumat::cuda::`` namespace, no spaces, a lambda argument named by its
    enclosing function (``map_kernel<relu>``)."""
    s = re.sub(r"\bgpumat::(emu|cuda)::", "", name)
    s = re.sub(r"\{anonymous\}::|\(anonymous namespace\)::", "", s)
    s = re.sub(r"^void\s+", "", s.strip())
    s = re.sub(r"(\w+)\([^()]*\)::(<lambda\([^()]*\)>|\{lambda\([^()]*\)#\d+\})", r"\1", s)
    s = s.replace("long int", "long").replace(" ", "")
    return s


_RESOURCES: dict | None = None


def _resource_table() -> dict:
    global _RESOURCES
    if _RESOURCES is None:
        path = Path(__file__).parent.parent / "kernel_resources.json"
        data = json.loads(path.read_text()) if path.exists() else {"archs": {}}
        _RESOURCES = {
            arch: {short_name(k): v for k, v in kernels.items()}
            for arch, kernels in data.get("archs", {}).items()
        }
    return _RESOURCES


def kernel_resources(name: str, arch: str) -> dict | None:
    """Registers per thread and static shared memory (bytes) of kernel ``name`` (an emulator or
    ptxas name) compiled for ``arch`` (``"sm_90"``), as ptxas reported them; None when the build
    recorded none (no nvcc when ``gpumat/kernel_resources.json`` was written). A user's
    :class:`gpumat.cuda.RawKernel` that ran on the emulated device is asked of ptxas on demand
    (when nvcc is installed).

    Returns a dict with ``registers``, ``static_smem_bytes``, ``spill_bytes``, ``stack_bytes`` and
    ``match``: ``"exact"``, or ``"family"`` when only the kernel's base name (before its template
    arguments) matched, in which case the largest registers and shared memory of its
    instantiations are given (the occupancy is then a lower bound)."""
    table = _resource_table().get(arch, {})
    key = short_name(name)
    if key in table:
        return {**table[key], "match": "exact"}
    user = user_kernel_resources(name, arch)  # a gpumat.cuda.RawKernel (ptxas, when nvcc exists)
    if user is not None:
        return {**user, "match": "exact"}
    base = key.split("<", 1)[0]
    family = [v for k, v in table.items() if k.split("<", 1)[0] == base]
    if not family:
        return None
    return {
        "registers": max(v.get("registers", 0) for v in family),
        "static_smem_bytes": max(v.get("static_smem_bytes", 0) for v in family),
        "spill_bytes": max(v.get("spill_bytes", 0) for v in family),
        "stack_bytes": max(v.get("stack_bytes", 0) for v in family),
        "match": "family",
    }


def occupancy(
    threads_per_block: int, registers: int, smem_bytes: int, gpu: GpuModel | str = "H100"
) -> dict:
    """Theoretical occupancy of a kernel on ``gpu`` under the CUDA occupancy rules.

    Args:
        threads_per_block: threads of one block (1..1024). registers: per thread (0: unknown,
        not a limit). smem_bytes: static + dynamic shared memory per block, bytes.
        gpu: a :class:`GpuModel` or a key of :data:`GPUS`.

    Returns:
        dict: ``blocks_per_sm`` (resident blocks), ``warps_per_sm``, ``occupancy`` (active warps
        over the SM's maximum, 0..1) and ``limiter`` (``"warps"``, ``"blocks"``, ``"registers"``
        or ``"shared memory"``).

    The rules, as the CUDA Occupancy Calculator applies them: warps per block rounded up; registers
    per warp rounded up to the allocation unit (256), warps that fit in the register file rounded
    down to the warp allocation granularity (4); shared memory per block plus the system's
    reserved bytes rounded up to the allocation unit (128 bytes); the fewest blocks any limit
    allows. Raises ValueError for threads_per_block outside 1..1024 or negative resources.
    """
    g = _gpu(gpu)
    if not 1 <= int(threads_per_block) <= 1024:
        raise ValueError(f"occupancy: threads_per_block must be 1..1024, got {threads_per_block}")
    if registers < 0 or smem_bytes < 0:
        raise ValueError(f"occupancy: registers={registers}, smem_bytes={smem_bytes} must be >= 0")
    warps = -(-int(threads_per_block) // 32)
    limits = {"blocks": g.max_blocks_per_sm, "warps": g.max_warps_per_sm // warps}
    if registers > 0:
        per_warp = -(-registers * 32 // g.reg_alloc_unit) * g.reg_alloc_unit
        warps_by_regs = (g.regs_per_sm // per_warp) // g.warp_alloc_granularity
        limits["registers"] = warps_by_regs * g.warp_alloc_granularity // warps
    per_block = smem_bytes + g.smem_reserved_per_block
    if per_block > 0:
        per_block = -(-per_block // g.smem_alloc_unit) * g.smem_alloc_unit
        limits["shared memory"] = g.smem_per_sm // per_block
    limiter = min(limits, key=lambda k: limits[k])
    blocks = limits[limiter]
    return {
        "blocks_per_sm": blocks,
        "warps_per_sm": blocks * warps,
        "occupancy": blocks * warps / g.max_warps_per_sm,
        "limiter": limiter,
    }


# ---------------------------------------------------------------------------- the model


def _dram_bytes(c: dict) -> float:
    return SECTOR_BYTES * (c["dram_read_sectors"] + c["dram_write_sectors"])


def estimate(launch: dict, gpu: GpuModel | str = "H100") -> dict:
    """The roofline model of one launch record (a MODEL, not a measurement).

    Args:
        launch: a record of :attr:`Profiler.launches` (its counters). gpu: the GPU modelled.

    Returns:
        dict: ``time_s`` = max(``memory_s``, ``compute_s``, ``latency_s``) where ``memory_s`` =
        DRAM bytes / (bandwidth * u), ``compute_s`` = FLOPs / (FP32 peak * u), ``latency_s`` =
        the launch latency, u = min(1, blocks / SMs); ``bound`` (which term won: ``"memory"``,
        ``"compute"`` or ``"latency"``); ``floor_s`` = max(DRAM bytes / bandwidth, FLOPs / peak)
        (what the bytes and FLOPs alone would need on the whole GPU).
    """
    g = _gpu(gpu)
    c = launch["counters"]
    flops = max(launch["flops"] or 0.0, 0.0)
    dram = _dram_bytes(c)
    u = min(1.0, c["blocks"] / g.sms) if c["blocks"] > 0 else 1.0
    terms = {
        "memory": dram / (g.dram_bytes_per_s * u),
        "compute": flops / (g.fp32_flops_per_s * u),
        "latency": g.launch_s,
    }
    bound = max(terms, key=lambda k: terms[k])
    return {
        "time_s": terms[bound],
        "memory_s": terms["memory"],
        "compute_s": terms["compute"],
        "latency_s": terms["latency"],
        "bound": bound,
        "floor_s": max(dram / g.dram_bytes_per_s, flops / g.fp32_flops_per_s),
    }


# ---------------------------------------------------------------------------- the profiler

# The counters summed per launch and per kernel: named once, in extensions/src/emu/profile.cpp.
_SUMMED = _core._emu_profile_summed_fields()

_active: Profiler | None = None


def _emu_devices() -> list:
    return [emu(i) for i in range(int(_core.emu_device_count_()))]


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def derived(c: dict) -> dict:
    """The Nsight-style metrics of summed counters ``c``: sectors per request and efficiency
    (bytes asked for / bytes of the sectors moved, 0..1) for global loads and stores, shared
    wavefronts per request and the bank-conflict share (wavefronts beyond the ideal over all
    wavefronts), active lanes per request. None where there were no requests."""
    ld_req, st_req = c["global_load_requests"], c["global_store_requests"]
    sh_req = c["shared_load_requests"] + c["shared_store_requests"]
    sh_wf = c["shared_load_wavefronts"] + c["shared_store_wavefronts"]
    sh_ideal = c["shared_load_ideal_wavefronts"] + c["shared_store_ideal_wavefronts"]
    requests = ld_req + st_req + c["global_atomic_requests"] + sh_req
    lanes = (
        c["global_load_lanes"]
        + c["global_store_lanes"]
        + c["global_atomic_lanes"]
        + c["shared_load_lanes"]
        + c["shared_store_lanes"]
    )
    return {
        "load_sectors_per_request": _ratio(c["global_load_sectors"], ld_req),
        "load_efficiency": _ratio(c["global_load_bytes"], SECTOR_BYTES * c["global_load_sectors"]),
        "store_sectors_per_request": _ratio(c["global_store_sectors"], st_req),
        "store_efficiency": _ratio(
            c["global_store_bytes"], SECTOR_BYTES * c["global_store_sectors"]
        ),
        "shared_wavefronts_per_request": _ratio(sh_wf, sh_req),
        "bank_conflict_share": _ratio(sh_wf - sh_ideal, sh_wf),
        "lanes_per_request": _ratio(lanes, requests),
    }


class Profiler:
    """Records the emulated device's launches while active (a context manager; see the module).

    Attributes:
        launches: one dict per launch, in completion order: ``kernel`` (the emulator's name),
            ``name`` (:func:`short_name`), ``grid``, ``block`` (3-tuples), ``dynamic_smem_bytes``,
            ``flops`` (None when the launcher gave none) and ``counters`` (the summed counters of
            its blocks: see :func:`derived` and the module docstring).

    Raises RuntimeError when entered while another profiler is active (the counters are global).
    Kernels of ``gpumat.cpu()`` or a real GPU are not recorded.
    """

    def __init__(self):
        self.launches: list[dict] = []

    def __enter__(self) -> Profiler:
        global _active
        if _active is not None:
            raise RuntimeError("gpumat.profile: a profiler is already active (they do not nest)")
        for device in _emu_devices():  # queued kernels belong to the code before the profiler
            synchronize(device)
        _core._emu_profile_take()
        _core._emu_profile_enable(True)
        _active = self
        return self

    def __exit__(self, *exc) -> None:
        global _active
        try:
            for device in _emu_devices():
                synchronize(device)
        finally:
            _core._emu_profile_enable(False)
            _active = None
            self.launches.extend(self._convert(r) for r in _core._emu_profile_take())

    @staticmethod
    def _convert(record) -> dict:
        kernel, v = record
        return {
            "kernel": kernel,
            "name": short_name(kernel),
            "grid": (int(v["grid_x"]), int(v["grid_y"]), int(v["grid_z"])),
            "block": (int(v["block_x"]), int(v["block_y"]), int(v["block_z"])),
            "dynamic_smem_bytes": int(v["dynamic_smem_bytes"]),
            "flops": None if v["flops"] < 0 else float(v["flops"]),
            "counters": {k: int(v[k]) for k in _SUMMED},
        }

    # ------------------------------------------------------------------ per kernel

    def kernels(self, gpu: GpuModel | str = "H100") -> list[dict]:
        """One dict per kernel (by :func:`short_name`), slowest estimated total first: ``name``,
        ``calls``, ``counters`` (summed over calls), the :func:`derived` metrics, ``flops`` (None
        if a call had no FLOP count), ``dram_bytes``, ``threads_per_block``, ``resources`` and
        ``occupancy`` (None without ptxas data for the GPU's architecture), and the model's
        ``estimate_s``, ``floor_s`` (sums over calls), ``bound`` (of the most calls)."""
        g = _gpu(gpu)
        groups: dict[str, list[dict]] = {}
        for launch in self.launches:
            groups.setdefault(launch["name"], []).append(launch)
        out = []
        for name, calls in groups.items():
            counters = {k: sum(c["counters"][k] for c in calls) for k in _SUMMED}
            ests = [estimate(c, g) for c in calls]
            bounds = [e["bound"] for e in ests]
            flops = [c["flops"] for c in calls]
            first = calls[0]
            threads = first["block"][0] * first["block"][1] * first["block"][2]
            res = kernel_resources(first["kernel"], g.arch)
            occ = None
            if res is not None:
                smem = res.get("static_smem_bytes", 0) + first["dynamic_smem_bytes"]
                occ = occupancy(threads, res.get("registers", 0), smem, g)
            out.append(
                {
                    "name": name,
                    "kernel": first["kernel"],
                    "calls": len(calls),
                    "counters": counters,
                    **derived(counters),
                    "flops": None if any(f is None for f in flops) else sum(flops),
                    "dram_bytes": _dram_bytes(counters),
                    "threads_per_block": threads,
                    "resources": res,
                    "occupancy": occ,
                    "estimate_s": sum(e["time_s"] for e in ests),
                    "floor_s": sum(e["floor_s"] for e in ests),
                    "bound": max(set(bounds), key=bounds.count),
                }
            )
        out.sort(key=lambda k: -k["estimate_s"])
        return out

    def totals(self, gpu: GpuModel | str = "H100") -> dict:
        """The whole recorded run under the model: ``launches``, ``dram_bytes`` and ``flops``
        (counted FLOPs) summed, ``estimate_s`` (the launches' estimates summed: one after another
        on one stream), ``floor_s`` = max(dram_bytes / bandwidth, flops / peak) (the physical
        floor of these kernels' traffic and arithmetic), ``memory_floor_s``, ``compute_floor_s``
        and ``gpu`` (its name)."""
        g = _gpu(gpu)
        dram = sum(_dram_bytes(x["counters"]) for x in self.launches)
        flops = sum(x["flops"] or 0.0 for x in self.launches)
        return {
            "gpu": g.name,
            "launches": len(self.launches),
            "dram_bytes": dram,
            "flops": flops,
            "estimate_s": sum(estimate(x, g)["time_s"] for x in self.launches),
            "memory_floor_s": dram / g.dram_bytes_per_s,
            "compute_floor_s": flops / g.fp32_flops_per_s,
            "floor_s": max(dram / g.dram_bytes_per_s, flops / g.fp32_flops_per_s),
        }

    # ------------------------------------------------------------------ output

    def table(self, gpu: GpuModel | str = "H100", top: int | None = None) -> str:
        """The per-kernel table (markdown), slowest estimate first, with the model's totals.

        Columns: calls; global loads and stores: sectors per request and efficiency; shared
        memory: wavefronts per request and the bank-conflict share; active lanes per request;
        registers and theoretical occupancy (ptxas data of the GPU's architecture); DRAM MB
        (unique sectors); MFLOP; the estimate and floor in microseconds summed over calls; bound.
        ``top``: only the N slowest kernels (an int >= 1; else ValueError).
        """
        g = _gpu(gpu)
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
            raise ValueError(f"table: top must be an int >= 1 or None, got {top!r}")
        rows = self.kernels(g)
        if top is not None:
            rows = rows[:top]

        def pct(x):
            return "-" if x is None else f"{100 * x:.0f}%"

        def num(x, digits=1):
            return "-" if x is None else f"{x:.{digits}f}"

        head = [
            "kernel",
            "calls",
            "ld sect/req",
            "ld eff",
            "st sect/req",
            "st eff",
            "smem wf/req",
            "conflicts",
            "lanes/req",
            "regs",
            "occupancy",
            "DRAM MB",
            "MFLOP",
            "est us",
            "floor us",
            "bound",
        ]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for k in rows:
            res, occ = k["resources"], k["occupancy"]
            cells = [
                k["name"] if len(k["name"]) <= 48 else k["name"][:45] + "...",
                str(k["calls"]),
                num(k["load_sectors_per_request"]),
                pct(k["load_efficiency"]),
                num(k["store_sectors_per_request"]),
                pct(k["store_efficiency"]),
                num(k["shared_wavefronts_per_request"]),
                pct(k["bank_conflict_share"]),
                num(k["lanes_per_request"]),
                "-" if res is None else str(res.get("registers", "-")),
                "-" if occ is None else f"{100 * occ['occupancy']:.0f}% ({occ['limiter']})",
                f"{k['dram_bytes'] / 1e6:.3f}",
                "-" if k["flops"] is None else f"{k['flops'] / 1e6:.1f}",
                f"{k['estimate_s'] * 1e6:.1f}",
                f"{k['floor_s'] * 1e6:.2f}",
                k["bound"],
            ]
            lines.append("| " + " | ".join(cells) + " |")
        t = self.totals(g)
        lines += [
            "",
            f"ESTIMATE (a roofline model, not a measurement) for {g.name}: {t['launches']} "
            f"launches, {t['estimate_s'] * 1e6:.1f} us one after another; physical floor "
            f"{t['floor_s'] * 1e6:.2f} us = max({t['dram_bytes'] / 1e6:.3f} MB / "
            f"{g.dram_bytes_per_s / 1e12:.2f} TB/s, {t['flops'] / 1e9:.3f} GFLOP / "
            f"{g.fp32_flops_per_s / 1e12:.1f} TFLOP/s). Launch latency floor "
            f"{g.launch_s * 1e6:.1f} us per kernel (assumed).",
        ]
        if not self.launches:
            lines.append(
                "No emulated launches were recorded: the profiler sees kernels on gpumat.emu(i)."
            )
        return "\n".join(lines)

    def to_json(self, gpu: GpuModel | str = "H100") -> dict:
        """A JSON-serialisable dict: ``schema`` (``"gpumat-profile/1"``), ``model`` (the GPU's
        numbers and sources, and the statement that times are estimates), ``totals``,
        ``kernels`` and ``launches``."""
        g = _gpu(gpu)
        return {
            "schema": "gpumat-profile/1",
            "model": {
                **dataclasses.asdict(g),
                "note": "estimates from a roofline model of the emulated device's counters, "
                "never measurements",
            },
            "totals": self.totals(g),
            "kernels": self.kernels(g),
            "launches": [{**x, **{"estimate": estimate(x, g)}} for x in self.launches],
        }

    def plot(self, gpu: GpuModel | str = "H100", ax=None):
        """A roofline chart (matplotlib): the GPU's bandwidth and FP32 roofs, and each kernel with
        a FLOP count as a point at (FLOPs per DRAM byte, FLOPs / estimated time); kernels without
        FLOP counts are listed in the legend's title. Returns the Axes. Raises ImportError
        without matplotlib."""
        import matplotlib.pyplot as plt

        g = _gpu(gpu)
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 4.5))
        ridge = g.fp32_flops_per_s / g.dram_bytes_per_s
        xs = [ridge / 1000, ridge, ridge * 1000]
        ax.loglog(
            xs,
            [min(g.fp32_flops_per_s, x * g.dram_bytes_per_s) / 1e9 for x in xs],
            "k-",
            label=f"{g.name} roofs",
        )
        without = []
        for k in self.kernels(g):
            if not k["flops"] or not k["dram_bytes"]:
                without.append(k["name"])
                continue
            ax.loglog(
                k["flops"] / k["dram_bytes"],
                k["flops"] / k["estimate_s"] / 1e9,
                "o",
                label=f"{k['name']} ({k['bound']})",
            )
        ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
        ax.set_ylabel("GFLOP/s (ESTIMATE: a model, not a measurement)")
        title = f"{len(without)} kernels without FLOP counts" if without else None
        ax.legend(fontsize=7, title=title, title_fontsize=7)
        ax.set_title(f"Roofline estimate, {g.name}")
        return ax


def profile() -> Profiler:
    """A :class:`Profiler` for a ``with`` block (``torch.profiler.profile`` in spirit)."""
    return Profiler()


def main(argv=None) -> int:
    """``python -m gpumat.profile [--gpu H100] [--json OUT] [--plot PNG] [--top N] script.py
    [args ...]``: runs the script as ``__main__`` under a :class:`Profiler` and prints the
    per-kernel table (also when the script calls ``sys.exit``); returns the script's exit status.
    The script must run its kernels on ``gpumat.emu(i)``."""
    p = argparse.ArgumentParser(prog="python -m gpumat.profile", description=main.__doc__)
    p.add_argument("--gpu", default="H100", choices=sorted(GPUS))
    p.add_argument("--json", help="write the profile as JSON here")
    p.add_argument("--plot", help="write a roofline chart (PNG) here (needs matplotlib)")
    p.add_argument("--top", type=int, default=None, help="only the N slowest kernels")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if not Path(a.script).is_file():
        p.error(f"no such script: {a.script}")
    if a.top is not None and a.top < 1:
        p.error(f"--top must be >= 1, got {a.top}")
    # The output paths are the caller's: resolved before the script can chdir().
    json_path = Path(a.json).resolve() if a.json else None
    plot_path = Path(a.plot).resolve() if a.plot else None
    pid = os.getpid()
    saved = sys.argv
    sys.argv = [a.script, *a.args]
    code = 0
    try:
        with Profiler() as prof:
            try:
                runpy.run_path(a.script, run_name="__main__")
            except SystemExit as e:  # the script's exit: its launches are still reported
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if e.code is not None and not isinstance(e.code, int):
                    print(e.code, file=sys.stderr)
    finally:
        sys.argv = saved
    if os.getpid() != pid:  # a child the script forked: the parent reports, once
        return code
    print(prof.table(a.gpu, top=a.top))
    if json_path:
        json_path.write_text(json.dumps(prof.to_json(a.gpu), indent=1) + "\n")
    if plot_path:
        import matplotlib

        matplotlib.use("Agg")
        ax = prof.plot(a.gpu)
        ax.figure.savefig(plot_path, dpi=120, bbox_inches="tight")
    return code
