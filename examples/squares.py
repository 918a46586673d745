"""Push mode: four C threads call the handler, each holding the GIL while it
runs; returning acks, an exception retries (and is logged)."""

import threading
import libqueue

jobs = libqueue.Table("numbers", payload="payload", attempt="attempt",
                      locked_until="locked_until", retry_after="retry_after")
squares, all_done = [], threading.Event()
with libqueue.Broker("sqlite:numbers.db") as broker:
    broker.create_table(jobs)
    broker.publish_many(jobs, [str(n) for n in range(1000)])  # one transaction
    with broker.subscribe(jobs, workers=4) as sub:
        @sub.run                          # four C threads call it, each with the GIL
        def square(delivery):             # returning acks; an exception retries (and is logged)
            squares.append(int(delivery.payload) ** 2)
            if len(squares) >= 1000:
                all_done.set()
        all_done.wait(timeout=60)
print(len(squares), "squares, summing to", sum(squares))
