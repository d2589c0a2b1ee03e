"""SwanLab logging for rlightning: the ``swanlab`` logger component.

Importing this package is cheap; swanlab is imported when a logger is created.
"""

from __future__ import annotations

from rlightning_swanlab.logger import SwanlabLogger
from rlightning_swanlab.params import SwanlabParams

__all__ = ["SwanlabLogger", "SwanlabParams"]
