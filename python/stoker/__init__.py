"""stoker: a training-data loader written in C, with a PyTorch front end.

    import stoker
    loader = stoker.Loader("train/", batch_size=256, shuffle=True, transforms="imagenet-train")
    for batch in loader:              # each pass is the next epoch
        images, labels = batch["image"], batch["label"]

Main names: Loader, Batch, profile (is a training loop waiting on data? see Profile),
Dataset (any format: .stk, ImageFolder, .npy, HDF5, LMDB; see formats), mix and Corpus
(token corpora for Loader(corpus, seq_len=T): stoker.tokens, docs/tokens.md), Writer, write_shard, pack (any
dataset to .stk shards), pack_records (Python dicts to .stk shards), pack_image_folder, transforms (alias ops), audio
(torchaudio's transforms in C and stoker's crops; docs/audio.md), cuda_probe (can
stoker copy to this GPU itself, and if not why), and the exceptions: Error and its per-status subclasses StokerInvalidError (also a
ValueError), StokerMemoryError (MemoryError), StokerIOError (OSError), StokerFormatError,
StokerLimitError (and its subclass StokerBusyError: the next ring slot is still held),
StokerNotSupportedError, StokerStateError (RuntimeError) and StokerCanceledError, and
StokerWorkerError (a StokerIOError and a RuntimeError: a Python dataset's worker process was
lost). docs/python.md is the manual.
"""
from . import _core
from ._core import (Error, StokerBusyError, StokerCanceledError, StokerFormatError,
                    StokerInvalidError, StokerIOError, StokerLimitError, StokerMemoryError,
                    StokerNotSupportedError, StokerStateError, cuda_probe, epoch_order,
                    has_transforms)
from ._errors import StokerWorkerError
from . import transforms
from . import audio
from . import video
from .dataset import Dataset, Writer, formats, pack, pack_image_folder, write_shard
from .dataset import pack_records
from .loader import Batch, Loader
from . import _pydataset  # noqa: F401 - Loader runs Python datasets through it (registers)
from . import tokens
from .tokens import Corpus, mix
from ._profile import Profile, profile

ops = transforms
__version__ = _core.__version__

__all__ = [
    "Loader", "Batch", "profile", "Profile", "Dataset", "Writer", "write_shard", "pack", "pack_records", "pack_image_folder", "formats", "transforms",
    "ops", "audio", "video", "has_transforms", "cuda_probe", "epoch_order", "Error", "StokerInvalidError", "StokerMemoryError",
    "StokerIOError", "StokerFormatError", "StokerLimitError", "StokerNotSupportedError",
    "StokerStateError", "StokerCanceledError", "StokerBusyError", "StokerWorkerError", "__version__",
    "tokens", "mix", "Corpus",
]
