"""Ray's notice that token auth is on by default is dropped from rlightning runs; its other auth warnings stay."""

from __future__ import annotations

import importlib
import logging

import pytest

from rlightning_core.distributed.cluster import _RAY_AUTH_LOGGER, quiet_auth_notice


@pytest.fixture
def ray_auth_module():
    try:
        module = importlib.import_module(_RAY_AUTH_LOGGER)
    except ImportError:
        pytest.skip("this Ray has no token-auth module")
    if not hasattr(module, "_warn_token_auth_enabled"):
        pytest.skip("this Ray prints no token-auth notice")
    assert module.logger.name == _RAY_AUTH_LOGGER  # the filter sits on the logger Ray writes to
    logger = logging.getLogger(_RAY_AUTH_LOGGER)
    before = list(logger.filters)  # an in-process run earlier in the session may have installed it
    for f in before:
        logger.removeFilter(f)
    yield module
    logger.filters[:] = before


def test_the_auth_enabled_notice_is_dropped_and_the_disabled_warning_kept(ray_auth_module, caplog):
    caplog.set_level(logging.WARNING, logger=_RAY_AUTH_LOGGER)
    ray_auth_module._warn_token_auth_enabled()
    assert "Token authentication is enabled" in caplog.text  # Ray's own behaviour, before the filter
    caplog.clear()
    quiet_auth_notice()
    quiet_auth_notice()  # idempotent: one filter
    assert len(logging.getLogger(_RAY_AUTH_LOGGER).filters) == 1
    ray_auth_module._warn_token_auth_enabled()
    assert "Token authentication" not in caplog.text
    ray_auth_module._warn_token_auth_disabled()
    assert "Token authentication is disabled" in caplog.text
