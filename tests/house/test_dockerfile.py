"""The image builds from what the repository holds, with the dependencies the lock pins.

No Docker engine runs here, so this does what `docker build` would do up to the project's
install: it reads the Dockerfile's instructions, lays out the files its COPYs take from the
build context (`.dockerignore` applied), and runs the project's `pip install` from that layout
with the Dockerfile's own options, into a temporary target. Everything pyproject.toml names
must then be there: every package importable from the install, every file the repository keeps
in their folders (the ledger's migrations, the console's templates and static files) installed,
and the build quiet (no setuptools warning). The lock (`make lock`) must pin, with hashes,
every dependency pyproject.toml names.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import posixpath
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = "requirements.lock"


def pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


# --- the Dockerfile, as `docker build` reads it ---------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def instructions(text: str) -> list[Instruction]:
    """The instructions, continuation lines joined, comments and blank lines dropped."""
    found: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not parts:
            start = number
        if line.endswith("\\"):
            parts.append(line[:-1].strip())
            continue
        parts.append(line)
        keyword, _, args = " ".join(parts).partition(" ")
        found.append(Instruction(keyword.upper(), args.strip(), start))
        parts = []
    assert not parts, "the Dockerfile ends inside a continued line"
    return found


class DockerIgnore:
    """`.dockerignore` as Docker matches it: Go's path.Match per pattern, `**` for any number
    of folders, `!` to take a path back, the last matching pattern deciding, and a pattern
    that matches a folder matching everything under it."""

    def __init__(self, text: str) -> None:
        self.patterns: list[tuple[bool, re.Pattern[str]]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            keep = line.startswith("!")
            pattern = posixpath.normpath(line.removeprefix("!").strip()).lstrip("/")
            self.patterns.append((keep, re.compile(self.translate(pattern))))

    @staticmethod
    def translate(pattern: str) -> str:
        out, i = [], 0
        while i < len(pattern):
            char = pattern[i]
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
                continue
            if pattern.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            if char == "*":
                out.append("[^/]*")
            elif char == "?":
                out.append("[^/]")
            elif char == "[":
                end = pattern.index("]", i + 1)
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]")
                i = end
            elif char == "\\" and i + 1 < len(pattern):
                i += 1
                out.append(re.escape(pattern[i]))
            else:
                out.append(re.escape(char))
            i += 1
        return "".join(out)

    def excluded(self, path: str) -> bool:
        candidates = [path, *(str(parent) for parent in PurePosixPath(path).parents)][:-1]
        verdict = False
        for keep, regex in self.patterns:
            if any(regex.fullmatch(candidate) for candidate in candidates):
                verdict = not keep
        return verdict


@dataclass
class Run:
    command: str
    workdir: PurePosixPath
    env: dict[str, str]
    # The image's files when this RUN runs: where in the image -> which file of the context.
    files: dict[PurePosixPath, Path]


@dataclass
class Image:
    runs: list[Run] = field(default_factory=list)
    user: str = "root"
    env: dict[str, str] = field(default_factory=dict)
    files: dict[PurePosixPath, Path] = field(default_factory=dict)


def context_files(context: Path, ignore: DockerIgnore, source: str) -> Iterator[tuple[str, Path]]:
    """The files of the context under `source` (a file or a folder), relative to it."""
    rel = posixpath.normpath(source).lstrip("/")
    assert rel != ".." and not rel.startswith("../"), f"COPY {source}: outside the context"
    if rel != "." and ignore.excluded(rel):
        pytest.fail(f"COPY {source}: .dockerignore excludes it, so `docker build` fails")
    path = context / rel
    if path.is_file():
        yield "", path
        return
    if not path.is_dir():
        pytest.fail(f"COPY {source}: not in the build context, so `docker build` fails")
    for folder, dirs, names in os.walk(path):
        for name in sorted(names):
            file = Path(folder, name)
            inside = file.relative_to(context).as_posix()
            if not ignore.excluded(inside):
                yield file.relative_to(path).as_posix(), file
        dirs.sort()


def build(dockerfile: str, context: Path) -> Image:
    """What the Dockerfile's instructions lay out from `context`, up to each RUN."""
    ignore_file = context / ".dockerignore"
    ignore = DockerIgnore(ignore_file.read_text() if ignore_file.exists() else "")
    image = Image()
    workdir = PurePosixPath("/")
    for instruction in instructions(dockerfile):
        where = f"Dockerfile line {instruction.line}"
        if instruction.keyword == "FROM":
            assert not image.files, f"{where}: one stage only is emulated here"
        elif instruction.keyword == "WORKDIR":
            workdir = workdir / instruction.args
        elif instruction.keyword == "ENV":
            words = shlex.split(instruction.args)
            if "=" in words[0]:
                image.env.update(word.split("=", 1) for word in words)
            else:  # the legacy form: ENV NAME the value
                image.env[words[0]] = instruction.args.split(None, 1)[1]
        elif instruction.keyword == "USER":
            image.user = instruction.args.split(":")[0]
        elif instruction.keyword == "RUN":
            image.runs.append(Run(instruction.args, workdir, dict(image.env), dict(image.files)))
        elif instruction.keyword in {"COPY", "ADD"}:
            assert instruction.keyword == "COPY", f"{where}: ADD fetches and unpacks; use COPY"
            if instruction.args.startswith("["):
                words: list[str] = json.loads(instruction.args)
            else:
                words = shlex.split(instruction.args)
            flags = [word for word in words if word.startswith("--")]
            unknown = [f for f in flags if f.split("=")[0] not in {"--chown", "--chmod", "--link"}]
            assert not unknown, f"{where}: {unknown} is not emulated by this test"
            *sources, dest = [word for word in words if not word.startswith("--")]
            assert sources, f"{where}: COPY needs a source and a destination"
            assert not any(set(s) & set("*?[") for s in sources), f"{where}: no wildcards here"
            into = workdir / dest
            if len(sources) > 1:
                assert dest.endswith("/"), f"{where}: several sources need a folder ending in /"
            for source in sources:
                for rel, file in context_files(context, ignore, source):
                    if rel:  # a folder: its contents go into the destination
                        image.files[into / rel] = file
                    elif dest.endswith("/") or len(sources) > 1:
                        image.files[into / PurePosixPath(source).name] = file
                    else:
                        image.files[into] = file
    return image


def pip_installs(run: Run) -> list[list[str]]:
    """The `pip install` commands of a RUN (its `&&`-joined parts), as argument lists."""
    found = []
    for part in run.command.split("&&"):
        words = shlex.split(part)
        if words[:2] == ["pip", "install"] or (words[1:3] == ["-m", "pip"] and "install" in words):
            found.append(words[words.index("install") + 1 :])
    return found


def dependency_install(image: Image) -> tuple[Run, list[str]]:
    for run in image.runs:
        for args in pip_installs(run):
            if "-r" in args:
                return run, args
    pytest.fail("no RUN installs the dependencies from a requirements file")


def project_install(image: Image) -> tuple[Run, list[str]]:
    for run in image.runs:
        for args in pip_installs(run):
            if "." in args:
                return run, args
    pytest.fail("no RUN installs the project from its folder (`pip install … .`)")


def materialize(run: Run, below: PurePosixPath, into: Path) -> None:
    """Write the image's files under `below`, as they are when `run` runs, into `into`."""
    for where, file in run.files.items():
        if where.is_relative_to(below):
            target = into / where.relative_to(below)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)


# --- pyproject.toml's packages --------------------------------------------------------------


def packages() -> list[str]:
    names: list[str] = pyproject()["tool"]["setuptools"]["packages"]
    return names


def package_folder(package: str) -> str:
    """The repository folder of a package, through `package-dir`."""
    mapping: dict[str, str] = pyproject()["tool"]["setuptools"].get("package-dir", {})
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in mapping:
            return posixpath.join(mapping[prefix], *parts[cut:])
    return posixpath.join(mapping.get("", ""), *parts)


def clean_env(**image_env: str) -> dict[str, str]:
    """This process's environment less the machine's pip configuration (its indexes and
    links), Python's and the ledger's settings; then the image's own (its ENV lines)."""
    prefixes = ("PIP_", "PYTHON", "OUTCOMES_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PYTHONWARNINGS": "default", **image_env}


@dataclass(frozen=True)
class Installed:
    target: Path
    output: str


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The project installed as the image's RUN installs it, from the layout of its COPYs."""
    image = build((ROOT / "Dockerfile").read_text(), ROOT)
    run, args = project_install(image)
    tmp = tmp_path_factory.mktemp("image")
    source, target = tmp / "src", tmp / "site-packages"
    materialize(run, run.workdir, source)
    assert "--no-deps" in args, "the project installs without dependencies: the lock has them"
    assert "--no-build-isolation" in args, (
        "an isolated build downloads setuptools with no hash checked: build with the lock's"
    )
    positional = [arg for arg in args if not arg.startswith("-")]
    assert positional == ["."], f"the project's RUN installs {positional} beside its folder"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-v", "--no-index", *args, "--target", target],
        cwd=source,
        env=clean_env(**run.env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"pip install from the image's layout failed:\n{output}"
    return Installed(target, output)


def run_installed(installed: Installed, code: str, *argv: str, **env: str) -> str:
    """Run `code` on the installed copy: first on the path, ahead of the repository's
    editable install (which the callers check by where each module was found)."""
    prelude = f"import sys; sys.path.insert(0, {str(installed.target)!r}); sys.argv[1:] = {argv!r}"
    result = subprocess.run(
        [sys.executable, "-I", "-c", f"{prelude}\n{code}"],
        cwd=installed.target.parent,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def modules() -> list[str]:
    """The packages that are Python packages (an `__init__.py`): the rest are data folders
    the code finds by path (the migrations), checked file by file below."""
    return [p for p in packages() if (ROOT / package_folder(p) / "__init__.py").is_file()]


def test_every_package_of_pyproject_installs_from_the_image_layout(installed: Installed) -> None:
    located = json.loads(
        run_installed(
            installed,
            "import importlib, json\n"
            "print(json.dumps({n: importlib.import_module(n).__file__ for n in sys.argv[1:]}))",
            *modules(),
        )
    )
    for package in modules():
        where = Path(located[package])
        assert where.is_relative_to(installed.target), f"{package} imported from {where}"
        assert where.parent == installed.target.joinpath(*package.split("."))
    for folder in set(packages()) - set(modules()):
        assert installed.target.joinpath(*folder.split(".")).is_dir(), folder


def test_every_file_the_repository_keeps_in_a_package_is_installed(installed: Installed) -> None:
    tops = sorted({p for p in packages() if "." not in p})
    missing = []
    for package in tops:
        folder = package_folder(package)
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", folder],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\0")
        for path in filter(None, listed):
            rel = PurePosixPath(path).relative_to(folder)
            if not installed.target.joinpath(package, rel).is_file():
                missing.append(path)
    assert missing == [], "kept in the repository, not installed in the image"
    # The data the code loads by path, named: without them the image starts and then fails.
    for data in (
        "console/templates/base.html",
        "console/static/console.css",
        "console/static/live.js",
        "migrations/alembic.ini",
        "migrations/env.py",
        "migrations/script.py.mako",
        "migrations/versions/0001_ledger_core.py",
        "outcomes_client/py.typed",
    ):
        assert (installed.target / data).is_file(), data


def test_the_installed_command_migrates_and_knows_its_version(installed: Installed) -> None:
    main = "from cli.main import main\nmain()"
    shown = run_installed(installed, main, "--version")
    assert pyproject()["project"]["version"] in shown
    database = installed.target.parent / "ledger.db"
    run_installed(installed, main, "migrate", OUTCOMES_DATABASE_URL=f"sqlite:///{database}")
    with sqlite3.connect(database) as connection:
        (version,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    # The migrations ran from the installed copy, up to the repository's newest.
    newest = sorted((ROOT / "migrations/versions").glob("0*.py"))[-1]
    assert version == newest.name.split("_")[0], (version, newest.name)


def test_the_build_prints_no_setuptools_warning(installed: Installed) -> None:
    warnings = [
        line
        for line in installed.output.splitlines()
        if re.search(r"warning|deprecat", line, re.IGNORECASE)
    ]
    assert warnings == [], "\n".join(warnings)


def test_the_image_installs_the_lock_first_with_hashes_and_runs_as_another_user() -> None:
    image = build((ROOT / "Dockerfile").read_text(), ROOT)
    deps_run, deps_args = dependency_install(image)
    project_run, _ = project_install(image)
    assert image.runs.index(deps_run) <= image.runs.index(project_run)
    assert "--require-hashes" in deps_args
    lock = deps_run.workdir / deps_args[deps_args.index("-r") + 1]
    assert deps_run.files.get(lock) == ROOT / LOCK, f"{lock} is not the repository's {LOCK}"
    assert image.user not in {"root", "0"}, "the image runs as root"


def test_a_folder_the_dockerfile_does_not_copy_is_not_in_the_layout(tmp_path: Path) -> None:
    # The install above is only worth something if a forgotten folder is missing from the
    # layout it installs from, as it would be from the image: leave the console out.
    dockerfile = (ROOT / "Dockerfile").read_text()
    without = "\n".join(line for line in dockerfile.splitlines() if line != "COPY console console")
    assert without != dockerfile, "the Dockerfile copies the console some other way"
    run, _ = project_install(build(without, ROOT))
    materialize(run, run.workdir, tmp_path)
    assert (tmp_path / "migrations/alembic.ini").is_file()
    assert not (tmp_path / "console").exists()


def test_dockerignore_keeps_local_state_and_caches_out_of_the_context() -> None:
    ignore = DockerIgnore((ROOT / ".dockerignore").read_text())
    for path in (
        ".git/config",
        ".venv/bin/python",
        ".outcomes/secrets.key",
        ".outcomes/ledger.db",
        "ledger/__pycache__/codes.cpython-311.pyc",
        "console/__pycache__/web.cpython-311.pyc",
        "outcome_ledger.egg-info/PKG-INFO",
        ".mypy_cache/3.11/x.json",
        "tests/mcp/js/node_modules/x/index.js",
    ):
        assert ignore.excluded(path), f"{path} would be sent to the build"
    for path in ("ledger/codes.py", "console/templates/base.html", LOCK, "pyproject.toml"):
        assert not ignore.excluded(path), f"{path} would be left out of the build"


# --- the lock -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    requirement: Requirement
    hashes: list[str]

    @property
    def version(self) -> Version:
        (spec,) = self.requirement.specifier
        return Version(spec.version)


def lock_pins() -> dict[str, Pin]:
    """requirements.lock's entries by normalized name: continued lines joined, comments off."""
    entries: list[str] = []
    current = ""
    for raw in (ROOT / LOCK).read_text().splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        current += " " + line.removesuffix("\\").strip()
        if not line.endswith("\\"):
            entries.append(current.strip())
            current = ""
    assert not current, f"{LOCK} ends inside a continued line"
    pins: dict[str, Pin] = {}
    for entry in entries:
        words = entry.split()
        hashes = [w.removeprefix("--hash=") for w in words if w.startswith("--hash=")]
        others = [w for w in words if not w.startswith("--hash=")]
        assert not any(w.startswith("-") for w in others), f"an option in {LOCK}: {entry}"
        requirement = Requirement(" ".join(others))
        assert hashes, f"{requirement} carries no --hash: --require-hashes refuses it"
        assert all(h.startswith("sha256:") for h in hashes), requirement
        specs = list(requirement.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{requirement} is not pinned"
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{name} twice in {LOCK}"
        pins[name] = Pin(requirement, hashes)
    return pins


def image_requirements() -> list[Requirement]:
    """What the image needs: the dependencies, the client's extra and the build backend."""
    project = pyproject()
    declared = [
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["client"],
        *project["build-system"]["requires"],
    ]
    return [Requirement(text) for text in declared]


def extra_requirements(requirement: Requirement) -> list[Requirement]:
    """What `name[extra]` adds, from the installed distribution's metadata."""
    added = []
    for text in importlib.metadata.requires(requirement.name) or []:
        needed = Requirement(text)
        for extra in requirement.extras:
            marker = needed.marker
            if marker is not None and "extra" in str(marker) and marker.evaluate({"extra": extra}):
                added.append(needed)
    return added


def test_every_lock_line_is_pinned_with_hashes() -> None:
    pins = lock_pins()
    assert len(pins) > 20, f"{LOCK} holds too little to be the image's dependencies"


def test_the_lock_pins_every_dependency_pyproject_names_within_its_range() -> None:
    pins = lock_pins()
    for requirement in image_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in {LOCK}: run `make lock`"
        assert requirement.specifier.contains(pins[name].version, prereleases=True), (
            f"{LOCK} pins {name}=={pins[name].version}, outside {requirement}: run `make lock`"
        )
        linux = {"sys_platform": "linux", "platform_system": "Linux", "python_version": "3.11"}
        marker = pins[name].requirement.marker
        if requirement.marker is None or requirement.marker.evaluate(linux):
            assert marker is None or marker.evaluate(linux), f"{name} is skipped on Linux"
        for needed in extra_requirements(requirement):
            assert canonicalize_name(needed.name) in pins, (
                f"{requirement} needs {needed.name}, not in {LOCK}: run `make lock`"
            )


def test_the_lock_has_what_the_image_relies_on() -> None:
    # The PostgreSQL driver's binary and Redis (extras), the client's httpx and the backend.
    assert {"psycopg-binary", "redis", "httpx", "setuptools"} <= set(lock_pins())
