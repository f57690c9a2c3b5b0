// The DLPack v1.0 exchange structs (https://dmlc.github.io/dlpack/latest/c_api.html), declared
// here from the specification's ABI: the layouts, field order and constants must match it exactly,
// because producers and consumers in other libraries (numpy, PyTorch, CuPy) read them. gpumat uses
// only float32 on the host and CUDA devices, but the full device and type-code lists are declared
// so that foreign tensors can be named in error messages.
#pragma once

#include <stdint.h>

#define GPUMAT_DLPACK_MAJOR_VERSION 1
#define GPUMAT_DLPACK_MINOR_VERSION 0

// DLManagedTensorVersioned::flags bits.
#define GPUMAT_DLPACK_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define GPUMAT_DLPACK_FLAG_IS_COPIED (UINT64_C(1) << 1)

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;  // the CUDA ordinal; 0 for the CPU
} DLDevice;

typedef enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
} DLDataTypeCode;

typedef struct {
  uint8_t code;  // a DLDataTypeCode
  uint8_t bits;  // bits per lane: 32 for float32
  uint16_t lanes;
} DLDataType;

typedef struct {
  void* data;  // start of the allocation; the tensor begins at data + byte_offset
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;    // ndim entries
  int64_t* strides;  // ndim entries in elements (not bytes), or NULL for compact row-major
  uint64_t byte_offset;
} DLTensor;

// The legacy (pre-1.0) managed tensor, in a PyCapsule named "dltensor".
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

// The DLPack >= 1.0 managed tensor, in a PyCapsule named "dltensor_versioned". Everything before
// `flags` is ABI-stable across major versions, so a consumer can always call the deleter.
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
