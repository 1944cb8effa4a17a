"""Fixtures shared by every suite come from plugin modules, not from other conftests."""

pytest_plugins = ["tests.plugins.ledgers", "tests.plugins.tampering"]
