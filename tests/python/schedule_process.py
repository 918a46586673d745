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
import threading

import libqueue


def main() -> None:
    url, table_json, schedules_json = sys.argv[1:4]
    table = libqueue.Table(**json.loads(table_json))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with libqueue.Broker(url) as broker:
        for spec in json.loads(schedules_json):
            spec = dict(spec)
            payload = spec.pop("payload", "").encode()
            broker.schedule(table, spec.pop("name"), payload, **spec)
        print("ready", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
