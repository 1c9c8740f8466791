"""The child processes of tests/test_consumer_sharing.py: opens of a named consumer in processes of
their own, so that they can be SIGKILLed, hold names across processes and lose the power.

    python tests/_consumer_child.py MODE ARGS_JSON

Every mode opens ``CommitLog(args["dirs"], **args.get("log", {"read_only": True}))``.

``share``: one of several opens sharing ``args["name"]``. Prints ``ready`` once the name is open,
waits for a line on stdin, then polls (``max_records`` at random between ``args["lo"]`` and
``args["hi"]``), and for every poll: appends the offsets it got to its record file
``args["out"]`` (native 8-byte integers, one ``os.write``: in the page cache, so in the file even
if the process is killed next), commits, and appends the position ``commit()`` returned with bit
63 set (:data:`COMMIT`). A commit mark in the file therefore means that commit returned, and every
offset before it was processed before it was made. Ends (``done REFUSED``) once a commit returns
``args["end"]``; REFUSED counts the polls refused for the name's limit of uncommitted polls
(retried 1 ms later), which this open, committing each poll, should never see.

``steps``: one open of ``args["name"]`` (``exclusive`` as given; prints ``start POSITION``) that,
for each line on stdin, polls a random number of records and commits at once: ``polled END`` once
the poll returned (END: the offset after its last record, what the commit that follows may make
the position), ``committed POS`` once the commit returned, each line flushed before it goes on;
``idle`` when there was nothing to poll.

``driver``: opens of consumer names driven by the parent, one JSON command a line on stdin, one
JSON reply a line on stdout: ``{"ok": true, ...}`` or ``{"ok": false, "error": TYPE, "message":
TEXT}`` for an rmqlog error. Commands (``name`` picks the open; one open per name):
``open`` (``exclusive``, ``redelivery_timeout``, ``start``, ``on_loss``, ``max_deliveries``,
``dead_letter``) replies ``position`` and ``committed``; ``poll`` (``max``, ``timeout``) replies
``offsets``, ``bodies`` (latin-1) and ``deliveries``; ``commit`` (``offset``) and ``ack``
(``offsets``) reply ``committed``; ``nack`` (``offsets``, ``delay``), ``in_progress``
(``offsets``); ``seek`` (``to``) replies ``position``; ``close``. A ``ClaimLostError``'s reply
has its ``lost`` and ``committed`` too.
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import time

from rmqlog import CommitLog, CommitLogError

COMMIT = 1 << 63  # the mark of a commit in a ``share`` record file; offsets are below it


def body(i: int) -> bytes:
    """Record ``i``: 16 to 32 bytes, recognisable (the parent appends these)."""
    head = b"r%d:" % i
    size = 16 + i % 17
    return (head * (size // len(head) + 1))[:size]


def open_log(args: dict) -> CommitLog:
    return CommitLog(args["dirs"], **args.get("log", {"read_only": True}))


def share(args: dict) -> None:
    log = open_log(args)
    c = log.consumer(args["name"], redelivery_timeout=args.get("redelivery_timeout", 30.0))
    rng = random.Random(args["seed"])
    out = os.open(args["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    end = args["end"]
    print("ready", flush=True)
    sys.stdin.readline()
    committed = -1
    refused = 0  # polls refused as past the name's limit of uncommitted polls
    while committed != end:
        try:
            recs = c.poll(rng.randint(args["lo"], args["hi"]), timeout=0.05)
        except CommitLogError as e:
            if "polls not committed" not in str(e):
                raise
            # This open has none: the claims other opens committed behind one still open
            # count. Said at the end; the test goes on to check everything else.
            refused += 1
            time.sleep(0.001)
            continue
        if recs:
            for off, view in recs:  # "processing": each body must be one this test appended
                if not 16 <= len(view) <= 32 or view[0] != ord("r"):
                    raise AssertionError(f"record at {off} is {bytes(view)!r}")
            os.write(out, struct.pack(f"={len(recs)}Q", *(off for off, _ in recs)))
        committed = c.commit()
        if recs:
            os.write(out, struct.pack("=Q", COMMIT | committed))
        if committed > end:
            raise AssertionError(f"committed {committed}, past the log's end {end}")
    c.close()
    log.close()
    print("done", refused, flush=True)


def steps(args: dict) -> None:
    log = open_log(args)
    c = log.consumer(args["name"], exclusive=args["exclusive"])
    rng = random.Random(args["seed"])
    out = sys.stdout
    out.write(f"start {c.position}\n")
    out.flush()
    for _ in sys.stdin:
        recs = c.poll(rng.randint(1, 40), timeout=0)
        if not recs:
            out.write("idle\n")
            out.flush()
            continue
        end = log.read_record(recs[-1][0]).next_offset
        del recs
        out.write(f"polled {end}\n")
        out.flush()
        pos = c.commit()  # at once: the parent may cut the power meanwhile
        out.write(f"committed {pos}\n")
        out.flush()


def driver(args: dict) -> None:
    log = open_log(args)
    opens: dict = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        op, name = cmd["op"], cmd.get("name")
        try:
            if op == "open":
                c = log.consumer(
                    name,
                    start=cmd.get("start", "earliest"),
                    on_loss=cmd.get("on_loss", "raise"),
                    exclusive=cmd.get("exclusive", False),
                    redelivery_timeout=cmd.get("redelivery_timeout", 30.0),
                    max_deliveries=cmd.get("max_deliveries"),
                    dead_letter=cmd.get("dead_letter"),
                )
                opens[name] = c
                reply = {"position": c.position, "committed": c.committed}
            elif op == "poll":
                recs = opens[name].poll(
                    cmd.get("max", 500), timeout=cmd.get("timeout", 0), with_deliveries=True
                )
                reply = {
                    "offsets": [off for off, _, _ in recs],
                    "bodies": [bytes(v).decode("latin-1") for _, v, _ in recs],
                    "deliveries": [d for _, _, d in recs],
                    "at": time.time(),
                }
            elif op == "commit":
                reply = {"committed": opens[name].commit(cmd.get("offset"))}
            elif op == "ack":
                reply = {"committed": opens[name].ack(cmd["offsets"])}
            elif op == "nack":
                opens[name].nack(cmd.get("offsets"), cmd.get("delay", 0))
                reply = {}
            elif op == "in_progress":
                opens[name].in_progress(cmd.get("offsets"))
                reply = {}
            elif op == "seek":
                reply = {"position": opens[name].seek(cmd["to"])}
            elif op == "close":
                opens.pop(name).close()
                reply = {}
            else:
                raise ValueError(f"unknown command {op!r}")
            reply["ok"] = True
        except (CommitLogError, ValueError) as e:
            reply = {"ok": False, "error": type(e).__name__, "message": str(e)}
            if hasattr(e, "lost"):
                reply.update(lost=e.lost, committed=e.committed)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    {"share": share, "steps": steps, "driver": driver}[sys.argv[1]](json.loads(sys.argv[2]))
