"""gpumat: a deep-learning stack you can read end to end, from CUDA kernels to MNIST training.

Layers, bottom up (see docs/ARCHITECTURE.md): libgpumat (C++/CUDA kernels) -> gpumat._core (Cython,
PyGpuMatrix) -> gpumat.ops (one call per kernel; gpumat.reference, its numpy twin) -> gpumat.graph
(nodes, ops by kernel family, gradients) -> gpumat.runtime (the executor: fusion, memory plan,
compiled steps) -> gpumat.autograd, gpumat.Tensor (eager autograd) -> gpumat.nn, gpumat.optim,
gpumat.data, gpumat.datasets, gpumat.compile -> gpumat.train, gpumat.models.

This module is the package's face: it only re-exports. Modules inside gpumat never import it.

Arrays are float32, row-major, contiguous, on ``cpu()`` (the host), ``gpu(i)`` (CUDA) or ``emu(i)``
(the CUDA kernels run by gpumat's CUDA emulator on the CPU, to check them without a GPU).
"""

# NOTE: no `from __future__ import annotations` and private aliases for os and numpy: the
# gpumat namespace exports only gpumat's own names (dir(gpumat) is what a user explores).
import builtins as _builtins
import os as _os

# NOTE: the host kernels run on gpumat's own thread pool (src/host/thread_pool.cpp, which waits its
# own way); libgomp runs the emulated device's blocks, and these settings are for its workers.
# libgomp reads them when _core loads it (too late when another library, PyTorch say, loaded libgomp
# first); an explicit user setting wins. Measured while libgomp ran the host kernels: a worker that
# ends a parallel region spins GOMP_SPINCOUNT times (one `pause` each: 13 ns on the 2-core Xeon of
# benchmarks/, so ~26 us) waiting for the next region, then sleeps. libgomp's default (300,000
# spins, ~4 ms) fought other busy processes for the cores (a 1000x256 relu took 6.9 ms spinning,
# 0.14 ms passive, on a loaded 2-core machine); sleeping at once (OMP_WAIT_POLICY=PASSIVE alone)
# made every region pay a futex wake-up, 50-80 us there (a 2048x128 layer norm's statistics took 111
# us instead of 49; the GPT step 98 ms compiled instead of 82). 2,000 spins kept most of that gain;
# 10,000 gained 4% more idle and lost 20% beside a busy process (benchmarks/README.md, "Front-end
# training steps"). PASSIVE stays, so that a process running more OpenMP threads than CPUs does not
# spin at all. They are set only while _core loads (below) and then removed again: left in
# os.environ they would pass to every child process, so a PyTorch program started from a gpumat one
# (the benchmarks' own-process workers) would run its threads with gpumat's wait policy, not its
# own.
_OPENMP_WAIT_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "2000"}


# --- gpumat.distributed: one rank per core group -------------------------------------------------
# NOTE: N ranks launched on one node by an MPI launcher would each start one OpenMP thread per
# core, N x oversubscribing it (2 ranks on 2 cores: MNIST MLP epoch 2.2 s instead of 0.48 s).
# Like torchrun (which sets OMP_NUM_THREADS=1), give each rank its share of the cores, read before
# _core loads libgomp and OpenBLAS. The local rank count comes from MPICH/Hydra (MPI_LOCALNRANKS) or
# Open MPI (OMPI_COMM_WORLD_LOCAL_SIZE); an explicit OMP_NUM_THREADS wins.
def _threads_per_local_rank() -> int | None:
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        try:
            local = int(_os.environ.get(var, ""))
        except ValueError:
            continue
        if local > 1:
            return _builtins.max(1, (_os.cpu_count() or 1) // local)
    return None


if "OMP_NUM_THREADS" not in _os.environ and _threads_per_local_rank() is not None:
    _os.environ["OMP_NUM_THREADS"] = str(_threads_per_local_rank())
# --------------------------------------------------------------------------------------------------


# libgomp reads the settings when _core loads it; unset again afterwards (see the note above).
_unset_wait_settings = [name for name in _OPENMP_WAIT_DEFAULTS if name not in _os.environ]
_os.environ.update({name: _OPENMP_WAIT_DEFAULTS[name] for name in _unset_wait_settings})
try:
    from gpumat import _core  # noqa: E402, F401
finally:
    for _name in _unset_wait_settings:
        del _os.environ[_name]
    del _unset_wait_settings

# The host BLAS (oneDNN's sgemm when its wheel is installed, else OpenBLAS; GPUMAT_BLAS chooses),
# set before any kernel runs.
from gpumat import _host_blas  # noqa: E402

_host_blas.load()

from gpumat import (  # noqa: E402
    accelerator,
    autodiff,
    cuda,
    data,
    datasets,
    functions,
    gpu_op,
    graph,
    nn,
    ops,
    optim,
    profile,
    reference,
    runtime,
    utils,
)
from gpumat._core import CudaError, PyGpuMatrix  # noqa: E402
from gpumat.arrays import array  # noqa: E402
from gpumat.autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402
from gpumat.compiler import compile  # noqa: E402, A004
from gpumat.creation import (  # noqa: E402
    arange,
    empty,
    empty_like,
    eye,
    flatten,
    from_numpy,
    full,
    full_like,
    linspace,
    multinomial,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from gpumat.devices import (  # noqa: E402
    Device,
    __version__,
    are_deterministic_algorithms_enabled,
    build_info,
    cpu,
    cuda_available,
    empty_cache,
    emu,
    get_num_threads,
    gpu,
    is_deterministic_algorithms_warn_only_enabled,
    is_gpu_device,
    launch_count,
    memory_stats,
    reset_peak_memory_stats,
    set_num_threads,
    synchronize,
    use_deterministic_algorithms,
)
from gpumat.devices import Device as device  # noqa: E402  torch.device's spelling: a class
from gpumat.dlpack import from_dlpack  # noqa: E402
from gpumat.dtypes import bool_ as bool  # noqa: E402, A004
from gpumat.dtypes import dtype, float32, int64  # noqa: E402
from gpumat.dtypes import float32 as float  # noqa: E402, A004  torch.float's spelling
from gpumat.dtypes import int64 as long  # noqa: E402

# torch's tensor functions: gpumat.exp(x), gpumat.sum(x, 1), gpumat.matmul(a, b), ...
from gpumat.functions import *  # noqa: E402, F403, A004
from gpumat.random import manual_seed  # noqa: E402
from gpumat.runtime import Executor  # noqa: E402
from gpumat.serialization import load, save  # noqa: E402
from gpumat.tensor import Tensor  # noqa: E402

__all__ = [
    "__version__",
    "Device",
    "CudaError",
    "Executor",
    "PyGpuMatrix",
    "Tensor",
    "arange",
    "array",
    "autodiff",
    "bool",
    "build_info",
    "compile",
    "cpu",
    "accelerator",
    "cuda",
    "cuda_available",
    "data",
    "datasets",
    "device",
    "dtype",
    "empty",
    "empty_cache",
    "empty_like",
    "emu",
    "eye",
    "enable_grad",
    "flatten",
    "float",
    "float32",
    "from_dlpack",
    "from_numpy",
    "full",
    "full_like",
    "functions",
    "get_num_threads",
    "gpu",
    "gpu_op",
    "graph",
    "int64",
    "is_gpu_device",
    "is_grad_enabled",
    "launch_count",
    "linspace",
    "load",
    "long",
    "manual_seed",
    "memory_stats",
    "multinomial",
    "nn",
    "no_grad",
    "ones",
    "ones_like",
    "ops",
    "optim",
    "profile",
    "rand",
    "rand_like",
    "randint",
    "randn",
    "randn_like",
    "randperm",
    "reference",
    "reset_peak_memory_stats",
    "runtime",
    "save",
    "set_grad_enabled",
    "set_num_threads",
    "synchronize",
    "tensor",
    "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled",
    "is_deterministic_algorithms_warn_only_enabled",
    "utils",
    "zeros",
    "zeros_like",
]
__all__ += functions.__all__
