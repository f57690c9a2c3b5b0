"""Checkpoints: gpumat.save / gpumat.load (safetensors), atomic saves, refused corrupt files,
optimizer state and bitwise-identical resumed training (gpumat.train.fit, examples/mnist.py)."""

import dataclasses
import json
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
        assert out[k].device == ctx and out[k].shape == v.shape
        np.testing.assert_array_equal(out[k].numpy(), v)
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
    np.testing.assert_array_equal(gpumat.load(theirs)["t"].numpy(), w)


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
    assert not os.path.exists(path)


def test_a_tensor_named_like_the_header_key_is_refused_and_the_old_file_kept(tmp_path):
    # safetensors keeps the file's metadata under "__metadata__": a tensor of that name made a
    # file neither gpumat nor safetensors could read, written over a good checkpoint.
    path = tmp_path / "good.safetensors"
    good = {"w": rand((3, 2))}
    gpumat.save(path, good)
    before = path.read_bytes()
    for save in (gpumat.save, checkpoint.save):
        with pytest.raises(ValueError, match="__metadata__"):
            save(path, {"w": rand((3, 2)), "__metadata__": rand((2,))})
    assert path.read_bytes() == before
    np.testing.assert_array_equal(gpumat.load(path)["w"].numpy(), good["w"])


def test_save_into_a_missing_folder_names_the_target(tmp_path):
    target = tmp_path / "no" / "dir.safetensors"
    with pytest.raises(FileNotFoundError, match="its folder does not exist") as info:
        gpumat.save(target, {"x": rand((2,))})
    assert str(target) in str(info.value) and ".tmp" not in str(info.value)
    assert info.value.filename == str(target)


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
    np.testing.assert_array_equal(gpumat.load(path)["w"].numpy(), old)
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
    np.testing.assert_array_equal(out["w"].numpy(), np.full((1000, 500), 1.25, np.float32))
    # what the killed save left is its temporary file, never the checkpoint's name
    leftovers = sorted(os.listdir(tmp_path))
    assert leftovers == sorted(["ckpt.safetensors", os.path.basename(tmp_name)])
    with pytest.raises(ValueError, match="not a valid safetensors"):
        gpumat.load(tmp_name)
    # recognisable as a save's temporary file: the target's name, this machine, the dead PID
    assert f".gpumat-save.{checkpoint._host_tag()}.{proc.pid}." in os.path.basename(tmp_name)
    # the next save into the folder removes it
    gpumat.save(tmp_path / "other.safetensors", {"w": rand((2, 2))})
    assert sorted(os.listdir(tmp_path)) == ["ckpt.safetensors", "other.safetensors"]


def test_save_removes_only_temporaries_of_dead_processes(tmp_path):
    host = checkpoint._host_tag()
    # A process that has exited. Were its PID reused before the save below, the file would be
    # kept and this test would fail; it can never pass wrongly.
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(done.stdout)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {
            "dead": f".a.safetensors.gpumat-save.{host}.{dead_pid}.x1y2.tmp",
            "alive": f".a.safetensors.gpumat-save.{host}.{sleeper.pid}.x1y2.tmp",
            "mine": f".a.safetensors.gpumat-save.{host}.{os.getpid()}.x1y2.tmp",
            "other_host": f".a.safetensors.gpumat-save.elsewhere-{host}.{dead_pid}.x1y2.tmp",
            "user_file": f"a.safetensors.gpumat-save.{host}.{dead_pid}.tmp",
            "old_style": ".a.safetensors.k2j3h4.tmp",
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"partial")
        gpumat.save(tmp_path / "b.safetensors", {"w": rand((2,))})
        left = set(os.listdir(tmp_path))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert names["dead"] not in left
    assert left == {"b.safetensors"} | {names[k] for k in names if k != "dead"}


# ------------------------------------------------------------------------------ loading safely


def _run_child(code: str, folder, *args, timeout=120) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter in ``folder`` (a crash there cannot end this run)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(folder),  # not the checkout: its gpumat/ has no built extension
        env={
            **os.environ,
            "PYTHONPATH": GPUMAT_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "OPENBLAS_NUM_THREADS": "1",
        },
    )


def _signal_name(returncode: int) -> str:
    return signal.Signals(-returncode).name if returncode < 0 else f"exit {returncode}"


# The child truncates the file to 4 KiB the first time numpy builds an array from a buffer while
# gpumat.load runs: between two tensors for a reader that maps the file (the second tensor's pages
# are gone: SIGBUS), after the reading for one that reads it into memory first.
_TRUNCATE_CHILD = """
    import os, sys
    import numpy as np
    import gpumat

    path = sys.argv[1]
    gpumat.save(path, {"a": np.full((1000, 1000), 1.5, np.float32),
                       "b": np.full((1000, 1000), -2.0, np.float32)})
    real, calls = np.frombuffer, []

    def frombuffer(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            os.truncate(path, 4096)
        return real(*args, **kwargs)

    np.frombuffer = frombuffer
    try:
        out = gpumat.load(path)
    except ValueError as exc:
        print("VALUEERROR", exc)
    else:
        ok = float(out["a"].numpy().sum()) == 1.5e6 and float(out["b"].numpy().sum()) == -2e6
        print("LOADED", ok, len(calls))
"""


def test_a_file_truncated_while_loading_never_kills_the_loader(tmp_path):
    proc = _run_child(_TRUNCATE_CHILD, tmp_path, tmp_path / "t.safetensors")
    assert proc.returncode == 0, f"{_signal_name(proc.returncode)}\n{proc.stderr[-3000:]}"
    assert "LOADED True" in proc.stdout or "VALUEERROR" in proc.stdout, proc.stdout
    assert os.path.getsize(tmp_path / "t.safetensors") == 4096  # the truncation did happen


def test_a_file_shrinking_mid_read_is_a_value_error(tmp_path, monkeypatch):
    path = tmp_path / "s.safetensors"
    gpumat.save(path, {"w": rand((1000, 600))})  # 2.4 MB: read in several chunks

    def truncate(p, done):
        os.truncate(p, done)

    monkeypatch.setattr(checkpoint, "_after_chunk_read", truncate)
    with pytest.raises(ValueError, match=r"s\.safetensors' changed while it was being read"):
        gpumat.load(path)


# The child limits its address space to what it uses now plus argv[2] MiB, then loads a 64 MiB
# checkpoint: the read (limit + 16 MiB) or the copy onto the device (limit + 96 MiB) cannot be
# allocated. PanicException is a BaseException, hence the last clause.
_MEMORY_CHILD = """
    import resource, sys
    import numpy as np
    import gpumat

    path, extra_mib = sys.argv[1], int(sys.argv[2])
    gpumat.save(path, {"w": np.ones((16, 1024, 1024), np.float32)})
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
    limit = vm + extra_mib * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    try:
        gpumat.load(path)
        print("LOADED")
    except MemoryError as exc:
        print("MEMORYERROR", exc)
    except Exception as exc:
        print("EXCEPTION", type(exc).__name__, exc)
    except BaseException as exc:
        print("BASEEXCEPTION", type(exc).__name__, exc)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and RLIMIT_AS")
@pytest.mark.parametrize("extra_mib", [16, 96], ids=["read", "copy"])
def test_a_checkpoint_too_large_for_memory_is_a_memory_error(tmp_path, extra_mib):
    proc = _run_child(_MEMORY_CHILD, tmp_path, tmp_path / "big.safetensors", extra_mib)
    assert proc.returncode == 0, f"{_signal_name(proc.returncode)}\n{proc.stderr[-3000:]}"
    assert proc.stdout.startswith("MEMORYERROR"), proc.stdout + proc.stderr[-3000:]


def _header_file(path, header: dict | bytes, data: bytes = b"") -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


@pytest.mark.parametrize(
    "header, data, why",
    [
        (b"{", b"", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, b"", "not JSON"),
        (
            b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {}}',
            b"1234",
            "duplicate key",
        ),
        ([1, 2], b"", "not a JSON object"),
        ({"__metadata__": {"k": 1}}, b"", "map of strings"),
        ({"a": {"dtype": "F32", "shape": [2]}}, b"", "lacks"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"1234", "shape"),
        ({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"1234", "shape"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"1234", "data_offsets"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"12345678", "starts at"),
        (
            {
                "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]},
            },
            b"123456",
            "starts at",
        ),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"12345678", "cover 4"),
        ({"a": {"dtype": "F32", "shape": [2, 2**62], "data_offsets": [0, 4]}}, b"1234", "bytes"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"1234", "has 4 bytes"),
    ],
    ids=[
        "truncated_json",
        "deep_json",
        "duplicate",
        "array",
        "metadata",
        "no_offsets",
        "negative_dim",
        "bool_dim",
        "reversed",
        "hole",
        "overlap",
        "trailing",
        "huge",
        "short",
    ],
)
def test_load_refuses_malformed_headers(tmp_path, header, data, why):
    path = tmp_path / "bad.safetensors"
    _header_file(path, header, data)
    with pytest.raises(ValueError, match="bad.safetensors") as info:
        gpumat.load(path)
    assert why in str(info.value)


def test_load_refuses_a_header_length_beyond_the_file(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes((2**63).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="header length"):
        gpumat.load(path)
    path.write_bytes(b"\x01\x00")
    with pytest.raises(ValueError, match="shorter than the 8-byte header length"):
        gpumat.load(path)


def test_load_reads_empty_and_scalar_tensors(tmp_path):
    path = tmp_path / "edge.safetensors"
    x = rand(())
    gpumat.save(path, {"empty": np.zeros((0, 3), np.float32), "scalar": x, "w": rand((2, 3))})
    out = gpumat.load(path)
    assert list(out) == ["empty", "scalar", "w"]
    assert out["empty"].shape == (0, 3) and out["scalar"].shape == ()
    assert out["scalar"].numpy() == x


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
    kw = dict(device=backend, seed=7, verbose=False, progress=False)
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
    kw = dict(device="cpu", seed=7, verbose=False, progress=False)
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


def _edit_training_metadata(path, edit) -> None:
    """Rewrites the checkpoint's training metadata with ``edit(training)``, tensors untouched (so
    the recorded SHA-256 still matches: it covers the tensors, not the metadata)."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    with safe_open(str(path), framework="numpy") as f:
        meta = dict(f.metadata())
    training = json.loads(meta["gpumat.training"])
    edit(training)
    meta["gpumat.training"] = json.dumps(training)
    save_file(load_file(str(path)), str(path), metadata=meta)


def _set(*keys, value):
    def edit(training):
        node = training
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value

    return edit


def _mt19937_state() -> dict:
    """A valid state, as JSON, of a bit generator other than the PCG64 that fit shuffles with."""
    state = np.random.MT19937(1).state
    state["state"]["key"] = state["state"]["key"].tolist()
    return state


_METADATA_EDITS = {
    "progress_a_list": _set("progress", value=[1, 2]),
    "epoch_infinite": _set("progress", "epoch", value=float("inf")),
    "epoch_float": _set("progress", "epoch", value=1.5),
    "epoch_negative": _set("progress", "epoch", value=-1),
    "epoch_huge": _set("progress", "epoch", value=2**70),
    "epoch_missing": lambda t: t["progress"].pop("epoch"),
    "history_none": _set("progress", "history", "loss", value=[None]),
    "history_text": _set("progress", "history", "valid_accuracy", value=["high"]),
    "history_too_long": _set("progress", "history", "loss", value=[0.5] * 5),
    "rng_garbage": _set("progress", "rng_state", value={"bit_generator": "PCG64", "state": 3}),
    "rng_other_kind": _set("progress", "rng_state", value=_mt19937_state()),
    "rng_not_numpy": _set("progress", "rng_state", value="xyz"),
    "betas_a_number": _set("optimizer", "betas", value=0.5),
    "betas_out_of_range": _set("optimizer", "betas", value=[0.9, 1.0]),
    "lr_text": _set("optimizer", "lr", value="0.1"),
    "lr_negative": _set("optimizer", "lr", value=-0.1),
    "eps_nan": _set("optimizer", "eps", value=float("nan")),
    "t_huge": _set("optimizer", "t", value=2**70),
    "t_float": _set("optimizer", "t", value=3.0),
    "optimizer_extra_key": _set("optimizer", "weight_decay", value=0.1),
    "optimizer_type_number": _set("optimizer", "type", value=7),
    "optimizer_not_object": _set("optimizer", value="Adam"),
}


@pytest.mark.parametrize("edit", list(_METADATA_EDITS), ids=list(_METADATA_EDITS))
@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_resume_from_edited_metadata_is_a_value_error_that_changes_nothing(backend, edit, tmp_path):
    data = _small_data(n=200)
    kw = dict(device=backend, seed=7, verbose=False, progress=False)
    ck = tmp_path / "run.safetensors"
    train.fit(_adam_mlp(), data, epochs=1, checkpoint=ck, **kw)
    _edit_training_metadata(ck, _METADATA_EDITS[edit])

    model = _adam_mlp()
    params = model.init_params(None if backend == "numpy" else gpumat.cpu())
    before = {
        k: np.array(v if isinstance(v, np.ndarray) else v.asnumpy()) for k, v in params.items()
    }
    made = []

    def make_optimizer(values):
        made.append(optim.Adam(values, lr=1e-2))
        return made[-1]

    with pytest.raises(ValueError, match="run.safetensors") as info:
        train.fit(model, data, epochs=1, resume=ck, params=params, optimizer=make_optimizer, **kw)
    assert type(info.value) is ValueError
    for k, v in params.items():  # the caller's parameters are as they were
        np.testing.assert_array_equal(v if isinstance(v, np.ndarray) else v.asnumpy(), before[k])
    state = made[0].state_dict()  # and so is the optimizer
    assert (state["lr"], state["betas"], state["eps"], state["t"]) == (1e-2, [0.9, 0.999], 1e-8, 0)
    for t in state["tensors"].values():
        assert not np.any(t if isinstance(t, np.ndarray) else t.asnumpy())


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
