"""What `audit verify` says of the order rows themselves (Postgres, where the sequencer gives
ledger positions after commit): an event the sequencer passed without giving it a position, an
order row whose event is gone, an event given two positions. The chain's own check sees only
the events that are in order; these are the ones it cannot see."""

from __future__ import annotations

from ledger.chain import Problem, ProblemKind
from ledger.queries import OrderProblems


def order_findings(found: OrderProblems) -> list[Problem]:
    return [
        *(
            Problem(
                ProblemKind.UNSEQUENCED,
                "",
                0,
                None,
                f"the event written at {written} has committed and the sequencer has passed "
                "it, yet it has no ledger position (it was slipped in past the sequencer, or "
                "its order row was deleted)",
            )
            for written in found.unsequenced
        ),
        *(
            Problem(
                ProblemKind.ORDER_ORPHANED,
                "",
                0,
                position,
                f"position {position} names an event that is no longer there (it was deleted)",
            )
            for position in found.orphaned
        ),
        *(
            Problem(
                ProblemKind.ORDER_DUPLICATED,
                "",
                0,
                None,
                f"the event written at {written} holds more than one ledger position",
            )
            for written in found.duplicated
        ),
    ]
