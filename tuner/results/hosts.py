"""Whether the trials shown side by side ran on alike hosts (tuner.host.fingerprint): a front whose
trials ran on hosts of different CPUs, GPUs, drivers or core speeds compares the hosts as well as
the configs (on a Ray cluster of mixed nodes, say)."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.host.fingerprint import HostFingerprint, apart
from tuner.trials import TrialRecord

__all__ = ["unlike_hosts"]


def unlike_hosts(trials: Sequence[TrialRecord]) -> str | None:
    """A line where ``trials`` ran on hosts unlike each other (their names aside), naming the first
    two that differ and how; None where they are alike or their hosts were not stored."""
    hosts = [(t.number, h) for t in trials if (h := HostFingerprint.from_dict(t.host)) is not None]
    for i, (first, a) in enumerate(hosts):
        for second, b in hosts[i + 1 :]:
            if differs := apart(a, b, names=False):
                return (
                    f"trials {first} and {second} ran on unlike hosts ({'; '.join(differs)}): "
                    "their figures compare the hosts as well as the configs"
                )
    return None
