"""PyTorch's creation functions eye, linspace, randint, randperm and multinomial (values against
PyTorch or numpy, reproducible under gpumat.manual_seed and equal on every device, statistics of
the draws, bad arguments), and the dtype spellings (gpumat.float, gpumat.long, torch's dtypes,
Tensor.type)."""

import numpy as np
import pytest
from helpers import new_rng

import gpumat
import gpumat.reference as reference


def _torch_linspace_formula(start, end, steps):
    """torch.linspace's float32 formula (its CUDA kernel): step = (end - start) / (steps - 1);
    start + i * step below steps // 2, end - (steps - 1 - i) * step from there."""
    lo, hi = np.float32(start), np.float32(end)
    if steps == 1:
        return np.array([lo], np.float32)
    step = (hi - lo) / np.float32(max(steps - 1, 1))
    return np.array(
        [
            lo + step * np.float32(i) if i < steps // 2 else hi - step * np.float32(steps - 1 - i)
            for i in range(steps)
        ],
        np.float32,
    )


def test_eye_and_linspace_match_torch(ctx):
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(gpumat.eye(3, device=ctx).numpy(), torch.eye(3).numpy())
    e = gpumat.eye(2, 4, dtype=gpumat.long, device=ctx)
    assert e.dtype is gpumat.int64 and e.tolist() == torch.eye(2, 4, dtype=torch.long).tolist()
    assert gpumat.eye(0, device=ctx).shape == (0, 0)
    rng, seed = new_rng()
    for _ in range(20):
        start, end = (float(v) for v in rng.uniform(-100, 100, size=2))
        steps = int(rng.integers(0, 40))
        got = gpumat.linspace(start, end, steps, device=ctx).numpy()
        np.testing.assert_array_equal(got, _torch_linspace_formula(start, end, steps))
        # PyTorch's CPU kernel runs that formula per SIMD vector (its values depend on the vector
        # width); its CUDA kernel and its docs are the formula: CPU agrees to float32 rounding
        want = torch.linspace(start, end, steps).numpy()
        scale = max(abs(start), abs(end))
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * 2**-24 * scale, err_msg=f"{seed}")
        if steps:
            assert got[0] == np.float32(start) and got[-1] == np.float32(
                end if steps > 1 else start
            )
    for args in [(0, 10, 4), (-7, 20, 9), (3, 3, 5), (10, 0, 7)]:
        got = gpumat.linspace(*args, dtype=gpumat.int64, device=ctx)
        assert got.tolist() == torch.linspace(*args, dtype=torch.int64).tolist(), args
    assert gpumat.linspace(2.5, 9, 1).tolist() == [2.5]


def test_randint_range_seed_and_devices(ctx):
    gpumat.manual_seed(7)
    a = gpumat.randint(-5, 6, (300, 40), device=ctx)
    gpumat.manual_seed(7)
    b = gpumat.randint(-5, 6, (300, 40), device=ctx)
    gpumat.manual_seed(7)
    on_cpu = gpumat.randint(-5, 6, (300, 40))
    assert a.dtype is gpumat.int64 and a.shape == (300, 40)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(a.numpy(), on_cpu.numpy())  # every device: the same draws
    v = a.numpy()
    assert v.min() == -5 and v.max() == 5 and np.all(v == np.trunc(v))
    counts = np.bincount((v + 5).astype(np.int64).ravel(), minlength=11)
    assert np.all(np.abs(counts - 12000 / 11) < 6 * np.sqrt(12000 / 11))  # 6 sigma
    h = gpumat.randint(10, (5,), device=ctx)  # randint(high, size)
    assert 0 <= h.numpy().min() and h.numpy().max() < 10
    kw = gpumat.randint(3, high=5, size=(4,), dtype=gpumat.float32, device=ctx)
    assert kw.dtype is gpumat.float32 and set(kw.tolist()) <= {3.0, 4.0}
    out = np.full((6,), np.nan, np.float32)
    reference.randint(out, 2, 9, 123)
    dev = gpumat.empty((6,), ctx)
    gpumat.ops.randint(dev, 2, 9, 123)
    np.testing.assert_array_equal(dev.asnumpy(), out)
    assert (gpumat.randint(0, 2**24 + 1, (3,), device=ctx).numpy() <= 2**24).all()


def test_randint_bad_arguments():
    with pytest.raises(ValueError, match="randint: low must be below high"):
        gpumat.randint(5, 3, (2,))
    with pytest.raises(ValueError, match=r"randint: .*2\*\*24"):
        gpumat.randint(0, 2**25, (2,))
    with pytest.raises(TypeError, match="randint: low must be an int"):
        gpumat.randint(0.5, 3, (2,))
    with pytest.raises(TypeError, match="randint: missing size"):
        gpumat.randint()
    with pytest.raises(TypeError, match="randint: dtype"):
        gpumat.randint(3, (2,), dtype=gpumat.bool)
    with pytest.raises(ValueError, match="randint"):
        gpumat.ops.randint(gpumat.empty((2,)), 0, 2**25)
    with pytest.raises(TypeError, match="generator"):
        gpumat.randint(3, (2,), generator=5)


def test_randperm_is_a_reproducible_permutation(ctx):
    gpumat.manual_seed(11)
    p = gpumat.randperm(1000, device=ctx)
    gpumat.manual_seed(11)
    q = gpumat.randperm(1000)
    assert p.dtype is gpumat.int64
    np.testing.assert_array_equal(np.sort(p.numpy()), np.arange(1000))
    np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert gpumat.randperm(0, device=ctx).shape == (0,)
    # each position is uniform: position 0 over 3 elements, 3,000 draws
    firsts = np.array([gpumat.randperm(3).numpy()[0] for _ in range(3000)])
    counts = np.bincount(firsts.astype(np.int64), minlength=3)
    assert np.all(np.abs(counts - 1000) < 6 * np.sqrt(1000 * 2 / 3)), counts
    gen = np.random.default_rng(3)
    a = gpumat.randperm(20, generator=gen).numpy()
    b = gpumat.randperm(20, generator=np.random.default_rng(3)).numpy()
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="randperm: n must be >= 0"):
        gpumat.randperm(-1)
    with pytest.raises(TypeError, match="randperm: n must be an int"):
        gpumat.randperm(2.0)


@pytest.mark.parametrize("replacement", [False, True])
def test_multinomial_frequencies_and_devices(ctx, replacement):
    w = np.array([[1.0, 0.0, 3.0, 6.0], [5.0, 5.0, 0.0, 0.0]], np.float32)
    t = gpumat.tensor(w, device=ctx)
    gpumat.manual_seed(5)
    a = gpumat.multinomial(t, 2, replacement)
    gpumat.manual_seed(5)
    b = gpumat.multinomial(gpumat.tensor(w), 2, replacement)
    assert a.dtype is gpumat.int64 and a.shape == (2, 2)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    draws = np.stack([gpumat.multinomial(t, 2, replacement).numpy() for _ in range(2000)]).astype(
        np.int64
    )
    first = np.bincount(draws[:, 0, 0], minlength=4) / 2000
    np.testing.assert_allclose(first, w[0] / w[0].sum(), atol=0.04)
    assert not np.any(draws[:, 1] >= 2)  # zero weights never drawn while others remain
    if not replacement:
        assert np.all(draws[:, :, 0] != draws[:, :, 1])
        # the second draw of row 0 given the first is 3: P(2) = 3 / 4
        second = draws[draws[:, 0, 0] == 3][:, 0, 1]
        assert abs(np.mean(second == 2) - 0.75) < 0.06
    one = gpumat.multinomial(gpumat.tensor([0.0, 2.0, 0.0], device=ctx), 1)
    assert one.shape == (1,) and one.tolist() == [1]


def test_multinomial_bad_arguments():
    w = gpumat.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="cannot draw 3 samples from 2 categories without"):
        gpumat.multinomial(w, 3)
    with pytest.raises(ValueError, match="finite and >= 0"):
        gpumat.multinomial(gpumat.tensor([1.0, -1.0]), 1)
    with pytest.raises(ValueError, match="positive sum"):
        gpumat.multinomial(gpumat.tensor([[1.0, 1.0], [0.0, 0.0]]), 1)
    with pytest.raises(TypeError, match="float32"):
        gpumat.multinomial(gpumat.tensor([1, 2]), 1)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        gpumat.multinomial(gpumat.ones(2, 2, 2), 1)
    with pytest.raises(TypeError, match="replacement"):
        gpumat.multinomial(w, 1, replacement=1)


def test_random_creation_refused_inside_compile():
    def step(x):
        return x + gpumat.randint(3, (2,)).float()

    with pytest.raises(RuntimeError, match="randint: a random tensor made inside a step"):
        gpumat.compile(step)(gpumat.zeros(2))


def test_dtype_spellings_and_type(ctx):
    torch = pytest.importorskip("torch")
    assert gpumat.float is gpumat.float32 and gpumat.long is gpumat.int64
    assert isinstance(gpumat.bool, gpumat.dtype)
    t = gpumat.tensor([1.5, -2.0], device=ctx)
    assert t.type() == "gpumat.FloatTensor" and t.long().type() == "gpumat.LongTensor"
    assert t.bool().type() == "gpumat.BoolTensor"
    assert t.type(gpumat.long).tolist() == [1, -2]
    assert t.type("torch.LongTensor").dtype is gpumat.int64
    assert t.type("gpumat.BoolTensor").dtype is gpumat.bool
    assert t.type("int64").dtype is gpumat.int64
    assert t.to(torch.int64).dtype is gpumat.int64 and t.to(torch.float32) is t
    assert gpumat.zeros(2, dtype=torch.bool).dtype is gpumat.bool
    for bad in ("torch.DoubleTensor", "torch.IntTensor", "FloatTensors"):
        with pytest.raises(TypeError, match="gpumat.FloatTensor, gpumat.LongTensor"):
            t.type(bad)
    for bad in (np.float64, torch.float64, torch.int32, torch.float16, "int32", "double"):
        with pytest.raises(TypeError, match=r"float32 \(gpumat.float32, gpumat.float\)"):
            gpumat.zeros(2, dtype=bad)
    assert not hasattr(gpumat, "int32") and not hasattr(gpumat, "int")
