"""Bodies given to append and append_batch: every bytes-like kind stored as its bytes; a body that
changes while it is appended never makes a record that fails its own check; bad bodies refused
before anything is copied or written, with the reason."""

from __future__ import annotations

import array
import resource
import threading

import pytest

from rmqlog import MessageTooLargeError


def bytes_likes() -> list[tuple[str, object, bytes]]:
    """(name, object, the bytes it holds): every kind of exporter a body may come as."""
    strided = memoryview(b"a-b-c-d")[::2]  # not contiguous: copied, not read in place
    ints = array.array("i", [1, 2, 3])
    kinds = [
        ("bytes", b"plain", b"plain"),
        ("bytearray", bytearray(b"mutable"), b"mutable"),
        ("memoryview", memoryview(b"viewed"), b"viewed"),
        ("memoryview slice", memoryview(b"0123456789")[2:5], b"234"),
        ("strided memoryview", strided, b"abcd"),
        ("array of int", ints, ints.tobytes()),
        ("empty bytearray", bytearray(), b""),
        ("empty memoryview", memoryview(b""), b""),
    ]
    try:
        import numpy as np
    except ImportError:
        return kinds
    matrix = np.arange(12, dtype=np.uint16).reshape(3, 4)
    kinds.append(("numpy 2-d", matrix, matrix.tobytes()))
    kinds.append(("numpy column (strided)", matrix[:, 1], matrix[:, 1].tobytes()))
    return kinds


def test_every_bytes_like_body_is_stored_as_its_bytes(make_log):
    log = make_log()
    kinds = bytes_likes()
    singles = [log.append(obj) for _, obj, _ in kinds]
    batch = log.append_batch([obj for _, obj, _ in kinds])
    as_tuple = log.append_batch(tuple(obj for _, obj, _ in kinds))
    as_iter = log.append_batch(obj for _, obj, _ in kinds)
    for offsets in (singles, batch, as_tuple, as_iter):
        got = [bytes(log.read(o)) for o in offsets]
        assert got == [want for _, _, want in kinds], [name for name, *_ in kinds]


def test_a_bytearray_is_free_again_after_an_append(make_log):
    # The append reads it in place; once done, the export is released (else this raises
    # BufferError: "Existing exports of data: object cannot be re-sized").
    log = make_log()
    body = bytearray(b"grow me")
    log.append(body)
    log.append_batch([body, body])
    body.extend(b" and more")
    end = log.max_offset
    with pytest.raises(TypeError, match=r"bodies\[1\] must be bytes-like .*got str"):
        log.append_batch([body, "text", body])
    body.extend(b"!")
    assert bytes(body) == b"grow me and more!"
    assert log.max_offset == end  # the refused batch wrote nothing


def test_a_body_rewritten_while_appended_never_makes_a_bad_record(make_log):
    # Another thread rewrites the bytearray in place (same length: allowed while it is exported)
    # as fast as it can. A body read in place with the GIL released gave records whose CRC did
    # not match their stored bytes (1-17 in 50), and recovery cuts the log at the first one.
    # Copied with the GIL held, each record holds one whole fill and checks.
    log = make_log(segment_size=64 << 20)
    body = bytearray(1 << 20)
    fills = [bytes([i]) * len(body) for i in range(2)]
    stop = threading.Event()

    def rewrite():
        i = 0
        while not stop.is_set():
            body[:] = fills[i & 1]
            i += 1

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        offsets = [log.append(body) for _ in range(30)]
        offsets += log.append_batch([body, memoryview(body), body])
    finally:
        stop.set()
        writer.join()
    assert log.verify() == []
    assert all(bytes(log.read(o)) in fills for o in offsets)


def test_a_huge_view_over_max_message_size_is_refused_before_any_copy(make_log):
    np = pytest.importorskip("numpy")
    log = make_log(max_message_size=1024)
    # 256 MiB of logical bytes over one real byte: copying it first would cost 256 MiB (twice).
    huge = np.broadcast_to(np.zeros(1, np.uint8), (256 << 20,))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(MessageTooLargeError, match=r"268435456 bytes .* max_message_size is 1024"):
        log.append(huge)
    with pytest.raises(MessageTooLargeError, match=r"\(bodies\[1\]\)"):
        log.append_batch([b"ok", huge])
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grew_kib < 64 * 1024, f"peak RSS grew by {grew_kib} KiB"
    assert log.max_offset == 0


def test_a_batch_names_the_body_that_is_too_large(make_log):
    log = make_log(max_message_size=1024)
    for bad in (b"x" * 2000, bytearray(2000)):
        with pytest.raises(MessageTooLargeError, match=r"2000 bytes .*\(bodies\[2\]\)"):
            log.append_batch([b"a", b"b", bad, b"c"])
    assert log.max_offset == 0


def test_a_released_view_or_closed_mmap_is_refused_with_its_reason(make_log):
    import mmap

    log = make_log()
    view = memoryview(b"gone")
    view.release()
    with pytest.raises(TypeError, match=r"body must be bytes-like .*got memoryview.*released"):
        log.append(view)
    m = mmap.mmap(-1, 4096)
    m.close()
    with pytest.raises(TypeError, match=r"bodies\[0\] must be bytes-like .*got mmap.*closed") as e:
        log.append_batch([m])
    assert isinstance(e.value.__cause__, ValueError)
    assert log.max_offset == 0


@pytest.mark.parametrize(
    "one",
    [bytearray(b"abc"), memoryview(b"abc"), array.array("B", b"abc")],
    ids=["bytearray", "memoryview", "array"],
)
def test_append_batch_refuses_one_bytes_like_body(make_log, one):
    # Iterating it would append its items (ints, or 1-byte records): never what was meant.
    log = make_log()
    with pytest.raises(
        TypeError, match=r"append_batch takes an iterable of bodies.*use append\(\)"
    ):
        log.append_batch(one)
    assert log.max_offset == 0


def test_a_buffer_of_object_references_is_refused(make_log):
    np = pytest.importorskip("numpy")
    log = make_log()
    refs = np.array([b"secret", b"data"], dtype=object)
    with pytest.raises(ValueError, match=r"Python object references \(format \"O\"\)"):
        log.append(refs)
    with pytest.raises(ValueError, match=r"bodies\[1\] is a buffer of Python object references"):
        log.append_batch([b"fine", refs])
    assert log.max_offset == 0
    # Rows of a plain array are bodies, as list(rows).
    rows = np.arange(12, dtype=np.uint8).reshape(3, 4)
    offsets = log.append_batch(list(rows))
    assert [bytes(log.read(o)) for o in offsets] == [r.tobytes() for r in rows]
