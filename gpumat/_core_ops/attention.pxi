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
