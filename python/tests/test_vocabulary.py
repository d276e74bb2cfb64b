"""One vocabulary, policy owned by the library (issue 25): n_threads= with num_workers= its
DataLoader alias (one or the other), info()'s n_threads and n_slots (prefetch + 1), the recipes,
the ImageNet constants, the image extensions and the CPU count taken from the C library, and
the Albumentations adapter still public as stoker.albumentations."""
import os

import pytest

import stoker
from stoker import _core
from stoker import transforms as T


def make(data, batch_size, **kw):
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 1)
    return stoker.Loader(data, batch_size, **kw)


def test_n_threads_and_its_num_workers_alias(ds_small):
    with make(ds_small, 4, n_threads=3) as a, make(ds_small, 4, num_workers=3) as b:
        assert a.n_threads == a.num_workers == 3 and b.n_threads == 3
        assert a.info()["n_threads"] == b.info()["n_threads"] == 3
        assert a.stats()["n_threads"] == 3
        assert sorted(x for batch in a for x in batch["index"].tolist()) == list(range(100))
    with pytest.raises(ValueError, match="one of them"):
        make(ds_small, 4, n_threads=2, num_workers=2)
    with pytest.raises(ValueError, match="n_threads option should be non-negative"):
        make(ds_small, 4, n_threads=-1)
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        make(ds_small, 4, num_workers=-1)
    with make(ds_small, 4, n_threads=0) as z:  # as num_workers=0: one thread
        assert z.n_threads == 1


def test_info_says_n_slots_is_prefetch_plus_one(ds_small):
    with make(ds_small, 4, prefetch=2, n_threads=1) as loader:
        info = loader.info()
        assert (info["prefetch"], info["n_slots"]) == (2, 3)
        assert "ring_slots" not in info and "num_workers" not in info
        core = loader._core
        assert core.info()["n_slots"] == 3
        assert isinstance(core.save_state(), str)


def test_the_library_owns_the_recipes_and_constants():
    assert T.RECIPES == ("imagenet-train", "imagenet-val")
    assert _core.recipes() == T.RECIPES + stoker.audio.RECIPES
    assert stoker.audio.RECIPES == ("kws-train", "kws-val")
    assert T.IMAGENET_MEAN == _core.IMAGENET_MEAN == (0.485, 0.456, 0.406)
    assert T.IMAGENET_STD == _core.IMAGENET_STD == (0.229, 0.224, 0.225)
    ops = _core.recipe_ops("imagenet-val")
    assert [d["kind"] for d in ops] == ["Resize", "CenterCrop", "Normalize"]
    assert ops[0]["size"] == (256, 0) and ops[1]["size"] == (224, 224)
    assert ops[2]["mean"] == T.IMAGENET_MEAN
    with pytest.raises(ValueError, match="unknown transform recipe 'resnet'"):
        _core.recipe_ops("resnet")
    # the helpers are the library's recipes with other sizes
    assert T.imagenet_val().transforms == [T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                                           T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)]
    assert T.imagenet_val(160).transforms[:2] == [T.Resize(183), T.CenterCrop(160)]
    assert T.imagenet_train(96).transforms[:2] == [T.RandomResizedCrop(96),
                                                   T.RandomHorizontalFlip()]
    # a recipe name in another dtype goes through the library's ops too
    assert T.compile("imagenet-val", dtype="float16").output == {"dtype": "float16",
                                                                 "shape": (3, 224, 224)}


def test_the_library_owns_the_cpu_count_and_image_extensions():
    n = _core.n_cpus()
    assert n >= 1 and n == len(os.sched_getaffinity(0))
    assert stoker.dataset.IMAGE_EXTENSIONS == _core.image_extensions() == (
        ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def test_python_asks_the_library_for_the_cpu_count_and_imagenet_constants(monkeypatch):
    """No second copy in Python: a map-style Dataset's loader's default worker count is the
    library's n_cpus() (an IterableDataset's is the DataLoader's 0: each worker would iterate a
    replica), and the Albumentations Normalize defaults are the library's constants."""
    import inspect
    import torch
    from stoker.transforms import _albu

    class Numbers(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    monkeypatch.setattr(_core, "n_cpus", lambda: 3)
    loader = stoker.Loader(Numbers(), batch_size=None, executor="thread")
    assert loader.num_workers == 0 and list(loader) == [0, 1, 2, 3]
    loader.close()

    class Squares(torch.utils.data.Dataset):  # a map-style dataset: the same count
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return i * i

    loader = stoker.Loader(Squares(), batch_size=2, executor="thread")
    assert loader.num_workers == 3 and loader.info()["n_threads"] == 3
    loader.close()
    params = inspect.signature(_albu.Normalize).parameters
    assert params["mean"].default is _core.IMAGENET_MEAN
    assert params["std"].default is _core.IMAGENET_STD


def test_albumentations_adapter_keeps_its_public_name():
    from stoker import albumentations as A
    from stoker.transforms import _albu
    assert A.Resize is _albu.Resize and A.ToTensorV2 is _albu.ToTensorV2
    assert "Compose" in A.__all__
    ops = T._ops_and_options(A.Compose([A.Resize(64, 48), A.HorizontalFlip(), A.Normalize(),
                                        A.ToTensorV2()]), None, None, None)[0]
    assert [type(op).__name__ for op in ops] == ["Resize", "RandomHorizontalFlip", "Normalize"]
