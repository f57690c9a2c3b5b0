# The attention family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/attention.cpp.


def attention_(PyGpuMatrix q not None, PyGpuMatrix k not None, PyGpuMatrix v not None, PyGpuMatrix out not None,
               float scale, bint causal):
    _require(q, "attention", "q")
    _require(k, "attention", "k")
    _require(v, "attention", "v")
    _require(out, "attention", "out")
    with nogil:
        attention(q.mat[0], k.mat[0], v.mat[0], out.mat[0], scale, causal)


def attention_gradient_(PyGpuMatrix q not None, PyGpuMatrix k not None, PyGpuMatrix v not None,
                        PyGpuMatrix out not None, PyGpuMatrix dout not None, PyGpuMatrix dqkv not None,
                        float scale, bint causal):
    _require(q, "attention_gradient", "q")
    _require(k, "attention_gradient", "k")
    _require(v, "attention_gradient", "v")
    _require(out, "attention_gradient", "out")
    _require(dout, "attention_gradient", "dout")
    _require(dqkv, "attention_gradient", "dqkv")
    with nogil:
        attention_gradient(q.mat[0], k.mat[0], v.mat[0], out.mat[0], dout.mat[0], dqkv.mat[0], scale, causal)


def attention_strided_(PyGpuMatrix qkv not None, PyGpuMatrix out not None, int64_t heads, int64_t l, int64_t s,
                       int64_t e, int64_t ev, int64_t q_offset, int64_t k_offset, int64_t v_offset,
                       int64_t batch_stride, int64_t head_stride, int64_t row_stride, float scale, bint causal):
    _require(qkv, "attention_strided", "qkv")
    _require(out, "attention_strided", "out")
    with nogil:
        attention_strided(qkv.mat[0], out.mat[0], heads, l, s, e, ev, q_offset, k_offset, v_offset, batch_stride,
                          head_stride, row_stride, scale, causal)


def attention_strided_gradient_(PyGpuMatrix qkv not None, PyGpuMatrix out not None, PyGpuMatrix dout not None,
                                PyGpuMatrix dqkv not None, int64_t heads, int64_t l, int64_t s, int64_t e,
                                int64_t ev, int64_t q_offset, int64_t k_offset, int64_t v_offset,
                                int64_t batch_stride, int64_t head_stride, int64_t row_stride, float scale,
                                bint causal):
    _require(qkv, "attention_strided_gradient", "qkv")
    _require(out, "attention_strided_gradient", "out")
    _require(dout, "attention_strided_gradient", "dout")
    _require(dqkv, "attention_strided_gradient", "dqkv")
    with nogil:
        attention_strided_gradient(qkv.mat[0], out.mat[0], dout.mat[0], dqkv.mat[0], heads, l, s, e, ev, q_offset,
                                   k_offset, v_offset, batch_stride, head_stride, row_stride, scale, causal)
