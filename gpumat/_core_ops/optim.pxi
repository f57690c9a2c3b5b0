# The optim family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/optim.cpp.
# The multi-tensor steps take Python lists of PyGpuMatrix (_array_list checks each element).


def adam_update_(PyGpuMatrix param not None, PyGpuMatrix grad not None, PyGpuMatrix m not None,
                 PyGpuMatrix v not None, float lr, float beta1, float beta2, float eps,
                 int64_t step):
    _require(param, "adam_update", "param")
    _require(grad, "adam_update", "grad")
    _require(m, "adam_update", "m")
    _require(v, "adam_update", "v")
    with nogil:
        adam_update(param.mat[0], grad.mat[0], m.mat[0], v.mat[0], lr, beta1, beta2, eps, step)


cdef vector[GpuMatrix*] _array_list(list arrays, str op, str what) except *:
    # The GpuMatrix pointers of a list of PyGpuMatrix; TypeError/ValueError naming the element.
    cdef vector[GpuMatrix*] out
    cdef PyGpuMatrix x
    for i, obj in enumerate(arrays):
        if not isinstance(obj, PyGpuMatrix):
            raise TypeError(f"{op}: {what} {i} is a {type(obj).__name__}, expected PyGpuMatrix")
        x = obj
        if x.mat == NULL:  # the message is built only on error (this runs per tensor per step)
            _require(x, op, f"{what} {i}")
        out.push_back(x.mat)
    return out


cdef vector[const GpuMatrix*] _const_array_list(list arrays, str op, str what) except *:
    cdef vector[GpuMatrix*] mats = _array_list(arrays, op, what)
    cdef vector[const GpuMatrix*] out
    for m in mats:
        out.push_back(m)
    return out


def sgd_update_(list params not None, list grads not None, float lr, float weight_decay):
    cdef vector[GpuMatrix*] p = _array_list(params, "sgd_update", "parameter")
    cdef vector[const GpuMatrix*] g = _const_array_list(grads, "sgd_update", "gradient")
    with nogil:
        sgd_update(p, g, lr, weight_decay)


def momentum_sgd_update_(list params not None, list grads not None, list velocities not None,
                         float lr, float momentum, float dampening, float weight_decay,
                         bint nesterov):
    cdef str op = "momentum_sgd_update"
    cdef vector[GpuMatrix*] p = _array_list(params, op, "parameter")
    cdef vector[const GpuMatrix*] g = _const_array_list(grads, op, "gradient")
    cdef vector[GpuMatrix*] v = _array_list(velocities, op, "velocity")
    with nogil:
        momentum_sgd_update(p, g, v, lr, momentum, dampening, weight_decay, nesterov)


def adam_update_multi_(list params not None, list grads not None, list m not None,
                       list v not None, float lr, float beta1, float beta2, float eps,
                       int64_t step, float weight_decay, bint decoupled, list max_v not None):
    cdef str op = "adam_update_multi"
    cdef vector[GpuMatrix*] p = _array_list(params, op, "parameter")
    cdef vector[const GpuMatrix*] g = _const_array_list(grads, op, "gradient")
    cdef vector[GpuMatrix*] pm = _array_list(m, op, "m")
    cdef vector[GpuMatrix*] pv = _array_list(v, op, "v")
    cdef vector[GpuMatrix*] pmax = _array_list(max_v, op, "max_v")
    with nogil:
        adam_update_multi(p, g, pm, pv, lr, beta1, beta2, eps, step, weight_decay, decoupled, pmax)


def total_norm_multi_(list arrays not None, float norm_type, PyGpuMatrix out not None):
    cdef vector[const GpuMatrix*] x = _const_array_list(arrays, "total_norm_multi", "array")
    _require(out, "total_norm_multi", "out")
    with nogil:
        total_norm_multi(x, norm_type, out.mat[0])


def clip_scale_multi_(list arrays not None, PyGpuMatrix total_norm not None, float max_norm):
    cdef vector[GpuMatrix*] x = _array_list(arrays, "clip_scale_multi", "array")
    _require(total_norm, "clip_scale_multi", "total_norm")
    with nogil:
        clip_scale_multi(x, total_norm.mat[0], max_norm)


def adadelta_update_multi_(list params not None, list grads not None, list square_avgs not None,
                           list acc_deltas not None, float lr, float rho, float eps):
    cdef str op = "adadelta_update_multi"
    cdef vector[GpuMatrix*] p = _array_list(params, op, "parameter")
    cdef vector[const GpuMatrix*] g = _const_array_list(grads, op, "gradient")
    cdef vector[GpuMatrix*] sq = _array_list(square_avgs, op, "square_avg")
    cdef vector[GpuMatrix*] acc = _array_list(acc_deltas, op, "acc_delta")
    with nogil:
        adadelta_update_multi(p, g, sq, acc, lr, rho, eps)
