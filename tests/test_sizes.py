"""Sizes as text (rmqlog._sizes): the one syntax of the CLI's size options and the Spark options."""

import pytest

from rmqlog._sizes import SIZE_FORMS, format_size, parse_size

K, M, G, T = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("0", 0),
        ("4096", 4096),
        ("1_048_576", M),
        ("4096b", 4096),
        ("64k", 64 * K),
        ("64K", 64 * K),
        ("64kb", 64 * K),
        ("64KiB", 64 * K),
        ("64m", 64 * M),
        ("64MB", 64 * M),
        ("64MiB", 64 * M),
        ("1g", G),
        ("1GiB", G),
        ("2t", 2 * T),
        (" 64 MiB ", 64 * M),
    ],
)
def test_accepted_forms(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize(
    "text", ["", "m", "MiB", "1.5g", "-1", "+4", "0x1000", "64x", "64ib", "64kk", "1e6", "6_4m_"]
)
def test_refused_forms_name_what_is_accepted(text):
    with pytest.raises(ValueError) as e:
        parse_size(text)
    assert str(e.value) == f"expected {SIZE_FORMS}"
    assert "4096" in SIZE_FORMS and "64m" in SIZE_FORMS and "1k = 1024" in SIZE_FORMS


def test_bounds_and_multiples():
    assert parse_size("4k", minimum=4096, multiple_of=4096) == 4096
    with pytest.raises(ValueError, match=r"^1024 bytes is too small: at least 4096 \(4k\)$"):
        parse_size("1k", minimum=4096)
    with pytest.raises(ValueError, match=r"^2147483648 bytes is too large: at most 2147483647$"):
        parse_size("2g", maximum=2**31 - 1)
    with pytest.raises(ValueError, match=r"^5000 bytes is not a multiple of 4096$"):
        parse_size("5000", multiple_of=4096)


@pytest.mark.parametrize("n", [0, 1, 256, 1000, 4096, 64 * M, 3 * G, 2**31 - 1, T, 5 * T + K])
def test_format_size_reads_back(n):
    assert parse_size(format_size(n)) == n
    assert len(format_size(n)) <= len(str(n))


def test_format_size_picks_the_largest_exact_unit():
    assert [format_size(n) for n in (64 * M, 4096, 1536, T)] == ["64m", "4k", "1536", "1t"]
