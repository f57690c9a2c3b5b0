"""Creating tensors: device names, dtypes inferred from the data, the creation functions and
``manual_seed``, and reading values back (``numpy``, ``item``, ``tolist``, ``to``), on every
device."""

import numpy as np
import pytest

import gpumat
from gpumat.tensor import as_device


@pytest.mark.parametrize(
    "name, want",
    [
        ("cpu", gpumat.cpu()),
        ("cuda", gpumat.gpu(0)),
        ("cuda:0", gpumat.gpu(0)),
        ("cuda:1", gpumat.gpu(1)),
        ("gpu:1", gpumat.gpu(1)),
        ("emu", gpumat.emu(0)),
        ("emu:0", gpumat.emu(0)),
        (None, gpumat.cpu()),
    ],
)
def test_device_names_are_pytorchs(name, want):
    assert as_device(name) == want


@pytest.mark.parametrize("name", ["tpu", "cuda:", "cuda:x", "cpu:1", "emu:-1", ""])
def test_unknown_device_names_are_value_errors(name):
    with pytest.raises(ValueError, match="unknown device"):
        gpumat.tensor([1.0], device=name)
    with pytest.raises(TypeError, match="device must be"):
        gpumat.zeros(2, device=3)


def test_dtypes_follow_the_data(ctx):
    rng = np.random.default_rng()
    floats = rng.standard_normal((3, 4))  # float64 data becomes float32, as torch.tensor does
    t = gpumat.tensor(floats, device=ctx)
    assert (t.dtype, t.device, t.shape) == (gpumat.float32, ctx, (3, 4))
    np.testing.assert_array_equal(t.numpy(), floats.astype(np.float32))
    ints = rng.integers(-1000, 1000, size=(5,))
    t = gpumat.tensor(ints, device=ctx)
    assert t.dtype == gpumat.int64 and t.numpy().dtype == np.int64
    np.testing.assert_array_equal(t.numpy(), ints)
    assert gpumat.tensor([[1, 2], [3, 4]], device=ctx).tolist() == [[1, 2], [3, 4]]
    assert gpumat.tensor([True, False], device=ctx).dtype == gpumat.bool
    assert gpumat.tensor([1, 2], dtype=gpumat.float32, device=ctx).tolist() == [1.0, 2.0]
    x = float(rng.standard_normal())
    assert gpumat.tensor(x, device=ctx).item() == pytest.approx(x, rel=1e-7)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    f = gpumat.from_numpy(a)
    assert f.dtype == gpumat.float32 and f.device == gpumat.cpu()
    np.testing.assert_array_equal(f.numpy(), a)


def test_creation_functions(ctx):
    z = gpumat.zeros(2, 3, device=ctx)
    o = gpumat.ones((2, 3), device=ctx, requires_grad=True)
    assert z.shape == o.shape == (2, 3) and z.device == o.device == ctx
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(o.detach().numpy(), np.ones((2, 3), np.float32))
    assert o.requires_grad and not z.requires_grad and o.is_leaf
    assert gpumat.full((2,), 3.5, device=ctx).tolist() == [3.5, 3.5]
    r = gpumat.arange(5, device=ctx)
    assert r.dtype == gpumat.int64 and r.tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(gpumat.arange(0, 1, 0.25, device=ctx).numpy(), [0, 0.25, 0.5, 0.75])


def test_random_tensors_follow_manual_seed(ctx):
    gpumat.manual_seed(1234)
    a, n = gpumat.rand(200, 50, device=ctx), gpumat.randn(200, 50, device=ctx)
    gpumat.manual_seed(1234)
    b, m = gpumat.rand(200, 50, device=ctx), gpumat.randn(200, 50, device=ctx)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(n.numpy(), m.numpy())
    u = a.numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02  # 10,000 draws: 7 sigma
    g = n.numpy()
    assert abs(g.mean()) < 0.05 and abs(g.std() - 1) < 0.05
    c = gpumat.rand(200, 50, device=ctx)  # the generator moved on
    assert not np.array_equal(c.numpy(), u)


def test_reading_values_and_moving(ctx):
    rng = np.random.default_rng()
    a = rng.standard_normal((3, 2)).astype(np.float32)
    t = gpumat.tensor(a)
    moved = t.to(ctx)
    assert moved.device == ctx and (moved is t) == (ctx == gpumat.cpu())
    np.testing.assert_array_equal(moved.numpy(), a)
    assert moved.tolist() == a.tolist()
    np.testing.assert_array_equal((moved * 2).to("cpu").numpy(), a * 2)
    with pytest.raises(ValueError, match="item"):
        moved.item()
    leaf = gpumat.tensor(a, requires_grad=True)
    if ctx != gpumat.cpu():  # a copy between devices is not recorded: an error, not a lost grad
        with pytest.raises(RuntimeError, match="not recorded for backward"):
            leaf.to(ctx)
    assert leaf.detach().to(ctx).device == ctx
    with pytest.raises(RuntimeError, match="requires grad"):
        leaf.numpy()


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 2.5, 2**25])
@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_full_of_integers_refuses_what_no_integer_holds(ctx, value, dtype):
    # inf used to escape as OverflowError from int(); every such value is a ValueError naming full
    with pytest.raises(ValueError, match="full: .* is not an integer"):
        gpumat.full((2, 3), value, dtype=getattr(gpumat, dtype), device=ctx)


def test_like_and_new_tensors_follow_pytorch(ctx):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    values = rng.standard_normal((3, 4)).astype(np.float32)
    x, tx = gpumat.tensor(values, device=ctx), torch.tensor(values)
    labels = gpumat.tensor(rng.integers(0, 9, 5), device=ctx)
    fill = float(rng.standard_normal())
    pairs = [
        (gpumat.full_like(x, fill), torch.full_like(tx, fill)),
        (gpumat.full_like(labels, 7), torch.full_like(torch.zeros(5, dtype=torch.int64), 7)),
        (x.new_zeros(2, 3), tx.new_zeros(2, 3)),
        (x.new_ones((2,)), tx.new_ones((2,))),
        (x.new_full((1, 2), fill), tx.new_full((1, 2), fill)),
        (labels.new_zeros(3), torch.zeros(5, dtype=torch.int64).new_zeros(3)),
        (x.new_tensor([[1, 2]]), tx.new_tensor([[1, 2]])),
        (labels.new_tensor([3.0]), torch.zeros(1, dtype=torch.int64).new_tensor([3.0])),
    ]
    for got, want in pairs:
        assert got.shape == tuple(want.shape) and got.device == ctx
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    made = x.new_tensor(x, requires_grad=True)  # a copy: its own storage, a leaf
    assert made.is_leaf and made.requires_grad and made.data_ptr() != x.data_ptr()
    empty = x.new_empty(2, 5)
    assert empty.shape == (2, 5) and empty.dtype == gpumat.float32 and empty.device == ctx
    with pytest.raises(TypeError, match="new_empty: only float32"):
        labels.new_empty(2)
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        x.new_zeros(-1)
    with pytest.raises(ValueError, match="new_tensor: gpumat.int64 data must be whole numbers"):
        labels.new_tensor([3.7])  # as gpumat.tensor(data, dtype=int64): never a silent truncation
    gpumat.manual_seed(0)
    r = gpumat.rand_like(x)
    n = gpumat.randn_like(x, device=gpumat.cpu())
    assert r.shape == n.shape == (3, 4) and r.device == ctx and n.device == gpumat.cpu()
    assert 0.0 <= r.numpy().min() and r.numpy().max() < 1.0
    with pytest.raises(TypeError, match="random tensors are float32"):
        gpumat.rand_like(labels)


def test_device_type_and_accelerator_are_pytorchs():
    torch = pytest.importorskip("torch")
    for name in ("cpu", "cuda:1"):
        assert gpumat.tensor([1.0]).device.type == "cpu"
        assert gpumat.device(name).type == torch.device(name).type
    assert gpumat.emu(0).type == "emu"
    accelerator = gpumat.accelerator
    assert accelerator.is_available() == gpumat.cuda.is_available()
    assert accelerator.device_count() == gpumat.cuda.device_count()
    assert accelerator.current_device_index() == 0
    current = accelerator.current_accelerator(check_available=True)
    if gpumat.cuda.is_available():
        assert current == gpumat.gpu(0) and current.type == "cuda"
    else:
        assert current is None
        # the examples' idiom picks the host
        device = current if accelerator.is_available() else "cpu"
        assert gpumat.zeros(2, device=device).device == gpumat.cpu()


@pytest.mark.parametrize(
    "args, want",
    [
        (("cuda:1",), gpumat.gpu(1)),
        (("cuda", 1), gpumat.gpu(1)),
        (("CUDA",), gpumat.gpu(0)),
        (("cpu",), gpumat.cpu()),
        (("emu:0",), gpumat.emu(0)),
        ((gpumat.emu(2),), gpumat.emu(2)),
        (("gpu", 3), gpumat.gpu(3)),
    ],
)
def test_devices_are_built_as_pytorch_builds_them(args, want):
    torch = pytest.importorskip("torch")
    device = gpumat.Device(*args)
    assert device == want and hash(device) == hash(want)
    if isinstance(args[0], str) and args[0].startswith(("cuda", "cpu")):  # torch: lower case
        assert device.type == torch.device(*args).type and device.index == (
            torch.device(*args).index or 0
        )


def test_devices_are_shared_immutable_and_pickle():
    """cpu(), gpu(i) and emu(i) give one object per device (eager ops compare devices by
    identity first); equal devices made otherwise still compare and hash equal; a device pickles
    and copies, and a dlsys DLContext stays one."""
    import copy
    import pickle

    from gpumat.dlsys import ndarray as dlsys_ndarray

    assert gpumat.cpu() is gpumat.cpu(7) and gpumat.emu(1) is gpumat.emu(1)
    assert gpumat.gpu(2) is gpumat.gpu(2) and gpumat.gpu(2) is not gpumat.gpu(3)
    assert gpumat.Device("emu", 1) == gpumat.emu(1) and gpumat.Device("emu", 1) is not gpumat.emu(1)
    with pytest.raises(AttributeError, match="immutable"):
        gpumat.cpu().index = 1
    with pytest.raises(ValueError, match=">= 0"):
        gpumat.gpu(-1)
    for device in (gpumat.cpu(), gpumat.emu(1), gpumat.Device("cuda:3")):
        for back in (pickle.loads(pickle.dumps(device)), copy.deepcopy(device)):
            assert back == device and type(back) is type(device) and back._native == device._native
    context = dlsys_ndarray.cpu(0)
    back = pickle.loads(pickle.dumps(context))
    assert type(back) is type(context) and back.device_type == 1 and back == gpumat.cpu()


@pytest.mark.parametrize(
    "args, error",
    [
        (("cuda:0", 1), "index given twice"),
        (("tpu",), "unknown device"),
        (("cuda:x",), "unknown device"),
        (("cpu:1",), "unknown device"),
        (("cpu", -1), "must be >= 0"),
    ],
)
def test_bad_devices_are_value_errors(args, error):
    with pytest.raises(ValueError, match=error):
        gpumat.Device(*args)
    with pytest.raises(TypeError, match="string or a Device"):
        gpumat.Device(3)


def test_gpumat_device_is_the_device_class_as_torch_device_is():
    x = gpumat.zeros(2, device=gpumat.device("cpu"))
    assert isinstance(x.device, gpumat.device) and x.device == gpumat.device("cpu")
    assert gpumat.device("cuda:0") == gpumat.gpu(0) and gpumat.device is gpumat.Device
