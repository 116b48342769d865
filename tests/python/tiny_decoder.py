"""The tests' decoder: examples/torch_model.py (tiny dimensions by default)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
from torch_model import TinyDecoder, batches, loss_fn, make  # noqa: E402,F401
