"""Object storage tiers for tests: a real S3 API (moto's server) and a plain directory.

:class:`S3Server` runs moto 5's ``ThreadedMotoServer`` in a child Python process (this file run
as a script), on 127.0.0.1 at a port the kernel picked; ``endpoint`` is ``http://127.0.0.1:PORT``
and :meth:`S3Server.options` the object_store keys a client needs (path-style requests to
``endpoint/bucket/key`` are object_store's default with an explicit endpoint). A child rather
than a thread of the test process: a binding that waits on the tier while holding the GIL would
otherwise stall the server too, until the request times out.

:meth:`S3Server.stop` closes the listening socket; moto answers every request with
``Connection: close``, so no client keeps a connection across it: each request is refused (an
object_store client with max_retries 2 fails in about 0.3 s). :meth:`S3Server.start` listens on the
same port again. moto keeps buckets and objects in the memory of the process serving them, not
in the listening server, so they survive a stop and start: buckets and objects are there again
after ``start()`` (``tests/test_tier_fixtures.py`` asserts it). Everything is lost when the child
exits; it exits when the test process closes its stdin, or dies.

:class:`S3Tier` (a fresh bucket) and :class:`FileTier` (a ``file://`` directory) have the same
shape: ``url`` and ``options`` for ``CommitLog(tier_url=..., tier_options=...)``, and ``keys``,
``read``, ``write``, ``delete`` on the objects under the tier's root, for tests that inspect,
corrupt or remove objects by hand.
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}
_names = itertools.count()


class S3Server:
    """moto's S3 server in a child process; its stderr goes to ``log``."""

    def __init__(self, log: Path) -> None:
        self.log = log
        with open(log, "wb") as err:
            self._proc = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.port = int(self._reply())
        self.endpoint = f"http://{HOST}:{self.port}"
        self.running = True

    def _reply(self) -> str:
        line = self._proc.stdout.readline() if self._proc.stdout else ""
        if not line:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the moto server exited ({self._proc.wait()}): {tail}")
        return line.strip()

    def _command(self, word: str) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(word + "\n")
        self._proc.stdin.flush()
        if self._reply() != word:
            raise RuntimeError(f"the moto server did not acknowledge {word!r}")

    def stop(self) -> None:
        """Stops serving (about 0.5 s: werkzeug's poll interval); a no-op when stopped."""
        if self.running:
            self._command("stop")
            self.running = False

    def start(self) -> None:
        """Serves again on the same port; a no-op when running."""
        if not self.running:
            self._command("start")
            self.running = True

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Stopped inside the block, running again after it, even when it raised."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def options(self) -> dict[str, str]:
        """object_store's AmazonS3 config keys for this server."""
        return {"endpoint": self.endpoint, "allow_http": "true", **CREDENTIALS}

    def client(self) -> Any:
        """A boto3 S3 client for this server: one attempt per call, 2 s to connect."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["access_key_id"],
            aws_secret_access_key=CREDENTIALS["secret_access_key"],
            region_name=CREDENTIALS["region"],
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=2),
        )

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()  # the child exits at EOF
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout:
            self._proc.stdout.close()


@dataclass
class S3Tier:
    """A fresh bucket of ``server``; the tier is ``s3://<bucket>/log``."""

    server: S3Server
    kind = "s3"
    prefix = "log"
    bucket: str = field(default_factory=lambda: f"tier-{next(_names)}")
    client: Any = None

    def __post_init__(self) -> None:
        self.client = self.client or self.server.client()
        self.client.create_bucket(Bucket=self.bucket)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def options(self) -> dict[str, str]:
        return self.server.options()

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def keys(self) -> list[str]:
        """Names of the objects under the tier's root, relative to it, sorted."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + "/"
        )
        cut = len(self.prefix) + 1
        return sorted(o["Key"][cut:] for page in pages for o in page.get("Contents", []))

    def read(self, name: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=self._key(name))["Body"].read()

    def write(self, name: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data)

    def delete(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(name))

    def drop(self) -> None:
        """Deletes every object and the bucket (moto holds them in memory)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
        for page in pages:
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})
        self.client.delete_bucket(Bucket=self.bucket)


@dataclass
class FileTier:
    """The directory ``path`` (created) as a ``file://`` tier."""

    path: Path
    kind = "file"
    options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return self.path.as_uri()

    def keys(self) -> list[str]:
        return sorted(
            p.relative_to(self.path).as_posix() for p in self.path.rglob("*") if p.is_file()
        )

    def read(self, name: str) -> bytes:
        return (self.path / name).read_bytes()

    def write(self, name: str, data: bytes) -> None:
        (self.path / name).parent.mkdir(parents=True, exist_ok=True)
        (self.path / name).write_bytes(data)

    def delete(self, name: str) -> None:
        (self.path / name).unlink()


def _serve() -> None:
    """The child: prints the port, then obeys "stop" and "start" lines on stdin, echoing each."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(HOST, 0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    print(port, flush=True)
    for line in sys.stdin:
        word = line.strip()
        if word == "stop":
            server.stop()
        elif word == "start":
            server = ThreadedMotoServer(HOST, port, verbose=False)
            server.start()
        print(word, flush=True)


if __name__ == "__main__":
    _serve()
