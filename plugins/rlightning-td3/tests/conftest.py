"""One torch thread for the tests: small networks gain nothing from more, and a shared machine loses a lot."""

from __future__ import annotations

import torch

torch.set_num_threads(1)
