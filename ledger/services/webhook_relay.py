"""The webhook relay (docs/webhooks.md): every terminal outcome of an account goes, signed,
to each of its active webhooks at least once; the write path never waits for it. So does each
call parked for a person's approval (`approval.requested`, docs/approvals.md): its decision
event is delivered like an outcome, the body the job's envelope when the relay reads it.

Each pass does two things:
- **Enqueue.** Under a named lock (two relays take turns), read the terminal events after the
  relay's cursor (positions are handed out in commit order, so none is skipped), and record a
  delivery for each webhook of the job's account registered before the outcome: the body is
  the terminal envelope as `GET /v1/jobs/{id}` answers it, the same on every try. The cursor
  moves in the same transaction. Without active webhooks nothing is written.
- **Deliver.** Claim the due deliveries (a claim row per delivery, held for the attempts'
  time: a second relay skips them, and takes them over only if this one dies), never of a
  webhook this relay is still attempting, then attempt each webhook's on a thread of its own,
  waiting for them at most PASS_WAIT_S (one slow receiver never holds a pass; issue 47, M2).
  Each attempt has one deadline (OUTCOMES_WEBHOOK_TIMEOUT_S) over all of it: the SSRF rule again
  (its name resolution bounded too), the secret opened, the Standard
  Webhooks headers (`webhook-id` is the outcome event's id, for receivers to deduplicate),
  a POST through the `Sender` port. Every attempt is recorded with its HTTP status or error
  and duration. A failure is tried again after a backoff doubling from
  OUTCOMES_WEBHOOK_BACKOFF_S, for OUTCOMES_WEBHOOK_RETRY_FOR_S after the first attempt; then
  the delivery is failed and the webhook disabled (a `webhook.disabled` event).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import timedelta

from ledger.clock import now
from ledger.errors import LedgerError, SecretUnavailableError, WebhookSendError, WebhookTargetError
from ledger.job_view import envelope
from ledger.runtime.ledger import Ledger
from ledger.services import webhooks
from ledger.settings import Settings
from ledger.webhook_targets import check_target, resolve_within
from ledger.webhook_view import WebhookView
from ledger.webhooks import (
    Attempt,
    Delivery,
    DeliveryPolicy,
    NewDelivery,
    Sender,
    Settled,
    open_secret,
    signed_headers,
)

log = logging.getLogger(__name__)
ACTOR = "webhook-relay"
LOCK = "webhook-relay"
PAGE = 500  # terminal events read per enqueue step
MAX_PAGES = 20  # per pass: the rest waits for the next one
ROUNDS = 4  # deliveries claimed per pass: this many for each thread
CLAIM_MARGIN_S = 30.0  # a claim outlives the pass's attempts' timeouts by this much
INTERVAL_S = 1.0
PASS_WAIT_S = 1.0  # a pass waits this long for its attempts; slower ones go on without it


def policy_from(settings: Settings) -> DeliveryPolicy:
    return DeliveryPolicy(
        retry_for_s=settings.webhook_retry_for_s,
        backoff_s=settings.webhook_backoff_s,
        backoff_max_s=settings.webhook_backoff_max_s,
        timeout_s=settings.webhook_timeout_s,
        allow_hosts=settings.webhook_allow_hosts,
    )


@dataclass
class RelayPass:
    enqueued: int = 0
    attempted: int = 0
    delivered: int = 0
    disabled: int = 0
    claimed: int = 0


class WebhookRelay:
    def __init__(
        self,
        ledger: Ledger,
        sender: Sender,
        policy: DeliveryPolicy,
        *,
        threads: int = 8,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.ledger = ledger
        self.sender = sender
        self.policy = policy
        self.interval_s = interval_s
        # Whose claim a delivery is: two relays of one process are two claimers too.
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="webhook")
        # The webhooks whose attempts are under way here (a thread each): not claimed again
        # until they are done.
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self.batch = threads * ROUNDS
        # Held while the pass's attempts run, each thread's one after another, all timing out
        # at worst: a claim must not lapse while its attempt is still to come.
        self.claim_s = ROUNDS * policy.timeout_s + CLAIM_MARGIN_S
        self.stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    # --- one pass --------------------------------------------------------------------------

    def relay_once(self) -> RelayPass:
        result = RelayPass()
        with self.ledger.store.reading() as reads:
            if not any(h.active for h in reads.webhooks(None)):
                return result  # no write transaction a second while nobody listens
        for _ in range(MAX_PAGES):
            added, more = self.enqueue()
            result.enqueued += added
            if not more:
                break
        self.deliver(result)
        return result

    def enqueue(self) -> tuple[int, bool]:
        """Record the deliveries of one page of terminal events; (how many, more to read)."""
        moment = now()
        self.ledger.store.sequence()  # what committed before this pass has its ledger place
        with self.ledger.store.transaction() as tx:
            tx.lock(LOCK)
            # The head first, the webhooks second: a webhook registered at or below the head
            # has committed (ledger positions are given in commit order), so it is among
            # those read.
            upto = tx.last_position()
            hooks = [h for h in tx.webhooks(None) if h.active]
            if not hooks:  # the cursor waits: it starts at the oldest registration anyway
                return 0, False
            # Each webhook wants the outcomes after its registration in ledger order; one not
            # yet sequenced comes after the head, so nothing up to the head is for it.
            placed = tx.registered_at(hooks)
            after = {h.webhook_id: placed.get(h.webhook_id, upto) for h in hooks}
            # No webhook wants what was recorded before the oldest registration.
            cursor = max(tx.webhook_cursor() or 0, min(after.values()))
            found = tx.terminal_events_after(cursor, upto, PAGE)
            more = len(found) == PAGE
            views = tx.jobs_by_id(sorted({e.job_id for e in found}))
            by_account: dict[str, list[WebhookView]] = defaultdict(list)
            for hook in hooks:
                by_account[hook.account].append(hook)
            new = []
            for event in found:
                view = views.get(event.job_id)
                if view is None:
                    continue
                body = envelope(view).model_dump_json()
                for hook in by_account.get(view.account, []):
                    if after[hook.webhook_id] < event.position:
                        new.append(
                            NewDelivery(
                                hook.webhook_id,
                                event.event_id,
                                event.job_id,
                                event.position,
                                body,
                                moment,
                            )
                        )
            added = tx.add_deliveries(new)
            tx.set_webhook_cursor(found[-1].position if more else upto)
        return added, more

    def deliver(self, result: RelayPass | None = None) -> RelayPass:
        """Claim what is due and attempt it: a task per webhook, its deliveries one after
        another; wait for the attempts at most PASS_WAIT_S. A slower webhook's task goes on
        without the pass, and the passes after it claim around it (issue 47, M2)."""
        result = result or RelayPass()
        if self.ledger.secrets is None:
            # Nothing could be signed: no attempt is made (none counts toward disabling).
            if not self._warned:
                log.warning("webhook relay: no secrets key (OUTCOMES_SECRETS_KEY): not delivering")
                self._warned = True
            return result
        with self._lock:
            busy = set(self._busy)
        free = self.threads - len(busy)
        if free <= 0:
            return result
        moment = now()
        until = moment + timedelta(seconds=self.claim_s)
        with self.ledger.store.transaction() as tx:
            claimed = tx.claim_deliveries(moment, until, self.name, free * ROUNDS, exclude=busy)
            hooks = {d.webhook_id: tx.webhook(d.webhook_id) for d in claimed}
        result.claimed += len(claimed)
        groups: dict[str, list[Delivery]] = defaultdict(list)
        for delivery in claimed:
            groups[delivery.webhook_id].append(delivery)
        tasks: list[tuple[WebhookView, list[Delivery]]] = []
        let_go: list[Delivery] = []
        for webhook_id, group in groups.items():
            hook = hooks[webhook_id]
            if hook is None or len(tasks) >= free:
                let_go += group
                continue
            # A claim lasts ROUNDS attempts' time: no more than that of one webhook at once.
            tasks.append((hook, group[:ROUNDS]))
            let_go += group[ROUNDS:]
        self._release(let_go)
        with self._lock:
            self._busy.update(hook.webhook_id for hook, _ in tasks)
        futures = [self._pool.submit(self._attempt_all, hook, group) for hook, group in tasks]
        done, _ = wait(futures, timeout=PASS_WAIT_S)
        for future in done:
            counts = future.result()
            result.attempted += counts.attempted
            result.delivered += counts.delivered
            result.disabled += counts.disabled
        return result

    def _release(self, deliveries: list[Delivery]) -> None:
        if deliveries:
            with self.ledger.store.transaction() as tx:
                tx.release_claims([(d.webhook_id, d.event_id) for d in deliveries], self.name)

    def _attempt_all(self, hook: WebhookView, group: list[Delivery]) -> RelayPass:
        """One webhook's claimed deliveries in order, until one fails (the rest are let go
        of, to be tried again on their own schedule)."""
        counts = RelayPass()
        try:
            for index, delivery in enumerate(group):
                delivered, disabled = self._attempt(delivery, hook)
                counts.attempted += 1
                counts.delivered += delivered
                counts.disabled += disabled
                if not delivered:
                    self._release(group[index + 1 :])
                    break
        finally:
            with self._lock:
                self._busy.discard(hook.webhook_id)
        return counts

    def _attempt(self, delivery: Delivery, hook: WebhookView) -> tuple[bool, bool]:
        number = delivery.attempts + 1
        started = now()
        clock = time.perf_counter()
        # One deadline over the whole attempt: the name's resolution, the connection, TLS,
        # sending, and the answer's status line (the sender reads no more than a few KB).
        deadline = time.monotonic() + self.policy.timeout_s
        status: int | None = None
        error: str | None = None
        try:
            # DNS may have moved since the registration: checked again, and the attempt
            # connects to the address checked (pinned), not to a second resolution.
            address = check_target(
                hook.url, self.policy.allow_hosts, resolve_within(self.policy.timeout_s)
            )
            secret = open_secret(hook.secret, hook.webhook_id, self.ledger.secrets)
            headers = signed_headers(secret, delivery.event_id, delivery.body, started)
            left = deadline - time.monotonic()
            if left <= 0:
                raise WebhookSendError(f"no answer within {self.policy.timeout_s:g} s")
            status = self.sender.post(hook.url, delivery.body.encode(), headers, left, address)
            if not 200 <= status < 300:
                error = f"HTTP {status}"
        except WebhookTargetError as exc:
            error = f"refused: {exc}"
        except (WebhookSendError, SecretUnavailableError) as exc:
            error = str(exc) or type(exc).__name__
            if time.monotonic() >= deadline:  # the sender had what was left of it
                error = f"no answer within {self.policy.timeout_s:g} s"
        attempt = Attempt(
            webhook_id=delivery.webhook_id,
            event_id=delivery.event_id,
            attempt=number,
            at=started,
            duration_ms=round((time.perf_counter() - clock) * 1000, 3),
            status=status,
            error=error,
            relay=self.name,
        )
        settled = self.settle(delivery, attempt)
        with self.ledger.store.transaction() as tx:
            kept = tx.finish_attempt(attempt, settled)
        if settled.state != "failed" or not kept:
            return settled.state == "delivered", False
        reason = (
            f"the delivery of event {delivery.event_id} failed for "
            f"{self.policy.retry_for_s:g} s (last: {error})"
        )
        disabled = webhooks.disable(self.ledger, hook.webhook_id, reason, ACTOR)
        if disabled is not None:
            log.warning("webhook %s disabled: %s", hook.webhook_id, reason)
        return False, disabled is not None

    def settle(self, delivery: Delivery, attempt: Attempt) -> Settled:
        """Delivered; or tried again after the backoff; or failed, when the next try would
        fall past the bound after the first attempt."""
        if attempt.delivered:
            return Settled("delivered", None)
        first = delivery.first_attempt_at or attempt.at
        again = attempt.at + timedelta(seconds=self.policy.delay(attempt.attempt))
        if again > first + timedelta(seconds=self.policy.retry_for_s):
            return Settled("failed", None)
        return Settled("pending", again)

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Passes until `stop()`; a pass that found work is followed by the next at once."""
        while not self.stopped.is_set():
            busy = False
            try:
                done = self.relay_once()
                busy = done.claimed > 0 or done.enqueued > 0
            except LedgerError as exc:
                log.warning("webhook relay pass failed: %s: %s; retrying", type(exc).__name__, exc)
            except Exception:  # a bug, not a blip: keep its traceback and the loop
                log.exception("webhook relay pass crashed")
            if not busy:
                self.stopped.wait(self.interval_s)

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name="webhook-relay", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout_s: float = 10.0) -> None:
        self.stopped.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)
