"""Checkpoints: gpumat.save / gpumat.load (safetensors), atomic saves, refused corrupt files,
optimizer state and bitwise-identical resumed training (gpumat.train.fit, examples/mnist.py)."""

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpumat
from gpumat import checkpoint, models, optim, train

pytest.importorskip("safetensors", reason="safetensors is not installed (a dependency of gpumat)")

RNG = np.random.default_rng(1123)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUMAT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpumat.__file__)))


def rand(shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------------------ save / load


def test_save_load_roundtrip(ctx, tmp_path):
    tensors = {"w": rand((7, 5)), "b": rand((5,)), "scalar": rand(()), "empty": rand((0, 3))}
    dev = {k: gpumat.array(v, ctx) for k, v in tensors.items()}
    path = tmp_path / "m.safetensors"
    gpumat.save(path, dev, metadata={"note": "hello"})
    out = gpumat.load(path, ctx)
    assert set(out) == set(tensors)
    for k, v in tensors.items():
        assert out[k].ctx == ctx and out[k].shape == v.shape
        np.testing.assert_array_equal(out[k].asnumpy(), v)
    out = gpumat.load(path, ctx, expected={k: v.shape for k, v in tensors.items()})
    assert len(out) == 4


def test_interop_with_safetensors_readers_and_writers(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch = pytest.importorskip("torch")
    w = rand((4, 3))
    path = tmp_path / "ours.safetensors"
    gpumat.save(path, {"w": gpumat.array(w)})
    np.testing.assert_array_equal(safetensors_numpy.load_file(path)["w"], w)
    np.testing.assert_array_equal(safetensors_torch.load_file(path)["w"].numpy(), w)
    theirs = tmp_path / "theirs.safetensors"
    safetensors_torch.save_file({"t": torch.from_numpy(w)}, theirs)
    np.testing.assert_array_equal(gpumat.load(theirs)["t"].asnumpy(), w)


def test_load_checks_names_and_shapes(tmp_path):
    path = tmp_path / "m.safetensors"
    gpumat.save(path, {"w": rand((3, 4)), "b": rand((4,))})
    with pytest.raises(ValueError, match=r"m\.safetensors.*missing \['c'\]"):
        gpumat.load(path, expected={"w": (3, 4), "b": (4,), "c": (1,)})
    with pytest.raises(ValueError, match=r"unexpected \['b'\]"):
        gpumat.load(path, expected={"w": (3, 4)})
    with pytest.raises(ValueError, match=r"'w' has shape \(3, 4\).*expects \(4, 3\)"):
        gpumat.load(path, expected={"w": (4, 3), "b": (4,)})


def test_load_refuses_other_dtypes(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "f64.safetensors"
    safetensors_numpy.save_file({"x": np.ones(3)}, path)
    with pytest.raises(ValueError, match=r"f64\.safetensors.*'x' has dtype float64"):
        gpumat.load(path)


def _good_file(tmp_path):
    path = tmp_path / "good.safetensors"
    gpumat.save(path, {"w": rand((64, 64)), "b": rand((64,))})
    return path, path.read_bytes()


@pytest.mark.parametrize("keep", [0, 4, 8, 20, -1, -100, -4000], ids=lambda k: f"keep{k}")
def test_load_refuses_truncated_file(tmp_path, keep):
    path, data = _good_file(tmp_path)
    path.write_bytes(data[:keep])
    with pytest.raises(ValueError, match="good.safetensors"):
        gpumat.load(path)


@pytest.mark.parametrize("where", ["data", "header_length", "header_json"])
def test_load_refuses_corrupt_file(tmp_path, where):
    path, data = _good_file(tmp_path)
    b = bytearray(data)
    header_len = int.from_bytes(data[:8], "little")
    if where == "data":
        b[8 + header_len + 100] ^= 0x40  # one flipped bit in a float
    elif where == "header_length":
        b[0:8] = (header_len + 3).to_bytes(8, "little")
    else:
        b[8 + 2] = ord("#")
    path.write_bytes(bytes(b))
    with pytest.raises(ValueError, match="good.safetensors"):
        gpumat.load(path)


def test_save_bad_input(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(TypeError, match="float32"):
        gpumat.save(path, {"x": np.ones(3)})
    with pytest.raises(TypeError, match="names must be str"):
        gpumat.save(path, {1: rand((2,))})
    with pytest.raises(ValueError, match="reserved"):
        gpumat.save(path, {"x": rand((2,))}, metadata={"gpumat.sha256": "0"})
    with pytest.raises(FileNotFoundError):
        gpumat.load(tmp_path / "missing.safetensors")
    with pytest.raises(FileNotFoundError):
        gpumat.save(tmp_path / "no" / "dir.safetensors", {"x": rand((2,))})
    assert not os.path.exists(path)


def test_failed_save_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "c.safetensors"
    old = rand((300, 1000))  # > 1 MiB: written in several chunks
    gpumat.save(path, {"w": old})

    def boom(tmp, written):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(checkpoint, "_after_chunk_written", boom)
    with pytest.raises(OSError, match="disk full"):
        gpumat.save(path, {"w": rand((300, 1000))})
    monkeypatch.setattr(checkpoint, "_after_chunk_written", None)
    np.testing.assert_array_equal(gpumat.load(path)["w"].asnumpy(), old)
    assert os.listdir(tmp_path) == ["c.safetensors"]


# The child saves a first checkpoint, then starts a second, larger one and stops after its first
# chunk (1 MiB of the temporary file written and flushed) until the parent kills it with SIGKILL.
_KILL_CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import gpumat
    from gpumat import checkpoint

    path = sys.argv[1]
    gpumat.save(path, {"w": np.full((1000, 500), 1.25, np.float32)})

    def pause(tmp, written):
        print("PARTIAL", tmp, written, flush=True)
        time.sleep(600)

    checkpoint._after_chunk_written = pause
    gpumat.save(path, {"w": np.full((2000, 1000), -7.0, np.float32)})
    print("FINISHED", flush=True)
    """
)


def test_sigkill_mid_save_leaves_last_good_checkpoint(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_CHILD, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
        # the child imports the gpumat this test runs (installed, or built in place)
        env={
            **os.environ,
            "PYTHONPATH": GPUMAT_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        },
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("PARTIAL"), (line, proc.stderr.read() if proc.poll() else "")
        _, tmp_name, written = line.split()
        assert int(written) > 0 and os.path.getsize(tmp_name) == int(written)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    out = gpumat.load(path)  # the first, complete checkpoint
    np.testing.assert_array_equal(out["w"].asnumpy(), np.full((1000, 500), 1.25, np.float32))
    # what the killed save left is its temporary file, never the checkpoint's name
    leftovers = sorted(os.listdir(tmp_path))
    assert leftovers == sorted(["ckpt.safetensors", os.path.basename(tmp_name)])
    with pytest.raises(ValueError, match="not a valid safetensors"):
        gpumat.load(tmp_name)


# ------------------------------------------------------------------------------ optimizer state


@pytest.mark.parametrize("kind", ["SGD", "MomentumSGD", "Adam"])
def test_optimizer_state_dict_roundtrip(ctx, kind, tmp_path):
    shapes = [(6, 4), (4,)]
    x0 = [rand(s) for s in shapes]
    grads = [[rand(s) for s in shapes] for _ in range(4)]

    def make(values):
        params = [gpumat.array(v, ctx) for v in values]
        opt = {
            "SGD": lambda: optim.SGD(params, lr=0.1),
            "MomentumSGD": lambda: optim.MomentumSGD(params, lr=0.1, momentum=0.8),
            "Adam": lambda: optim.Adam(params, lr=0.01),
        }[kind]()
        return params, opt

    def steps(params, opt, gs):
        for g in gs:
            opt.step([gpumat.array(x, ctx) for x in g])

    ref_params, ref_opt = make(x0)
    steps(ref_params, ref_opt, grads)
    params, opt = make(x0)
    steps(params, opt, grads[:2])
    path = tmp_path / "opt.safetensors"
    checkpoint.save_training_state(
        path, params={"p0": params[0], "p1": params[1]}, optimizer=opt, progress={"epoch": 0}
    )
    state = checkpoint.load_training_state(path)
    params2, opt2 = make([state["params"]["p0"], state["params"]["p1"]])
    opt2.load_state_dict(state["optimizer"])
    steps(params2, opt2, grads[2:])
    for a, b in zip(ref_params, params2, strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    assert opt2.state_dict()["lr"] == ref_opt.state_dict()["lr"]
    if kind == "Adam":
        assert opt2.t == ref_opt.t == 4


def test_optimizer_load_state_dict_mismatch():
    p = [gpumat.array(rand((3, 2)))]
    adam = optim.Adam(p)
    with pytest.raises(ValueError, match="MomentumSGD"):
        adam.load_state_dict(optim.MomentumSGD(p, lr=0.1).state_dict())
    other = optim.Adam([gpumat.array(rand((2, 3)))]).state_dict()
    with pytest.raises(ValueError, match=r"'m.0' has shape \(2, 3\)"):
        adam.load_state_dict(other)
    bad = adam.state_dict()
    bad["betas"] = [0.9, 1.5]
    adam.lr = 0.5
    with pytest.raises(ValueError, match="beta2"):
        adam.load_state_dict(bad)
    assert adam.lr == 0.5 and adam.betas == (0.9, 0.999)  # nothing changed


# ------------------------------------------------------------------------------ resumed training


def _small_data(n=600, seed=3):
    r = np.random.default_rng(seed)
    x = r.random((n, 784), dtype=np.float32)
    y = r.integers(0, 10, n)
    return (x, y), (x[:100], y[:100])


def _adam_mlp():
    """A small MLP with Adam, shuffling and a step schedule: every piece of state a resume needs."""
    return dataclasses.replace(
        models.mlp(hidden=(32, 16)),
        optimizer=lambda ps: optim.Adam(ps, lr=1e-2),
        shuffle=True,
        batch_size=50,
        lr_schedule=lambda epoch: 0.5 ** (epoch // 2),
    )


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_fit_resume_is_bitwise_identical(backend, tmp_path):
    data = _small_data()
    kw = dict(ctx=backend, seed=7, verbose=False, progress=False)
    straight = train.fit(_adam_mlp(), data, epochs=4, **kw)
    ck = tmp_path / "run.safetensors"
    first = train.fit(_adam_mlp(), data, epochs=2, checkpoint=ck, **kw)
    assert first.epochs == 2
    resumed = train.fit(_adam_mlp(), data, epochs=2, resume=ck, checkpoint=ck, **kw)
    assert resumed.epochs == 4
    assert resumed.loss == straight.loss
    assert resumed.valid_accuracy == straight.valid_accuracy
    for k, v in straight.params.items():
        a = v if isinstance(v, np.ndarray) else v.asnumpy()
        b = resumed.params[k]
        b = b if isinstance(b, np.ndarray) else b.asnumpy()
        assert np.array_equal(a, b), k
    state = checkpoint.load_training_state(ck)
    assert state["progress"]["epoch"] == 4 and state["progress"]["step"] == 4 * 12
    assert state["optimizer"]["type"] == "Adam" and state["optimizer"]["t"] == 48


def test_fit_resume_refuses_mismatches(tmp_path):
    data = _small_data()
    kw = dict(ctx="cpu", seed=7, verbose=False, progress=False)
    ck = tmp_path / "run.safetensors"
    train.fit(_adam_mlp(), data, epochs=1, checkpoint=ck, **kw)
    with pytest.raises(ValueError, match="model's parameters"):
        train.fit(
            models.mlp(),
            data,
            epochs=1,
            resume=ck,
            optimizer=lambda ps: optim.Adam(ps),
            batch_size=50,
            shuffle=True,
            **kw,
        )
    with pytest.raises(ValueError, match="batch_size=50"):
        train.fit(_adam_mlp(), data, epochs=1, resume=ck, batch_size=60, **kw)
    with pytest.raises(ValueError, match="holds a Adam state, this run uses SGD"):
        train.fit(_adam_mlp(), data, epochs=1, resume=ck, lr=0.1, **kw)
    ck.write_bytes(ck.read_bytes()[:-10])
    with pytest.raises(ValueError, match="run.safetensors"):
        train.fit(_adam_mlp(), data, epochs=1, resume=ck, **kw)


@pytest.fixture(scope="module")
def mnist():
    from gpumat import datasets

    try:
        return datasets.load_mnist(progress=False)
    except Exception as exc:  # no cached copy and no network
        pytest.skip(f"MNIST unavailable: {exc}")


def test_mnist_example_save_resume_matches_straight_run(mnist, tmp_path, capsys):
    """examples/mnist.py: 2 epochs, --save, then 2 resumed = 4 straight (5,000 images, cpu)."""
    sys.path.insert(0, os.path.join(REPO, "examples"))
    try:
        import mnist as example
    finally:
        sys.path.pop(0)
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    common = ["-m", "mlp", "-c", "cpu", "--train-size", "5000", "--no-progress", "-l"]
    a, b = tmp_path / "straight.safetensors", tmp_path / "resumed.safetensors"
    assert example.main([*common, "-e", "4", "--save", str(a)]) == 0
    assert example.main([*common, "-e", "2", "--save", str(b)]) == 0
    assert example.main([*common, "-e", "2", "--resume", str(b), "--save", str(b)]) == 0
    out = capsys.readouterr().out
    assert "epoch 3/4" in out and "epoch 4/4" in out
    sa, sb = safetensors_numpy.load_file(a), safetensors_numpy.load_file(b)
    assert sorted(sa) == sorted(sb) and any(k.startswith("params/") for k in sa)
    for k in sa:
        assert np.array_equal(sa[k], sb[k]), k
