# One image for every process of docs/deploy.md (migrate, serve, worker, reconcile), run as a
# user who is not root. tests/house/test_dockerfile.py lays out this file's COPYs from the build
# context (.dockerignore applied) and installs the project from them, as `docker build` would.
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# The dependencies first, in their own layer (rebuilt only when the lock changes): exact
# versions, every file checked against its hash. `make lock` writes requirements.lock from
# pyproject.toml: the dependencies, the client's extra and the build backend.
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock

# Then the project, alone: every package directory pyproject.toml names, with its data (the
# ledger's migrations, the console's templates and static files, the client's py.typed).
# --no-deps: the lock brought everything; --no-build-isolation: with the lock's setuptools,
# nothing is downloaded without a hash. pip check proves the lock satisfies the project.
COPY pyproject.toml README.md ./
COPY ledger ledger
COPY api api
COPY workers workers
COPY cli cli
COPY observability observability
COPY mcp_server mcp_server
COPY console console
COPY examples examples
COPY migrations migrations
COPY client/outcomes_client client/outcomes_client
RUN pip install --no-deps --no-build-isolation . && pip check

RUN useradd --create-home outcomes
USER outcomes
# Only now: the installs above compiled every module once, where this user cannot write.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# A folder the user may write: the embedded defaults keep ./.outcomes/ there.
WORKDIR /home/outcomes
CMD ["outcomes", "--help"]
