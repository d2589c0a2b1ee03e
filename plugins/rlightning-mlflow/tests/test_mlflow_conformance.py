"""The ``mlflow`` logger passes rlightning's conformance kit (``conformance``: rlightning's pytest plugin)."""

from __future__ import annotations

import math


def test_mlflow_logger_conforms(conformance, tmp_path, shared_uri):
    from mlflow.tracking import MlflowClient

    report = conformance.check_logger("mlflow", {"tracking_uri": shared_uri, "experiment": "conformance"},
                                      run_dir=tmp_path)
    assert not report.notes
    client = MlflowClient(tracking_uri=shared_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("conformance").experiment_id])
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "iteration")
    assert [(m.step, m.value) for m in history] == [(0, 1), (128, 2)]
    assert math.isnan(client.get_metric_history(run.info.run_id, "loss/policy")[0].value)
