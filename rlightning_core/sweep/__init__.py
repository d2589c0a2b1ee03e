"""Hyperparameter sweeps: ``rlightning sweep`` (Optuna locally, Ray Tune with ``--ray``). See docs/sweeps.md."""
