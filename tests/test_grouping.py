"""The suite's own scheduling: tests of one xdist_group go to one worker (tests/conftest.py relies on
it for the quiet tests, test_executors.py for its shared 3-node Ray cluster)."""

from __future__ import annotations

import os

import pytest


@pytest.mark.xdist_group("grouping-check")
def test_a_grouped_test_carries_its_group_under_loadgroup(request: pytest.FixtureRequest) -> None:
    """xdist sends a group to one worker by the ``@group`` suffix it adds to the test's id. With
    pytest 9.2 and pytest-xdist 3.8 no suffix was added (pytest-xdist#1386), and nothing failed: the
    groups' tests spread over the workers (pyproject.toml pins pytest below 9.2)."""
    if "PYTEST_XDIST_WORKER" not in os.environ or not request.config.getoption("loadgroup", False):
        pytest.skip("runs under xdist's --dist loadgroup only (README's test command)")
    assert request.node.nodeid.endswith("@grouping-check"), (
        f"--dist loadgroup does not group with pytest {pytest.__version__} and this pytest-xdist: {request.node.nodeid}"
    )
