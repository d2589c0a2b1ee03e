from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def shared_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite tracking store for the tests that need not start from an empty one (creating a store runs
    MLflow's schema migrations, a few seconds each)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow-store') / 'mlflow.db'}"
