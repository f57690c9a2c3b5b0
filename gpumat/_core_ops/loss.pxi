# The loss family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/loss.cpp.


def cross_entropy_(PyGpuMatrix logits not None, PyGpuMatrix labels not None,
                           PyGpuMatrix out not None):
    _require(logits, "cross_entropy", "logits")
    _require(labels, "cross_entropy", "labels")
    _require(out, "cross_entropy", "out")
    with nogil:
        cross_entropy(logits.mat[0], labels.mat[0], out.mat[0])


def cross_entropy_with_gradient_(PyGpuMatrix logits not None, PyGpuMatrix labels not None,
                                         PyGpuMatrix loss not None, PyGpuMatrix grad not None):
    cdef str op = "cross_entropy_with_gradient"
    _require(logits, op, "logits")
    _require(labels, op, "labels")
    _require(loss, op, "loss")
    _require(grad, op, "grad")
    with nogil:
        cross_entropy_with_gradient(logits.mat[0], labels.mat[0], loss.mat[0], grad.mat[0])


def nll_loss_(PyGpuMatrix log_probs not None, PyGpuMatrix target not None, PyGpuMatrix out not None):
    _require(log_probs, "nll_loss", "log_probs")
    _require(target, "nll_loss", "target")
    _require(out, "nll_loss", "out")
    with nogil:
        nll_loss(log_probs.mat[0], target.mat[0], out.mat[0])


def nll_loss_gradient_(PyGpuMatrix target not None, PyGpuMatrix dloss not None, PyGpuMatrix out not None):
    _require(target, "nll_loss_gradient", "target")
    _require(dloss, "nll_loss_gradient", "dloss")
    _require(out, "nll_loss_gradient", "out")
    with nogil:
        nll_loss_gradient(target.mat[0], dloss.mat[0], out.mat[0])


def mse_loss_(PyGpuMatrix pred not None, PyGpuMatrix target not None, PyGpuMatrix out not None):
    _require(pred, "mse_loss", "pred")
    _require(target, "mse_loss", "target")
    _require(out, "mse_loss", "out")
    with nogil:
        mse_loss(pred.mat[0], target.mat[0], out.mat[0])


def l1_loss_(PyGpuMatrix pred not None, PyGpuMatrix target not None, PyGpuMatrix out not None):
    _require(pred, "l1_loss", "pred")
    _require(target, "l1_loss", "target")
    _require(out, "l1_loss", "out")
    with nogil:
        l1_loss(pred.mat[0], target.mat[0], out.mat[0])


def mse_loss_gradient_(PyGpuMatrix pred not None, PyGpuMatrix target not None,
                       PyGpuMatrix dloss not None, PyGpuMatrix out not None):
    _require(pred, "mse_loss_gradient", "pred")
    _require(target, "mse_loss_gradient", "target")
    _require(dloss, "mse_loss_gradient", "dloss")
    _require(out, "mse_loss_gradient", "out")
    with nogil:
        mse_loss_gradient(pred.mat[0], target.mat[0], dloss.mat[0], out.mat[0])


def l1_loss_gradient_(PyGpuMatrix pred not None, PyGpuMatrix target not None,
                       PyGpuMatrix dloss not None, PyGpuMatrix out not None):
    _require(pred, "l1_loss_gradient", "pred")
    _require(target, "l1_loss_gradient", "target")
    _require(dloss, "l1_loss_gradient", "dloss")
    _require(out, "l1_loss_gradient", "out")
    with nogil:
        l1_loss_gradient(pred.mat[0], target.mat[0], dloss.mat[0], out.mat[0])
