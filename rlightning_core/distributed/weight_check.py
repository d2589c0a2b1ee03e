"""After a sync, every rollout copy is checked against the learner: a cheap fingerprint, per version.

The learner side computes the fingerprint (:mod:`rlightning_core.weights.fingerprint`) of the weights it sends,
once per sync, where it produces them: the learn reply that carries them, its broadcast's result, the call that
fetches them for the object store, or (the learner in the driver) the driver itself. A rollout copy computes
the fingerprint of what it loaded and reports it with the version: an env runner with the first chunk it
collects with those weights, an inference server when asked after the (blocking) sync. A difference stops the
run with :class:`WeightSyncMismatch`, naming the worker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlightning_core.errors import RlightningError
from rlightning_core.weights.fingerprint import fingerprint_mismatch

__all__ = ["WeightCheck", "WeightSyncMismatch"]

#: Versions whose learner fingerprints are kept (a report of an older one is not checked).
KEPT_VERSIONS = 16


class WeightSyncMismatch(RlightningError):
    """A rollout copy holds other weights than the learner sent under the same version."""


class WeightCheck:
    """The learner's fingerprint of each recent version, and the rollout copies' reports compared with it.

    Args:
        ray: the ``ray`` module.
        timeout: seconds to wait for a fingerprint the learner computes (``cluster.call_timeout_s``).
        runner_name: how a mismatch names env runner ``i``.
        transport: the weight sync's transport, named in a mismatch.
    """

    def __init__(self, ray: Any, timeout: float, runner_name: Callable[[int], str], transport: str) -> None:
        self.ray, self.timeout, self.runner_name, self.transport = ray, timeout, runner_name, transport
        self._expected: dict[int, tuple[Any, str | None]] = {}
        self.exempt: dict[int, int] = {}
        """Runner -> a version it was re-sent after a restart with the learner's weights of that moment."""
        self.verified_copies = 0
        """Rollout-copy reports that matched the learner's fingerprint so far."""

    def expect(self, version: int, value: Any, key: str | None = None) -> None:
        """The learner's fingerprint of ``version``: a value, or a ref of it (``key``: of a dict holding it)."""
        self._expected[int(version)] = (value, key)
        for old in sorted(self._expected)[:-KEPT_VERSIONS]:
            del self._expected[old]

    def _expected_fingerprint(self, version: int) -> Any:
        entry = self._expected.get(int(version))
        if entry is None:
            return None
        value, key = entry
        if isinstance(value, self.ray.ObjectRef):
            value = self.ray.get(value, timeout=self.timeout)
        if key is not None:
            value = value.get(key) if isinstance(value, dict) else None
        self._expected[int(version)] = (value, None)
        return value

    def check_reports(self, stats: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Compare the fingerprints env runners reported with their chunks' stats (runner ``indices[i]``)."""
        for pos, s in enumerate(stats):
            report = getattr(s, "weight_fingerprint", None) if s is not None else None
            index = indices[pos] if indices is not None else pos
            if report is not None and self.exempt.get(index) != int(s.weight_version):
                self._compare(report, int(s.weight_version), self.runner_name(index))

    def check_servers(self, servers: Sequence[Any]) -> None:
        """Ask every inference server for the fingerprint of what it loaded (after a blocking sync)."""
        reports = self.ray.get([s.weight_report.remote() for s in servers], timeout=self.timeout)
        for j, report in enumerate(reports):
            if report is not None:
                self._compare(report[1], int(report[0]), f"rollout actor {j}")

    def _compare(self, report: Any, version: int, who: str) -> None:
        want = self._expected_fingerprint(version)
        if want is None:
            return  # the learner's of that version is not known here (e.g. older than KEPT_VERSIONS)
        differ = fingerprint_mismatch(report, want)
        if differ:
            shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
            raise WeightSyncMismatch(
                f"{who} acts with weight version {version}, but its weights differ from the learner's version "
                f"{version} (sampled elements of {shown}); the weight sync ({self.transport}) delivered other "
                "weights than the learner sent, or the copy changed them after loading. The run stops: its "
                "rollouts would not come from the policy they are labelled with")
        self.verified_copies += 1
