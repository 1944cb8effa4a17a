"""docker-compose.yml cannot be run here (no Docker engine), so test what can be tested: it
parses, its services are the ones docs/deploy.md describes, and every command it runs is a real
`outcomes` command whose options parse."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from sqlalchemy.engine import make_url

from cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return document


def outcomes_commands() -> list[tuple[str, list[str]]]:
    services = compose()["services"]
    return [
        (name, spec["command"][1:])
        for name, spec in services.items()
        if isinstance(spec.get("command"), list) and spec["command"][0] == "outcomes"
    ]


def test_compose_has_the_production_shape() -> None:
    services = compose()["services"]
    assert {"postgres", "rabbitmq", "migrate", "api", "worker", "reconciler"} <= set(services)
    for name in ("postgres", "rabbitmq"):
        assert "healthcheck" in services[name], f"{name} needs a health check"
    for name in ("api", "worker", "reconciler"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        env = services[name]["environment"]
        assert env["OUTCOMES_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["OUTCOMES_BROKER_URL"].startswith("amqp://")


def test_the_outcomes_services_run_the_image_this_dockerfile_builds() -> None:
    # tests/house/test_dockerfile.py checks that image; a service built otherwise would escape it.
    with (ROOT / "pyproject.toml").open("rb") as file:
        scripts = tomllib.load(file)["project"]["scripts"]
    assert "outcomes" in scripts, "the image's `outcomes` command comes from pyproject.toml"
    for name, _ in outcomes_commands():
        build = compose()["services"][name]["build"]
        context, dockerfile = (
            (build, "Dockerfile")
            if isinstance(build, str)
            else (build["context"], build.get("dockerfile", "Dockerfile"))
        )
        assert (ROOT / context / dockerfile).resolve() == ROOT / "Dockerfile", name


def test_only_the_migration_connects_as_the_owner() -> None:
    services = compose()["services"]
    owner = make_url(services["migrate"]["environment"]["OUTCOMES_DATABASE_URL"])
    argv = services["migrate"]["command"]
    app_role = argv[argv.index("--app-role") + 1]
    password_env = argv[argv.index("--app-password-env") + 1]
    for name in ("api", "worker", "reconciler"):
        env = services[name]["environment"]
        app = make_url(env["OUTCOMES_DATABASE_URL"])
        assert (app.username, app.password) == (app_role, env_of(services["migrate"], password_env))
        assert app.username != owner.username
        assert (app.host, app.database) == (owner.host, owner.database)
        assert owner.username not in {make_url(v).username for v in env.values() if "://" in v}


def env_of(service: dict[str, Any], name: str) -> str:
    value: str = service["environment"][name]
    return value


@pytest.mark.parametrize(("service", "argv"), outcomes_commands())
def test_each_service_command_is_a_real_command_with_valid_options(
    service: str, argv: list[str]
) -> None:
    # Parse exactly the compose file's arguments without running the command.
    name, rest = argv[0], argv[1:]
    command = cli.commands.get(name)
    assert command is not None, f"{service}: unknown command {name}"
    try:
        command.make_context(name, list(rest))
    except click.UsageError as exc:  # pragma: no cover - the failure message is the point
        pytest.fail(f"{service}: `outcomes {' '.join(argv)}` does not parse: {exc}")
    shown = subprocess.run(
        [sys.executable, "-m", "cli", name, "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"Usage: outcomes {name}" in shown.stdout
