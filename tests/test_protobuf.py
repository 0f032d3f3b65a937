"""minibert/support/protobuf.py: the wire-format decoder behind the TensorFlow
checkpoint index and SentencePiece's .model file, on bytes encoded by hand."""

import struct

import pytest

from minibert.support import MiniBertError
from minibert.support.protobuf import fixed32_to_float, iter_fields, read_varint, to_signed64
from helpers import varint


def test_varint_of_300_is_two_bytes_ac_02():
    # 300 = 0b10_0101100: low 7 bits 0101100 with the continuation bit -> 0xAC, then 0b10 -> 0x02
    assert read_varint(b"\xac\x02", 0) == (300, 2)
    assert read_varint(b"\x01", 0) == (1, 1)


def test_varint_read_starts_at_the_given_byte_and_returns_where_it_stopped():
    assert read_varint(b"\xff\xac\x02\x07", 1) == (300, 3)


def test_a_varint_cut_short_or_longer_than_ten_bytes_is_a_minibert_error():
    with pytest.raises(MiniBertError, match="spiece.model: truncated varint at byte 1"):
        read_varint(b"\x80", 0, "spiece.model")
    with pytest.raises(MiniBertError, match="varint longer than 10 bytes"):
        read_varint(b"\xff" * 11, 0)


def test_iter_fields_reads_one_field_of_each_wire_type():
    # key = field_number << 3 | wire_type
    message = (bytes([1 << 3 | 0]) + varint(300)                          # field 1, varint 300
               + bytes([2 << 3 | 1]) + struct.pack("<Q", 2 ** 40)          # field 2, 64-bit
               + bytes([3 << 3 | 2]) + varint(5) + b"hello"                # field 3, 5 bytes
               + bytes([4 << 3 | 5]) + struct.pack("<f", 1.5))             # field 4, 32-bit float
    fields = list(iter_fields(message))
    assert fields[:3] == [(1, 0, 300), (2, 1, 2 ** 40), (3, 2, b"hello")]
    assert fields[3] == (4, 5, 0x3FC00000) and fixed32_to_float(0x3FC00000) == 1.5     # 1.5 = 0 01111111 1000...


def test_a_length_past_the_end_of_the_message_names_the_field():
    with pytest.raises(MiniBertError, match="field 3 says 9 bytes but only 5 remain"):
        list(iter_fields(bytes([3 << 3 | 2]) + varint(9) + b"hello"))


def test_field_number_zero_and_group_wire_types_are_refused():
    with pytest.raises(MiniBertError, match="field number 0"):
        list(iter_fields(bytes([0 << 3 | 0, 1])))
    with pytest.raises(MiniBertError, match="unsupported wire type 3 for field 1"):
        list(iter_fields(bytes([1 << 3 | 3])))


def test_int64_minus_one_is_ten_bytes_of_twos_complement():
    value, end = read_varint(b"\xff" * 9 + b"\x01", 0)
    assert (value, end) == (2 ** 64 - 1, 10) and to_signed64(value) == -1 and to_signed64(7) == 7


# ----------------------------------------------------------------------------
# Exercise of assignment 3 (docs/coursework.md)
# ----------------------------------------------------------------------------


def test_exercise_varint():
    assert read_varint(b"\xac\x02", 0) == (300, 2)                    # 0101100 | 0000010 << 7
    assert read_varint(b"\x96\x01", 0) == (150, 2)                    # protobuf's own example
    assert read_varint(b"\x80\x80\x01", 0) == (16384, 3)              # 1 << 14
    assert read_varint(b"\xff\xac\x02\x07", 1) == (300, 3)            # starts at pos, returns where it stopped
    assert read_varint(b"\xff" * 9 + b"\x01", 0) == (2 ** 64 - 1, 10)  # the longest: ten bytes
    with pytest.raises(MiniBertError, match="spiece.model: truncated varint at byte 2"):
        read_varint(b"\x80\x80", 0, "spiece.model")
    with pytest.raises(MiniBertError, match="varint longer than 10 bytes"):
        read_varint(b"\xff" * 11, 0)
