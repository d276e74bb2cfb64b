"""Image transforms that run inside stoker's C workers (also importable as ``stoker.ops``).

The classes carry torchvision's names and parameters. They do not transform anything in
Python: :func:`compile` turns a list of them (or a torchvision ``transforms.Compose`` of the
supported torchvision classes) into one C transform (``stk_transform``) that the loader's
worker threads apply to every sample, fused with the image decode (JPEG, PNG, WebP, TIFF, BMP,
binary PPM/PGM)::

    import stoker
    from stoker import transforms as T

    train = T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(),
                       T.ToTensor(), T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    loader = stoker.Loader("train/", batch_size=64, transforms=train)

Supported ops (the C library's op table, ``SUPPORTED``): RandomResizedCrop, Resize, CenterCrop,
RandomHorizontalFlip, RandomVerticalFlip, ColorJitter, Normalize, Grayscale (3 channels),
RandomGrayscale, RandomInvert, RandomPosterize, RandomSolarize, RandomAdjustSharpness,
RandomAutocontrast, RandomEqualize, GaussianBlur, RandomCrop, Pad (zero fill) and
RandomErasing (on the output tensor, after Normalize), TrivialAugmentWide, RandAugment and
AutoAugment (IMAGENET policy), AugMix, RandomApply, RandomChoice and RandomOrder (of ops that
keep the size), RandomRotation and RandomAffine (PIL's warps, NEAREST or BILINEAR, with fill; after the
crops, resizes and flips), from ``torchvision.transforms``
or, where torchvision has it, ``torchvision.transforms.v2`` (matched by class name; the names
only v2 has are in ``V2_ONLY``). ToTensor,
PILToTensor, ConvertImageDtype and ToDtype only choose the output dtype (ToTensor: float32 in
[0, 1]; PILToTensor and v2's ToImage: uint8; ConvertImageDtype/ToDtype: that dtype, scaled as
torchvision scales it). Without any of them the output is float32. Output layout
is NCHW unless ``Compose(..., layout="NHWC")``. Resampling is bilinear with antialiasing
(PIL's, which is what torchvision uses on PIL images); other interpolation modes are refused.
Pixel ops (ColorJitter and the ops from Grayscale on) run on the output-size uint8 image, after
the geometric ops, whatever their place in the list. Randomness comes from the loader's (seed,
epoch, sample index), so augmentation is identical for any number of threads or ranks.
"""
from ._base import (IMAGENET_MEAN, IMAGENET_STD, MARKERS, RECIPES, SUPPORTED, Op,  # noqa: F401
                    _invalid)
from ._geometry import (CenterCrop, Pad, RandomCrop, RandomHorizontalFlip,  # noqa: F401
                        RandomResizedCrop, RandomVerticalFlip, Resize)
from ._pixel import (ColorJitter, GaussianBlur, Grayscale, Normalize,  # noqa: F401
                     RandomAdjustSharpness, RandomAutocontrast, RandomEqualize, RandomErasing,
                     RandomGrayscale, RandomInvert, RandomPosterize, RandomSolarize)
from ._compose import (Compose, ConvertImageDtype, PILToTensor, RandomApply,  # noqa: F401
                       RandomChoice, RandomOrder, ToDtype, ToTensor, _Container, _DtypeMarker,
                       _dtype_name, imagenet_train, imagenet_val)
from ._warps import (AugMix, AutoAugment, RandAugment, RandomAffine,  # noqa: F401
                     RandomRotation, TrivialAugmentWide)
from ._convert import (V2_ONLY, _BY_TV_NAME, _flatten, _from_torchvision,  # noqa: F401
                       _ops_and_options, _unsupported, compile, compile_for_device)
# Batch transforms (Loader(..., batch_transforms=...)): they run in C on each complete batch.
# RandomChoice is the per-sample op above; a RandomChoice of MixUp/CutMix given as
# batch_transforms= is read by _batchmap by its members.
from .._batchmap import CutMix, MixUp  # noqa: F401

__all__ = [
    "RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip", "RandomVerticalFlip",
    "ColorJitter", "Normalize", "Grayscale", "RandomGrayscale", "RandomInvert",
    "RandomPosterize", "RandomSolarize", "RandomAdjustSharpness", "RandomAutocontrast",
    "RandomEqualize", "GaussianBlur", "RandomCrop", "Pad", "RandomErasing", "TrivialAugmentWide", "RandAugment",
    "AutoAugment", "RandomApply", "RandomChoice", "RandomOrder", "RandomRotation", "RandomAffine",
    "AugMix",
    "ToTensor", "PILToTensor", "ConvertImageDtype", "ToDtype",
    "Compose", "imagenet_train", "imagenet_val", "compile", "IMAGENET_MEAN", "IMAGENET_STD",
    "RECIPES", "SUPPORTED",
]
__all__ += ["MixUp", "CutMix"]
