"""An application's side of the outbox for the integration tests: its job type, the
``Outbox`` writer, and a relay process that can crash itself at a step of a batch.

``python -m tests.integration.outbox_app APP_DB_URL TARGET STEP [DELAY_S]`` runs a relay
that kills itself (SIGKILL, as ``kill -9``) when it first reaches ``STEP``
(``before_send``: rows taken, nothing sent; ``after_ack``: the coordinator committed the
jobs, the rows are not deleted yet; ``during``: ``DELAY_S`` after the call went out,
while the coordinator may or may not have answered). ``STEP`` ``slow`` instead holds each
batch's rows ``DELAY_S`` before sending (a slow relay, whose locked rows others skip),
and on SIGTERM prints how many rows it relayed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import MetaData

from worker_sdk import job
from worker_sdk.outbox import Outbox, OutboxRelay, RelayConfig

WIRE_NAME = "tests.outbox.capture"


@job(WIRE_NAME)
@dataclass
class Capture:
    order_id: str


metadata = MetaData()
outbox = Outbox(metadata=metadata)
FAST = RelayConfig(batch_size=10, poll_interval_s=0.05, backoff_initial_s=0.05, backoff_max_s=0.2)
"""Short waits: the suite stays fast."""


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def observer(step: str, delay_s: float) -> Callable[[str], None]:
    def observe(reached: str) -> None:
        if step == "slow" and reached == "before_send":
            time.sleep(delay_s)
        elif step == "during" and reached == "before_send":
            threading.Timer(delay_s, _die).start()
        elif reached == step:
            _die()

    return observe


def main(database_url: str, target: str, step: str, delay_s: str = "0.002") -> None:
    relay = OutboxRelay(database_url, target, config=FAST, observer=observer(step, float(delay_s)))
    signal.signal(signal.SIGTERM, lambda signum, frame: relay.request_stop())
    print("outbox relay app: started", flush=True)
    relay.run()
    print(f"outbox relay app: relayed {relay.relayed}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
