"""A writer process for the crash tests: appends deterministic records, reporting each offset on
stdout as soon as `append` returns, until it is killed.

    python _writer.py DIRS FLUSH SEGMENT_SIZE MAX_SIZE SEED [COUNT]

DIRS is joined with os.pathsep. Each line is "index offset size" (and "flushed OFFSET" lines in
sync mode); "done" when COUNT records were written, then the process waits to be killed.
"""

import random
import sys
import time

from rmqlog import CommitLog


def body(index: int, size: int) -> bytes:
    """The body of record `index`: recomputable by the checker."""
    unit = index.to_bytes(8, "little")
    return (unit * (size // 8 + 1))[:size]


def sizes(seed: int, max_size: int):
    rng = random.Random(seed)
    while True:
        roll = rng.random()
        if roll < 0.05:
            yield 0
        elif roll < 0.10:
            yield rng.randint(max_size - 64, max_size)
        elif roll < 0.40:
            yield rng.randint(1, 4096)
        else:
            yield rng.randint(1, 200)


def main() -> None:
    dirs, flush, segment_size, max_size, seed = sys.argv[1:6]
    count = int(sys.argv[6]) if len(sys.argv) > 6 else None
    log = CommitLog(
        dirs,
        flush=flush,
        segment_size=int(segment_size),
        max_message_size=int(max_size),
        flush_interval_ms=5,
    )
    start = int(seed) * 1_000_000
    out = sys.stdout
    for n, size in enumerate(sizes(int(seed), int(max_size))):
        if count is not None and n >= count:
            break
        i = start + n
        off = log.append(body(i, size))
        out.write(f"{i} {off} {size}\n")
        if flush == "sync":
            out.write(f"flushed {log.flushed_offset}\n")
        out.flush()
    out.write("done\n")
    out.flush()
    time.sleep(3600)


if __name__ == "__main__":
    main()
