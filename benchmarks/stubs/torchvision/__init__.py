"""Import-only stand-in for torchvision, used in the bench venv (.venv-bench) only.

mosaicml-streaming imports ``torchvision.datasets.VisionDataset`` and
``torchvision.transforms.functional.to_tensor`` at ``import streaming`` time (its
``streaming.vision`` subpackage), although the benchmarks never use them. PyPI's real
torchvision pins a different torch than the 2.13.0 CPU build we benchmark with, so
``benchmarks/setup.py`` puts this folder on the bench venv's path with a ``.pth`` file
instead of installing torchvision. Nothing here does any work: calling it raises.
"""

__version__ = "0.0.0+shardkit.bench.stub"
