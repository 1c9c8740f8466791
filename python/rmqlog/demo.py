"""The README's main job: write records across three directories, read them back zero-copy, and
show where each segment went.

    python -m rmqlog.demo [--dir DIR] [--records N] [--size BYTES]

The three directories are on one filesystem here, which the demo says in one line of its own: a
real deployment gives each directory its own disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import zlib

from rmqlog import CommitLog


def run(root: str, records: int, size: int, out=sys.stdout) -> None:
    dirs = [os.path.join(root, f"disk{i}", "store") for i in range(3)]
    segment_size = 8 << 20
    payload = bytes(range(256)) * (size // 256 + 2)
    bodies = [payload[i % 256 : i % 256 + size] for i in range(256)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    print(f"rmqlog demo: {records:,} records of {size} B into {root}", file=out)
    if len({os.stat(d).st_dev for d in dirs}) < len(dirs):
        print(
            "  the three directories share one disk here, as a demonstration "
            "(a real deployment gives each its own)",
            file=out,
        )

    with CommitLog(os.pathsep.join(dirs), segment_size=segment_size, flush="async") as log:
        t0 = time.perf_counter()
        batch = 1000
        crc_written = 0
        for start in range(0, records, batch):
            chunk = [bodies[i % 256] for i in range(start, min(start + batch, records))]
            log.append_batch(chunk)
            for body in chunk:
                crc_written = zlib.crc32(body, crc_written)
        log.flush()
        t_write = time.perf_counter() - t0

        t0 = time.perf_counter()
        crc_read = 0
        count = 0
        for _offset, body in log.scan():  # memoryviews over the mapped segments: no copy
            crc_read = zlib.crc32(body, crc_read)
            count += 1
        t_read = time.perf_counter() - t0

        mib = records * size / (1 << 20)
        print(
            f"  append_batch + flush: {t_write:.3f} s  {records / t_write:,.0f} rec/s  "
            f"{mib / t_write:,.1f} MiB/s",
            file=out,
        )
        print(
            f"  scan (zero-copy):     {t_read:.3f} s  {count / t_read:,.0f} rec/s  "
            f"{mib / t_read:,.1f} MiB/s",
            file=out,
        )
        ok = count == records and crc_read == crc_written
        print(f"  read back {count:,} records, checksums {'match' if ok else 'DIFFER'}", file=out)
        print(f"  offsets [{log.min_offset}, {log.max_offset}), segments:", file=out)
        for seg in log.segments():
            where = os.path.relpath(os.path.dirname(seg.path), root)
            print(
                f"    {os.path.basename(seg.path)}  {where:<12} {seg.written:>10,} / "
                f"{seg.size:,} B",
                file=out,
            )
        if not ok:
            raise SystemExit("read-back mismatch")


def next_steps(store_root: str | None, out=sys.stdout) -> None:
    """Where the ``rmqlog`` command is, how to put it on PATH, and what to try with it."""
    script = os.path.join(os.path.dirname(sys.executable), "rmqlog")
    found = shutil.which("rmqlog")
    if found and os.path.exists(script) and os.path.samefile(found, script):
        first = "next: rmqlog --help"
    elif os.path.exists(os.path.join(sys.prefix, "bin", "activate")):
        venv = _short(sys.prefix)
        first = f"next: source {venv}/bin/activate  (puts rmqlog on PATH; or run {venv}/bin/rmqlog)"
    elif os.path.exists(script):
        first = f"next: {_short(script)} --help  (rmqlog is not on PATH)"
    else:
        first = "next: python -m rmqlog --help"
    print(first, file=out)
    if store_root is None:
        keep = os.path.join(tempfile.gettempdir(), "rmqlog-demo")
        second = f"rmqlog demo --dir {keep} && rmqlog stat {os.path.join(keep, 'disk0', 'store')}"
    else:
        second = f"rmqlog stat {os.path.join(store_root, 'disk0', 'store')}"
    print(f"      {second}", file=out)


def _short(path: str) -> str:
    """``path`` relative to the current directory when it is below it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rmqlog demo", description=__doc__.splitlines()[0])
    p.add_argument("--dir", help="root for the three directories (default: a temporary one)")
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--size", type=int, default=256, help="body size in bytes")
    args = p.parse_args(argv)
    if args.dir:
        run(args.dir, args.records, args.size)
    else:
        root = tempfile.mkdtemp(prefix="rmqlog-demo-")
        try:
            run(root, args.records, args.size)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    next_steps(args.dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
