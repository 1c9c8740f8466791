"""A writer with a remote tier, for the kill tests: appends records without end, reporting each
acknowledged one on stdout as "index offset size" as soon as `append` returns; about 4 MB/s.

    python _tier_writer.py DIRS SEGMENT_SIZE LOCAL_RETENTION_BYTES SEED TIER_URL [OPTIONS_JSON]

DIRS is joined with os.pathsep. Record `index` is `body(index, size)` of tests/_writer.py, at
least 8 bytes long (its index, recomputable by the checker).
"""

import json
import random
import sys
import time

from _writer import body

from rmqlog import CommitLog


def main() -> None:
    dirs, segment_size, local_bytes, seed, url = sys.argv[1:6]
    options = json.loads(sys.argv[6]) if len(sys.argv) > 6 else None
    log = CommitLog(
        dirs,
        segment_size=int(segment_size),
        max_message_size=64 * 1024,
        tier_url=url,
        tier_options=options,
        local_retention_bytes=int(local_bytes),
    )
    rng = random.Random(int(seed))
    out = sys.stdout
    i = int(seed) * 1_000_000
    while True:
        size = rng.randint(8, 8 * 1024)
        off = log.append(body(i, size))
        out.write(f"{i} {off} {size}\n")
        out.flush()
        i += 1
        time.sleep(0.001)  # about 4 MB/s: the tier keeps up, one upload after another


if __name__ == "__main__":
    main()
