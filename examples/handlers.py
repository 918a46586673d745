"""Handlers for the command line's worker: a function of a delivery, which
returning acks and raising retries.

    libqueue --url sqlite:q.db --table jobs worker examples.handlers:resize

Run as a program, it calls the handler on one row of a queue of its own.
"""

import sys

import libqueue


def resize(delivery: libqueue.Delivery) -> None:
    """Pretends to resize the image the payload names."""
    image = delivery.payload.decode()
    if not image.endswith(".png"):
        raise ValueError("not an image: %r" % image)  # a retry, later
    sys.stdout.write("resizing %s\n" % image)  # one write: handlers run on several threads
    sys.stdout.flush()


if __name__ == "__main__":
    jobs = libqueue.Table("images", payload="payload", locked_until="locked_until")
    with libqueue.Broker("sqlite:images.db") as broker:
        broker.create_table(jobs)
        broker.publish(jobs, "cat.png")
        with broker.subscribe(jobs) as sub:
            with sub.next(timeout=5) as delivery:
                resize(delivery)
                delivery.ack()
