"""gpumat's torch-namespace functions (``gpumat.exp(x)``, ``gpumat.sum(x, 1)``, ...) and
``gpumat.cuda``: each function is its Tensor method, and agrees with PyTorch's on fresh random
inputs; a non-tensor argument is a TypeError naming the function."""

import numpy as np
import pytest
import torch
from helpers import new_rng

import gpumat
from gpumat import functions

CASES = {  # name -> (args after the tensor, kwargs); None: every pointwise function, no args
    "neg": ((), {}),
    "softmax": ((1,), {}),
    "log_softmax": ((0,), {}),
    "sum": ((1,), {"keepdim": True}),
    "mean": ((), {"dim": 0}),
    "max": ((), {}),
    "argmax": ((1,), {}),
    "reshape": (((6, 2),), {}),
    "squeeze": ((), {}),
    "unsqueeze": ((0,), {}),
    "t": ((), {}),
    "transpose": ((0, 1), {}),
    "clamp": ((0.5, 1.5), {}),
    "clip": ((), {"max": 1.0}),
    **{name: ((1.0,), {}) for name in ("eq", "ne", "lt", "le", "gt", "ge")},
    "permute": (((1, 0),), {}),
    "movedim": ((0, 1), {}),
    "swapaxes": ((0, 1), {}),
    "narrow": ((1, 1, 2), {}),
    "select": ((1, -1), {}),
    "unbind": ((), {"dim": 1}),
    "split": (([1, 2],), {}),
    "tensor_split": ((2,), {"dim": 1}),
    "chunk": ((3,), {"dim": 1}),
    "flip": (((0, 1),), {}),
    "tile": (((2, 1),), {}),
    "broadcast_to": (((2, 3, 4),), {}),
    "roll": ((1, 1), {}),
    "repeat_interleave": ((2,), {"dim": 0}),
    "sort": ((0,), {"descending": True}),
    "argsort": ((), {"dim": 1}),
    "topk": ((2,), {}),
    # reductions, powers, triangles, sorting, creation
    "cumsum": ((1,), {}),
    "logsumexp": ((1,), {}),
    "pow": ((1.5,), {}),
    "amin": ((), {"dim": 0, "keepdim": True}),
    "prod": ((1,), {}),
    "var": ((1,), {}),
    "norm": ((), {"p": 3.0}),
}


# Those whose other arguments are tensors (of each library) are compared with PyTorch's in
# tests/kernels/test_everyday_pointwise.py (the index ones in tests/kernels/test_index.py).
TENSOR_ARGS = {
    "matmul",
    "bmm",
    "mm",
    "logical_and",
    "logical_or",
    "minimum",
    "maximum",
    "masked_fill",
    "where",
    "cat",  # lists of tensors: test_cat_and_stack_are_pytorchs
    "concat",
    "concatenate",
    "stack",
    "meshgrid",  # 1-D tensors: test_views.py's test_roll_repeat_interleave_and_meshgrid
    # index functions: in tests/kernels/test_index.py
    "gather",
    "index_add",
    "index_copy",
    "index_fill",
    "index_select",
    "masked_select",
    "scatter_add",
    "take_along_dim",
}


@pytest.mark.parametrize("name", sorted(set(functions.__all__) - TENSOR_ARGS))
def test_each_function_is_its_method_and_pytorchs(ctx, name):
    rng, seed = new_rng()
    values = rng.uniform(0.1, 2.0, (3, 4)).astype(np.float32)  # positive: log and sqrt
    args, kwargs = CASES.get(name, ((), {}))
    x = gpumat.tensor(values, device=ctx)
    ours = getattr(gpumat, name)(x, *args, **kwargs)
    method = getattr(gpumat.tensor(values, device=ctx), name)(*args, **kwargs)
    theirs = getattr(torch, name)(torch.from_numpy(values.copy()), *args, **kwargs)
    if name in ("sort", "topk"):  # named tuples (values, indices)
        assert type(ours).__name__ == name and ours._fields == ("values", "indices")
        for part in ("indices", "values"):
            np.testing.assert_array_equal(
                getattr(ours, part).numpy(), getattr(theirs, part).numpy(), f"{name}"
            )
        ours, method, theirs = ours.values, method.values, theirs.values
    if isinstance(theirs, tuple):  # unbind, split, chunk: tuples of tensors
        assert len(ours) == len(method) == len(theirs)
    else:
        ours, method, theirs = [ours], [method], [theirs]
    for o, m, t in zip(ours, method, theirs, strict=True):
        np.testing.assert_array_equal(o.numpy(), m.numpy())
        np.testing.assert_allclose(
            o.numpy().astype(np.float64),
            t.numpy().astype(np.float64),
            rtol=2e-6,
            atol=1e-7,
            err_msg=f"{name} (seed={seed})",
        )
    with pytest.raises(TypeError, match=f"{name}: expected a Tensor, got ndarray"):
        getattr(gpumat, name)(values, *args, **kwargs)


def test_matmul_and_gradients_through_the_functions(ctx):
    rng, seed = new_rng()
    a, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 2))
    x = gpumat.tensor(a, device=ctx, requires_grad=True)
    w = gpumat.tensor(b.astype(np.float32), device=ctx)
    gpumat.sum(gpumat.tanh(gpumat.matmul(x, w))).backward()
    t = torch.from_numpy(a.copy()).requires_grad_()
    torch.sum(torch.tanh(torch.matmul(t, torch.from_numpy(b.astype(np.float32))))).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_bmm_and_gradients_through_the_functions(ctx):
    rng, seed = new_rng()
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3, 5), (4, 5, 2)))
    x = gpumat.tensor(a, device=ctx, requires_grad=True)
    gpumat.sum(gpumat.tanh(gpumat.bmm(x, gpumat.tensor(b, device=ctx)))).backward()
    t = torch.from_numpy(a.copy()).requires_grad_()
    torch.sum(torch.tanh(torch.bmm(t, torch.from_numpy(b)))).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=seed)


def test_cuda_namespace():
    assert gpumat.cuda.is_available() == gpumat.cuda_available()
    count = gpumat.cuda.device_count()
    assert count == (gpumat.build_info()["cuda_device_count"] if gpumat.build_info()["cuda"] else 0)
    assert gpumat.cuda.current_device() == 0
    gpumat.cuda.manual_seed(5)
    a = gpumat.rand(4)
    gpumat.cuda.manual_seed_all(5)
    np.testing.assert_array_equal(gpumat.rand(4).numpy(), a.numpy())
    with pytest.raises(ValueError, match="expected a CUDA device"):
        gpumat.cuda.synchronize("emu")
    if count == 0:
        with pytest.raises(gpumat.CudaError):
            gpumat.cuda.synchronize()
    else:
        gpumat.cuda.synchronize()
        gpumat.cuda.synchronize(count - 1)


def test_cat_and_stack_are_pytorchs(ctx):
    rng, seed = new_rng()
    parts = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (4, 3), (1, 3))]
    ours = [gpumat.tensor(p, device=ctx, requires_grad=True) for p in parts]
    theirs = [torch.from_numpy(p.copy()).requires_grad_() for p in parts]
    weights = rng.standard_normal((7, 3)).astype(np.float32)
    for name in ("cat", "concat", "concatenate"):
        out, ref = getattr(gpumat, name)(ours, 0), getattr(torch, name)(theirs, 0)
        np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    (gpumat.cat(ours) * gpumat.tensor(weights, device=ctx)).sum().backward()
    (torch.cat(theirs) * torch.from_numpy(weights)).sum().backward()
    for o, t in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(o.grad.numpy(), t.grad.numpy(), err_msg=seed)
    same = [gpumat.tensor(parts[0], device=ctx)] * 3
    for dim in (0, 1, 2, -1):
        np.testing.assert_array_equal(
            gpumat.stack(same, dim).numpy(),
            torch.stack([torch.from_numpy(parts[0])] * 3, dim).numpy(),
        )
    with pytest.raises(TypeError, match="cat: expected a sequence of Tensors"):
        gpumat.cat(ours[0])
    with pytest.raises(ValueError, match="sizes must match except in dim 1"):
        gpumat.cat(ours, 1)
    with pytest.raises(ValueError, match="stack: expects each tensor to be equal size"):
        gpumat.stack(ours)
