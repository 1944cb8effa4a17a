"""A deliberately broken build, injected from the test side (never a switch in the product):
loaded into the product's processes through OUTCOMES_TOOLS, it replaces the claim's start so
that it no longer re-checks the brake (no brake scopes, no brakes lock). A campaign with brake
faults must then find work started after a pull: the checker can fail."""

from __future__ import annotations

import dataclasses
from typing import Any

from ledger.persistence.appends import JobAppend
from ledger.services import work

_correct_start = work._start


def _start_without_the_brake(*args: Any, **kwargs: Any) -> JobAppend:
    append = _correct_start(*args, **kwargs)
    return dataclasses.replace(append, brake_scopes=(), brakes_lock=False)


work._start = _start_without_the_brake
