"""Albumentations spellings of stoker's ops (``from stoker import albumentations as A``): the
classes live in stoker/transforms/_albu.py, below the converter that also reads albumentations
pipelines; this is their public name. docs/images.md has the differences from Albumentations."""
from .transforms._albu import (CenterCrop, Compose, HorizontalFlip, Normalize,  # noqa: F401
                               RandomCrop, Resize, Rotate, ShiftScaleRotate, ToTensorV2,
                               VerticalFlip, __all__)
