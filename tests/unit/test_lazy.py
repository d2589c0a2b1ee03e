"""Package names imported on first access (rlightning_core.lazy)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlightning_core.lazy import lazy_getattr


def test_a_lazy_name_is_imported_once_and_cached_and_unknown_names_raise():
    namespace: dict[str, object] = {}
    getattr_ = lazy_getattr("pkg", {"JSONDecoder": "json.decoder"}, namespace)
    import json.decoder

    assert getattr_("JSONDecoder") is json.decoder.JSONDecoder
    assert namespace == {"JSONDecoder": json.decoder.JSONDecoder}
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'nope'"):
        getattr_("nope")


def test_the_config_package_loads_the_loader_only_when_asked():
    code = """
import sys
import rlightning_core, rlightning_core.config
from rlightning_core.config.validators import ge
before = "yaml" in sys.modules or "cattrs" in sys.modules
from rlightning_core.config import converter, MainConfig
from rlightning_core import load_config
import rlightning_core.config.structuring as mod
print(before, type(converter).__name__, MainConfig.__name__, load_config.__module__, mod.converter is converter)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "Converter", "MainConfig", "rlightning_core.config.loading", "True"]
