// GPUMAT_HD marks small functions that the host and CUDA kernels share (random.h, window.h), so
// both devices compute them from one definition.
#pragma once

#ifdef __CUDACC__
#define GPUMAT_HD __host__ __device__ __forceinline__
#else
#define GPUMAT_HD inline
#endif
