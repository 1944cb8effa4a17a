FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY pyproject.toml README.md ./
COPY ledger ledger
COPY api api
COPY workers workers
COPY cli cli
COPY examples examples
RUN pip install --no-cache-dir .
RUN useradd --create-home outcomes
USER outcomes
CMD ["outcomes", "--help"]
