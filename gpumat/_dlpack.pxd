# Cython declarations of the DLPack v1.0 structs in _dlpack.h (see there for the specification).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t


cdef extern from "_dlpack.h":
    uint64_t GPUMAT_DLPACK_FLAG_READ_ONLY
    uint64_t GPUMAT_DLPACK_FLAG_IS_COPIED

    ctypedef enum DLDeviceType:
        kDLCPU
        kDLCUDA

    ctypedef struct DLDevice:
        DLDeviceType device_type
        int32_t device_id

    ctypedef enum DLDataTypeCode:
        kDLInt
        kDLUInt
        kDLFloat
        kDLBfloat
        kDLComplex
        kDLBool

    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes

    ctypedef struct DLTensor:
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset

    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor*) noexcept nogil

    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor

    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void* manager_ctx
        void (*deleter)(DLManagedTensorVersioned*) noexcept nogil
        uint64_t flags
        DLTensor dl_tensor
