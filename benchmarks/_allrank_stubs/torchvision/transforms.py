"""Stand-in for ``torchvision.transforms.Compose`` (allRank's dataset loading imports it; the benchmark
never calls it)."""

from __future__ import annotations


class Compose:
    """Applies ``transforms`` in order, as torchvision's ``Compose``."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, sample):
        for t in self.transforms:
            sample = t(sample)
        return sample
