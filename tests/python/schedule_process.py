"""A broker in a process of its own that takes part in schedules, for the
tests of schedules across processes.

    schedule_process.py URL TABLE_JSON SCHEDULES_JSON

SCHEDULES_JSON is a list of objects, each the keyword arguments of
Broker.schedule (with "name"). Prints "ready" once every schedule is added,
then sleeps until SIGTERM (or SIGKILL), closing the broker on SIGTERM.
"""

import json
import signal
import sys
import time

import libqueue


def main() -> None:
    url, table_json, schedules_json = sys.argv[1:4]
    table = libqueue.Table(**json.loads(table_json))
    # A flag, not an Event: a handler that takes the Event's lock while the
    # main thread holds it in wait() deadlocks.
    stop: list = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    with libqueue.Broker(url) as broker:
        for spec in json.loads(schedules_json):
            spec = dict(spec)
            payload = spec.pop("payload", "").encode()
            broker.schedule(table, spec.pop("name"), payload, **spec)
        print("ready", flush=True)
        while not stop:
            time.sleep(0.05)


if __name__ == "__main__":
    main()
