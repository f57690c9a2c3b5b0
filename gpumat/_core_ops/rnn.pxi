# The rnn family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/rnn.cpp.


def lstm_cell_(PyGpuMatrix gates not None, PyGpuMatrix c not None, PyGpuMatrix out not None):
    _require(gates, "lstm_cell", "gates")
    _require(c, "lstm_cell", "c")
    _require(out, "lstm_cell", "out")
    with nogil:
        lstm_cell(gates.mat[0], c.mat[0], out.mat[0])


def lstm_cell_gradient_(PyGpuMatrix gates not None, PyGpuMatrix c not None,
                        PyGpuMatrix y not None, PyGpuMatrix dy not None,
                        PyGpuMatrix out not None):
    _require(gates, "lstm_cell_gradient", "gates")
    _require(c, "lstm_cell_gradient", "c")
    _require(y, "lstm_cell_gradient", "y")
    _require(dy, "lstm_cell_gradient", "dy")
    _require(out, "lstm_cell_gradient", "out")
    with nogil:
        lstm_cell_gradient(gates.mat[0], c.mat[0], y.mat[0], dy.mat[0], out.mat[0])


def gru_cell_(PyGpuMatrix gi not None, PyGpuMatrix gh not None, PyGpuMatrix hx not None,
              PyGpuMatrix out not None):
    _require(gi, "gru_cell", "gi")
    _require(gh, "gru_cell", "gh")
    _require(hx, "gru_cell", "hx")
    _require(out, "gru_cell", "out")
    with nogil:
        gru_cell(gi.mat[0], gh.mat[0], hx.mat[0], out.mat[0])


def gru_cell_gradient_(PyGpuMatrix gi not None, PyGpuMatrix gh not None,
                       PyGpuMatrix hx not None, PyGpuMatrix dy not None,
                       PyGpuMatrix out not None):
    _require(gi, "gru_cell_gradient", "gi")
    _require(gh, "gru_cell_gradient", "gh")
    _require(hx, "gru_cell_gradient", "hx")
    _require(dy, "gru_cell_gradient", "dy")
    _require(out, "gru_cell_gradient", "out")
    with nogil:
        gru_cell_gradient(gi.mat[0], gh.mat[0], hx.mat[0], dy.mat[0], out.mat[0])
