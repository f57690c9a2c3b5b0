# Declarations of libgpumat (extensions/include/gpumat/*.h) for Cython.
from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libcpp cimport bool
from libcpp.string cimport string
from libcpp.vector cimport vector


cdef extern from "_errors.h":
    void gpumat_raise_py_error()
    void gpumat_set_cuda_error_type(object type)


cdef extern from "gpumat/device.h" namespace "gpumat":
    cdef enum class DeviceKind(int):
        Host
        Cuda
        Emu

    cdef cppclass Device:
        DeviceKind kind
        int index
        string str()
        @staticmethod
        Device host()
        @staticmethod
        Device cuda(int index)
        @staticmethod
        Device emu(int index)

    bool built_with_cuda()
    int cuda_device_count()
    int emu_device_count()
    void check_device(const Device&) except +gpumat_raise_py_error
    void synchronize(const Device&) except +gpumat_raise_py_error nogil
    uintptr_t cuda_stream(const Device&) except +gpumat_raise_py_error


cdef extern from "gpumat/allocator.h" namespace "gpumat":
    cdef cppclass MemoryStats:
        int64_t device_malloc_calls
        int64_t device_free_calls
        int64_t bytes_in_use
        int64_t peak_bytes_in_use
        int64_t bytes_reserved
        int64_t num_alloc_requests

    MemoryStats memory_stats(const Device&) except +gpumat_raise_py_error
    void reset_peak_memory_stats(const Device&) except +gpumat_raise_py_error
    void empty_cache(const Device&) except +gpumat_raise_py_error nogil
    size_t allocation_size(size_t)


cdef extern from "gpumat/gpu_matrix.h" namespace "gpumat":
    cdef cppclass GpuMatrix:
        GpuMatrix(vector[int64_t], Device) except +gpumat_raise_py_error
        GpuMatrix(const GpuMatrix&, vector[int64_t], int64_t) except +gpumat_raise_py_error
        GpuMatrix(float*, vector[int64_t], Device) except +gpumat_raise_py_error  # foreign view
        float* data()
        bool owns_data()
        const vector[int64_t]& shape()
        int64_t ndim()
        int64_t size()
        int64_t nbytes()
        const Device& device()
        void copy_from_host(const float*, int64_t) except +gpumat_raise_py_error nogil
        void copy_to_host(float*, int64_t) except +gpumat_raise_py_error nogil
        void copy_from(const GpuMatrix&) except +gpumat_raise_py_error nogil


# One kernel call per op, grouped by family as ops.h and gpumat/_core_ops/<family>.pxi are; the
# pointwise ops of kernels.def are declared in the generated _core_ops/pointwise.pxi.
cdef extern from "gpumat/ops.h" namespace "gpumat::ops":
    # elementwise
    void fill "gpumat::ops::fill"(GpuMatrix&, float) except +gpumat_raise_py_error nogil
    void add(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void mul "gpumat::ops::mul"(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void div "gpumat::ops::div"(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void eq(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void add_scalar "gpumat::ops::add_scalar"(const GpuMatrix&, float, GpuMatrix&) except +gpumat_raise_py_error nogil
    void mul_scalar "gpumat::ops::mul_scalar"(const GpuMatrix&, float, GpuMatrix&) except +gpumat_raise_py_error nogil
    void axpy(float, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void copy(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void exp "gpumat::ops::exp"(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void log "gpumat::ops::log"(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    # activation
    void relu(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void relu_gradient(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void dropout(const GpuMatrix&, GpuMatrix&, float, uint64_t) except +gpumat_raise_py_error nogil
    void relu_bias_gradient(const GpuMatrix&, const GpuMatrix&, GpuMatrix&,
                            GpuMatrix&) except +gpumat_raise_py_error nogil
    # layout
    void transpose(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void reshape(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void one_hot(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    # strided
    int kMaxStridedDims
    cppclass Strides:
        int64_t v[8]
    void broadcast_binary(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void broadcast_where(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void sum_to(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void as_strided(const GpuMatrix&, GpuMatrix&, Strides, int64_t) except +gpumat_raise_py_error nogil
    void as_strided_scatter(const GpuMatrix&, GpuMatrix&, Strides, int64_t) except +gpumat_raise_py_error nogil
    void tril "gpumat::ops::tril"(const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void triu "gpumat::ops::triu"(const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    # reduce
    void sum_to_size "gpumat::ops::sum_to_size"(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void broadcast_to(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void sum "gpumat::ops::sum"(const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void mean "gpumat::ops::mean"(const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void amax "gpumat::ops::amax"(const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void amax_gradient "gpumat::ops::amax_gradient"(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, GpuMatrix&,
                             int64_t) except +gpumat_raise_py_error nogil
    void broadcast_dim "gpumat::ops::broadcast_dim"(const GpuMatrix&, GpuMatrix&, int64_t, float) except +gpumat_raise_py_error nogil
    void argmax(const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void prod "gpumat::ops::prod"(const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void prod_gradient "gpumat::ops::prod_gradient"(const GpuMatrix&, const GpuMatrix&, GpuMatrix&,
                             int64_t) except +gpumat_raise_py_error nogil
    void cumsum "gpumat::ops::cumsum"(const GpuMatrix&, GpuMatrix&, int64_t, bool) except +gpumat_raise_py_error nogil
    # matmul
    void matmul(const GpuMatrix&, bool, const GpuMatrix&, bool, GpuMatrix&) except +gpumat_raise_py_error nogil
    void matmul_bias(const GpuMatrix&, bool, const GpuMatrix&, bool, const GpuMatrix&, GpuMatrix&,
                     bool) except +gpumat_raise_py_error nogil
    void bmm(const GpuMatrix&, bool, const GpuMatrix&, bool, GpuMatrix&) except +gpumat_raise_py_error nogil
    # attention
    void attention "gpumat::ops::attention"(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, GpuMatrix&, float,
                                            bool) except +gpumat_raise_py_error nogil
    void attention_gradient "gpumat::ops::attention_gradient"(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&,
                                                              const GpuMatrix&, const GpuMatrix&, GpuMatrix&, float,
                                                              bool) except +gpumat_raise_py_error nogil
    void attention_strided "gpumat::ops::attention_strided"(
        const GpuMatrix&, GpuMatrix&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
        int64_t, int64_t, int64_t, float, bool) except +gpumat_raise_py_error nogil
    void attention_strided_gradient "gpumat::ops::attention_strided_gradient"(
        const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t, int64_t, int64_t, int64_t,
        int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, bool) except +gpumat_raise_py_error nogil
    # softmax
    void softmax(const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void log_softmax(const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void softmax_gradient "gpumat::ops::softmax_gradient"(const GpuMatrix&, const GpuMatrix&, GpuMatrix&,
                               int64_t) except +gpumat_raise_py_error nogil
    void log_softmax_gradient(const GpuMatrix&, const GpuMatrix&, GpuMatrix&,
                              int64_t) except +gpumat_raise_py_error nogil
    # loss
    void cross_entropy "gpumat::ops::cross_entropy"(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void cross_entropy_with_gradient "gpumat::ops::cross_entropy_with_gradient"(const GpuMatrix&, const GpuMatrix&, GpuMatrix&,
                                             GpuMatrix&) except +gpumat_raise_py_error nogil
    void nll_loss(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void nll_loss_gradient(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void mse_loss(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void l1_loss "gpumat::ops::l1_loss"(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void mse_loss_gradient(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&,
                           GpuMatrix&) except +gpumat_raise_py_error nogil
    void l1_loss_gradient "gpumat::ops::l1_loss_gradient"(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&,
                           GpuMatrix&) except +gpumat_raise_py_error nogil
    # conv
    void conv2d(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t, int64_t, int64_t,
                int64_t) except +gpumat_raise_py_error nogil
    void conv2d_gradient_input(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t, int64_t,
                               int64_t, int64_t) except +gpumat_raise_py_error nogil
    void conv2d_gradient_filter(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t, int64_t,
                                int64_t, int64_t) except +gpumat_raise_py_error nogil
    void conv1d(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t,
                int64_t) except +gpumat_raise_py_error nogil
    void conv1d_gradient_input(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t,
                               int64_t) except +gpumat_raise_py_error nogil
    void conv1d_gradient_filter(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t,
                                int64_t) except +gpumat_raise_py_error nogil
    int64_t set_conv_workspace_limit(int64_t) except +gpumat_raise_py_error
    void add_channel_bias(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void reduce_sum_channels(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    # pool
    void max_pool2d(const GpuMatrix&, GpuMatrix&, int64_t, int64_t, int64_t, int64_t, int64_t,
                    int64_t) except +gpumat_raise_py_error nogil
    void max_pool2d_gradient(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t, int64_t, int64_t,
                             int64_t, int64_t, int64_t) except +gpumat_raise_py_error nogil
    void avg_pool2d(const GpuMatrix&, GpuMatrix&, int64_t, int64_t, int64_t, int64_t, int64_t,
                    int64_t) except +gpumat_raise_py_error nogil
    void avg_pool2d_gradient(const GpuMatrix&, GpuMatrix&, int64_t, int64_t, int64_t, int64_t, int64_t,
                             int64_t) except +gpumat_raise_py_error nogil
    void adaptive_avg_pool2d(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void adaptive_avg_pool2d_gradient(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    # rnn
    void lstm_cell(const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void lstm_cell_gradient(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, const GpuMatrix&,
                            GpuMatrix&) except +gpumat_raise_py_error nogil
    void gru_cell(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void gru_cell_gradient(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, const GpuMatrix&,
                           GpuMatrix&) except +gpumat_raise_py_error nogil
    # random
    void uniform "gpumat::ops::uniform"(GpuMatrix&, float, float, uint64_t) except +gpumat_raise_py_error nogil
    void normal "gpumat::ops::normal"(GpuMatrix&, float, float, uint64_t) except +gpumat_raise_py_error nogil
    void randint "gpumat::ops::randint"(GpuMatrix&, int64_t, int64_t, uint64_t) except +gpumat_raise_py_error nogil
    # sort
    void argsort(const GpuMatrix&, GpuMatrix&, int64_t, bool) except +gpumat_raise_py_error nogil
    void gather(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    void gather_gradient(const GpuMatrix&, const GpuMatrix&, GpuMatrix&, int64_t) except +gpumat_raise_py_error nogil
    # optim
    void adam_update(GpuMatrix&, const GpuMatrix&, GpuMatrix&, GpuMatrix&, float, float, float, float,
                     int64_t) except +gpumat_raise_py_error nogil
    void sgd_update(const vector[GpuMatrix*]&, const vector[const GpuMatrix*]&,
                    float, float) except +gpumat_raise_py_error nogil
    void momentum_sgd_update(const vector[GpuMatrix*]&, const vector[const GpuMatrix*]&,
                             const vector[GpuMatrix*]&, float, float, float, float,
                             bool) except +gpumat_raise_py_error nogil
    void adam_update_multi(const vector[GpuMatrix*]&, const vector[const GpuMatrix*]&,
                           const vector[GpuMatrix*]&, const vector[GpuMatrix*]&, float, float, float,
                           float, int64_t, float, bool,
                           const vector[GpuMatrix*]&) except +gpumat_raise_py_error nogil
    void total_norm_multi(const vector[const GpuMatrix*]&, float,
                          GpuMatrix&) except +gpumat_raise_py_error nogil
    void clip_scale_multi(const vector[GpuMatrix*]&, const GpuMatrix&,
                          float) except +gpumat_raise_py_error nogil
    void adadelta_update_multi(const vector[GpuMatrix*]&, const vector[const GpuMatrix*]&,
                               const vector[GpuMatrix*]&, const vector[GpuMatrix*]&, float, float,
                               float) except +gpumat_raise_py_error nogil
    # index
    void index_select(const GpuMatrix&, int64_t, const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void index_add(GpuMatrix&, int64_t, const GpuMatrix&, const GpuMatrix&,
                   float) except +gpumat_raise_py_error nogil
    void index_copy(GpuMatrix&, int64_t, const GpuMatrix&, const GpuMatrix&) except +gpumat_raise_py_error nogil
    # norm
    void layer_norm(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, GpuMatrix&, float,
                    bool) except +gpumat_raise_py_error nogil
    void layer_norm_stats(const GpuMatrix&, GpuMatrix&, float, bool) except +gpumat_raise_py_error nogil
    void layer_norm_gradient(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, const GpuMatrix&,
                             GpuMatrix&, bool) except +gpumat_raise_py_error nogil
    void layer_norm_weight_gradient(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&,
                                    GpuMatrix&) except +gpumat_raise_py_error nogil
    void layer_norm_backward(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, GpuMatrix&, GpuMatrix&,
                             GpuMatrix&, float, bool) except +gpumat_raise_py_error nogil
    void batch_norm_stats(const GpuMatrix&, GpuMatrix&) except +gpumat_raise_py_error nogil
    void batch_norm(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, GpuMatrix&,
                    float) except +gpumat_raise_py_error nogil
    void batch_norm_gradient(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, const GpuMatrix&,
                             GpuMatrix&, float, bool) except +gpumat_raise_py_error nogil
    void batch_norm_weight_gradient(const GpuMatrix&, const GpuMatrix&, const GpuMatrix&, GpuMatrix&,
                                    float) except +gpumat_raise_py_error nogil
    # determinism
    bool are_deterministic_algorithms_enabled()
    void use_deterministic_algorithms(bool)
    # op counting
    int64_t op_count(const Device&) except +gpumat_raise_py_error
    # host threads
    int get_num_threads() except +gpumat_raise_py_error
    void set_num_threads(int) except +gpumat_raise_py_error
    int effective_num_threads() except +gpumat_raise_py_error
    # host BLAS
    string use_onednn(const string&) except +gpumat_raise_py_error
    string host_blas() except +gpumat_raise_py_error


cdef class PyGpuMatrix:
    cdef GpuMatrix* mat
    cdef object _device
    cdef object _base  # the array a view shares storage with (kept alive by this reference)
    cdef object _host  # the numpy array of PyGpuMatrix(host, rows, cols), for loadFromDevice


cdef extern from "gpumat/program.h" namespace "gpumat":
    cdef cppclass Scalar:
        double f
        uint64_t u

    cdef cppclass Program:
        Program(Device) except +gpumat_raise_py_error
        int add_fixed(float*, const vector[int64_t]&) except +gpumat_raise_py_error
        int add_input(int, const vector[int64_t]&) except +gpumat_raise_py_error
        void add_step(const string&, const vector[int]&, const vector[Scalar]&,
                      int) except +gpumat_raise_py_error
        void bind_input(int, float*, int64_t) except +gpumat_raise_py_error
        void run(uint64_t) except +gpumat_raise_py_error nogil
        void set_graphs(bool)
        int num_steps()
        int num_inputs()
        string mode()
        const string& graph_status()
        int64_t graph_nodes()
        int64_t captures()
        int64_t graph_launches()
