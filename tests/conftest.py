"""Fixtures shared by every suite come from plugin modules, not from other conftests."""

import pytest

pytest_plugins = [
    "tests.plugins.ledgers",
    "tests.plugins.tampering",
    "tests.plugins.deployments",
    "tests.plugins.rigs",
    "tests.plugins.matrix",
    "tests.plugins.api",
    "tests.plugins.cli",
    "tests.plugins.client",
    "tests.plugins.process_settings",
    "tests.plugins.archiving",
]

# Helper modules of split test files: their asserts keep pytest's detailed failure messages.
pytest.register_assert_rewrite("tests.concurrent_writers", "tests.rebuild_workload")
