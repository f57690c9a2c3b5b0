"""gpumat.data and gpumat.datasets.MNIST: datasets, mini-batches, seeded shuffling, collation."""

import numpy as np
import pytest

import gpumat
from gpumat import datasets
from gpumat.data import DataLoader, Dataset, TensorDataset


def test_tensor_dataset_and_loader_cover_every_sample():
    x = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    y = np.arange(10)
    ds = TensorDataset(gpumat.tensor(x), gpumat.tensor(y))
    assert len(ds) == 10
    xi, yi = ds[4]
    assert xi.tolist() == [12.0, 13.0, 14.0] and yi.item() == 4 and yi.dtype is gpumat.int64
    loader = DataLoader(ds, batch_size=4)
    assert len(loader) == 3
    got = list(loader)
    assert [b[0].shape for b in got] == [(4, 3), (4, 3), (2, 3)]
    np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in got]), y)
    assert len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
    assert [b[0].shape[0] for b in DataLoader(ds, batch_size=4, drop_last=True)] == [4, 4]


def test_shuffling_is_seeded_by_manual_seed():
    ds = TensorDataset(np.arange(20, dtype=np.float32), np.arange(20))
    loader = DataLoader(ds, batch_size=5, shuffle=True)
    gpumat.manual_seed(11)
    first = np.concatenate([b[1].numpy() for b in loader])
    second = np.concatenate([b[1].numpy() for b in loader])
    assert sorted(first) == list(range(20)) and not np.array_equal(first, second)
    gpumat.manual_seed(11)
    np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in loader]), first)


def test_targets_know_their_range():
    ds = TensorDataset(np.zeros((6, 2), np.float32), np.array([0, 3, 1, 2, 3, 0]))
    _, labels = next(iter(DataLoader(ds, batch_size=2)))
    assert labels._range == (0, 3)  # the column's range bounds every batch


def test_a_custom_dataset_is_collated():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return gpumat.tensor([float(i), float(i * i)]), i, 0.5 * i

    batch = next(iter(DataLoader(Squares(), batch_size=3)))
    assert batch[0].tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 4.0]]
    assert batch[1].dtype is gpumat.int64 and batch[1].tolist() == [0, 1, 2]
    assert batch[2].dtype is gpumat.float32 and batch[2].tolist() == [0.0, 0.5, 1.0]


def test_errors():
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="leading sample axis"):
        TensorDataset(np.float32(1.0))
    ds = TensorDataset(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(TypeError, match="batch_size"):
        DataLoader(ds, batch_size=2.0)
    with pytest.raises(TypeError, match="shuffle"):
        DataLoader(ds, shuffle=1)
    with pytest.raises(TypeError, match="__getitem__"):
        DataLoader(42)
    with pytest.raises(IndexError):
        ds[3]
    with pytest.raises(ValueError, match="split"):
        datasets.MNIST("training")


@pytest.fixture(scope="module")
def mnist_test():
    try:
        return datasets.MNIST("test", progress=False)
    except datasets.DatasetError as exc:
        pytest.skip(f"MNIST unavailable: {exc}")


def test_mnist_samples_and_batches(mnist_test):
    assert len(mnist_test) == 10_000
    image, label = mnist_test[0]
    assert image.shape == (1, 28, 28) and image.dtype is gpumat.float32
    assert label.dtype is gpumat.int64 and 0 <= label.item() <= 9
    (_, _, (x_test, y_test)) = datasets.load_mnist(progress=False)
    np.testing.assert_array_equal(image.numpy().reshape(-1), x_test[0])
    images, labels = next(iter(DataLoader(mnist_test, batch_size=64)))
    assert images.shape == (64, 1, 28, 28) and labels.shape == (64,)
    np.testing.assert_array_equal(labels.numpy(), y_test[:64])
    assert labels._range == (0, 9)


def test_default_collate_as_pytorchs():
    # The dtype came from the first sample ([1, 2.7, 3.9] -> [1, 2, 3]; [True, 2, 3] -> all True),
    # dict samples were refused, and cpu and emu tensors were stacked onto one device silently.
    import collections

    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate as torch_collate

    from gpumat.data import default_collate

    for samples in ([1, 2.7, 3.9], [True, 2, 3], [True, False], [2, 3], [0.5, True]):
        ours, theirs = default_collate(samples), torch_collate(samples)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        assert ours.dtype.is_floating_point == theirs.dtype.is_floating_point
        assert (ours.dtype is gpumat.bool) == (theirs.dtype == torch.bool)
    batch = default_collate(
        [{"x": [1.5, 2.0], "y": 1, "name": "a"}, {"x": [2.5, 3.0], "y": 2.5, "name": "b"}]
    )
    assert set(batch) == {"x", "y", "name"} and batch["name"] == ["a", "b"]
    np.testing.assert_array_equal(batch["x"][0].numpy(), [1.5, 2.5])
    np.testing.assert_array_equal(batch["y"].numpy(), np.float32([1.0, 2.5]))
    pair = collections.namedtuple("Pair", "image label")
    got = default_collate(
        [pair(np.ones((2, 2), np.float32), 3), pair(np.zeros((2, 2), np.float32), 4)]
    )
    assert isinstance(got, pair) and got.image.shape == (2, 2, 2) and got.label.tolist() == [3, 4]
    with pytest.raises(ValueError, match="several devices"):
        default_collate([gpumat.tensor([1.0]), gpumat.tensor([2.0], device="emu")])
    with pytest.raises(ValueError, match="several devices or of several dtypes"):
        default_collate([gpumat.tensor([1.0]), gpumat.tensor([2])])
    with pytest.raises(ValueError, match="different keys"):
        default_collate([{"x": 1}, {"y": 1}])
    with pytest.raises(TypeError, match="cannot batch"):
        default_collate([object(), object()])
