"""The S3 tier over HTTPS (rustls with ring, reqwest's TLS provider installed by the tier): moto's
server behind a TLS front (tests/_tls_proxy.py) with a certificate for 127.0.0.1 from a test CA.
The CA trusted through ``SSL_CERT_FILE`` (read by the system verifier), segments go up and read
back over TLS; not trusted, uploads fail with an error that names the certificate; with no CA
certificate at all, an open is a TierError that says where they come from. Nothing written is
lost, nothing panics."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _tier import SEGMENT, append_records, check_reads, objects, remote_only, status_when

from rmqlog import CommitLog, ConfigurationError, TierError

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A test CA and a certificate it signed for IP 127.0.0.1: (ca.pem, cert.pem, key.pem)."""
    d = tmp_path_factory.mktemp("tls")
    ca, ca_key, cert, key = d / "ca.pem", d / "ca.key", d / "cert.pem", d / "key.pem"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
    for args in (
        ["-subj", "/CN=rmqlog test CA", "-keyout", ca_key, "-out", ca],
        ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-addext", "basicConstraints=critical,CA:FALSE", "-CA", ca, "-CAkey", ca_key,
         "-keyout", key, "-out", cert],
    ):  # fmt: skip
        subprocess.run(["openssl", "req", "-x509", *ec, *map(str, args)], check=True,
                       capture_output=True)  # fmt: skip
    return ca, cert, key


@pytest.fixture
def https_bucket(s3_bucket, certificate):
    """``s3_bucket`` with ``options`` for its endpoint behind the TLS front (no ``allow_http``)."""
    _, cert, key = certificate
    port = s3_bucket.server.port
    proxy = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_tls_proxy.py")), cert, key, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        tls_port = int(proxy.stdout.readline())
        options = dict(s3_bucket.options, endpoint=f"https://127.0.0.1:{tls_port}")
        del options["allow_http"]
        yield s3_bucket, options
    finally:
        proxy.stdin.close()
        proxy.wait(timeout=10)


def test_segments_go_up_and_read_back_over_tls(https_bucket, certificate, tmp_path, monkeypatch):
    tier, options = https_bucket
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    with CommitLog(
        str(tmp_path / "log"),
        segment_size=SEGMENT,
        local_retention_bytes=SEGMENT,
        tier_url=tier.url,
        tier_options=options,
    ) as log:
        recs = append_records(log, 300)
        remote_only(log)
        assert len(objects(tier)) >= 3
        check_reads(log, recs)  # the sealed segments from the tier, over TLS


def test_an_untrusted_certificate_fails_uploads_and_keeps_every_record(
    https_bucket, tmp_path, monkeypatch
):
    tier, options = https_bucket
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # the system's roots only
    with CommitLog(
        str(tmp_path / "log"),
        segment_size=SEGMENT,
        tier_url=tier.url,
        tier_options=options,
    ) as log:
        recs = append_records(log, 300)
        st = status_when(log, lambda s: s["upload_errors"] > 0, "a failed upload")
        assert "certificate" in st["last_error"].lower(), st
        assert objects(tier) == []
        check_reads(log, recs)  # every record local still


def test_no_tls_roots_is_a_tier_error_that_says_where_roots_come_from(
    https_bucket, certificate, tmp_path, monkeypatch
):
    """SSL_CERT_FILE naming no file: the client has no CA certificate to check against, so no S3
    client can be built. A store's open says so as a TierError (not as options that are wrong,
    which they are not), and the store is untouched: with the roots back it reads everything."""
    tier, options = https_bucket
    path = str(tmp_path / "log")
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    with CommitLog(path, segment_size=SEGMENT, tier_url=tier.url, tier_options=options) as log:
        recs = append_records(log, 100)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    for kwargs in ({}, {"read_only": True}):
        with pytest.raises(TierError) as info:
            CommitLog(path, tier_url=tier.url, tier_options=options, **kwargs)
        assert not isinstance(info.value, ConfigurationError)
        message = str(info.value)
        assert "No CA certificates" in message and "SSL_CERT_FILE" in message, message
        assert "recorded settings" not in message, message
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    with CommitLog(path, tier_url=tier.url, tier_options=options) as log:
        check_reads(log, recs)
