"""`outcomes tools new NAME`: a working tool module and its pytest test, written with the tool
authors' API (`ledger.tools`, `ledger.outcomes`), for a new user to make their own.

The module is `NAME` with its dots as underscores (`billing.refund` is `billing_refund.py`), so
`OUTCOMES_TOOLS=billing_refund` loads it once its folder is on the Python path."""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import ConfigurationError
from ledger.tools import TOOL_NAME


@dataclass(frozen=True)
class Scaffold:
    """What `outcomes tools new` writes for one tool name."""

    tool: str
    module: str  # the OUTCOMES_TOOLS entry
    function: str
    args_class: str

    @property
    def module_file(self) -> str:
        return f"{self.module}.py"

    @property
    def test_file(self) -> str:
        return f"test_{self.module}.py"

    @property
    def dependency(self) -> str:
        return self.tool.split(".")[0]

    def module_text(self) -> str:
        return _MODULE.format(
            tool=self.tool,
            module=self.module,
            function=self.function,
            args_class=self.args_class,
            dependency=self.dependency,
        )

    def test_text(self) -> str:
        return _TEST.format(
            tool=self.tool,
            module=self.module,
            function=self.function,
            args_class=self.args_class,
        )


def scaffold_for(name: str) -> Scaffold:
    """The names a tool called `name` gets; a name the registry would refuse is refused here."""
    if not TOOL_NAME.fullmatch(name):
        raise ConfigurationError(
            f"{name!r} is not a tool name: lower-case words joined by dots, each starting "
            "with a letter (e.g. billing.refund)"
        )
    segments = name.split(".")
    function = segments[-1]
    if keyword.iskeyword(function):
        function += "_"
    args_class = "".join(part.capitalize() for part in segments[-1].split("_") if part) + "Args"
    return Scaffold(
        tool=name, module=name.replace(".", "_"), function=function, args_class=args_class
    )


def write_scaffold(scaffold: Scaffold, folder: Path) -> list[Path]:
    """Write the module and its test into `folder`; refuse (writing nothing) if either exists."""
    if not folder.is_dir():
        raise ConfigurationError(f"no folder {folder}")
    files = [
        (folder / scaffold.module_file, scaffold.module_text()),
        (folder / scaffold.test_file, scaffold.test_text()),
    ]
    taken = [str(path) for path, _ in files if path.exists()]
    if taken:
        raise ConfigurationError(
            f"{' and '.join(taken)} already exist{'s' if len(taken) == 1 else ''}; nothing "
            f"written (remove {'it' if len(taken) == 1 else 'them'} or choose another --dir)"
        )
    written = []
    for path, text in files:
        # "x": never overwrite, even a file that appeared since the check above.
        with path.open("x", encoding="utf-8") as out:
            out.write(text)
        written.append(path)
    return written


_MODULE = '''\
"""The {tool} tool (written by `outcomes tools new`; make it yours).

Load it with OUTCOMES_TOOLS={module} and this folder on the Python path (PYTHONPATH=.).
A tool returns Succeeded, Declined or Partial, or raises ToolFailure with a tool code:
INPUT_MISSING, REFERENCE_UNRESOLVED, CAPABILITY_UNAVAILABLE, ACCESS_DENIED, SOURCE_UNRELIABLE
(or QUOTA_EXCEEDED). Any other exception is recorded as TOOL_CRASHED.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ledger.codes import Code
from ledger.outcomes import Declined, Succeeded, ToolFailure
from ledger.tools import ToolContext, tool

# A stand-in for the system this tool talks to: replace it with the real call.
RECORDS = {{"R-1": {{"state": "open"}}, "R-2": {{"state": "done"}}}}


class {args_class}(BaseModel):
    """The arguments agents send (their JSON Schema is what GET /v1/tools shows)."""

    ref: str = Field(min_length=1, description="the record to act on, e.g. R-1")


# spends=True if a call costs money or quota: it is then never retried.
@tool("{tool}", spends=False, timeout_s=30, max_attempts=3)
def {function}(args: {args_class}, ctx: ToolContext) -> Succeeded | Declined:
    """Act on one record by its reference."""  # what agents read in GET /v1/tools
    record = RECORDS.get(args.ref)
    if record is None:
        raise ToolFailure(
            code=Code.REFERENCE_UNRESOLVED,
            dependency="{dependency}",
            operation="find the record",
            fix=f"pass one of: {{', '.join(sorted(RECORDS))}}",
            message=f"There is no record {{args.ref!r}}.",
        )
    if record["state"] == "done":
        return Declined(reason=f"{{args.ref}} is already done; nothing to do.")
    # ctx.idempotency_key is the same on every attempt: pass it on so a retry is not done twice.
    return Succeeded(result={{"ref": args.ref, "state": record["state"], "attempt": ctx.attempt}})
'''

_TEST = '''\
"""Tests of the {tool} tool (written by `outcomes tools new`); from this folder:
python -m pytest test_{module}.py"""

from __future__ import annotations

import pytest

from ledger.codes import Code
from ledger.outcomes import Declined, Succeeded, ToolFailure
from ledger.tools import ToolContext, get_tool
from {module} import {args_class}, {function}


def context() -> ToolContext:
    """What a worker hands the tool, for a call outside any worker."""
    return ToolContext(
        job_id="test-job",
        attempt=1,
        idempotency_key="test-key",
        heartbeat=lambda: None,
        checkpoint=lambda: None,
    )


def test_it_is_registered_under_its_name() -> None:
    spec = get_tool("{tool}")
    assert spec is not None and spec.args_model is {args_class}


def test_a_known_record_succeeds() -> None:
    outcome = {function}({args_class}(ref="R-1"), context())
    assert outcome == Succeeded(result={{"ref": "R-1", "state": "open", "attempt": 1}})


def test_a_record_already_done_is_declined() -> None:
    assert isinstance({function}({args_class}(ref="R-2"), context()), Declined)


def test_an_unknown_record_is_a_typed_failure() -> None:
    with pytest.raises(ToolFailure) as raised:
        {function}({args_class}(ref="R-404"), context())
    assert raised.value.code is Code.REFERENCE_UNRESOLVED
'''
