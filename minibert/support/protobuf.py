"""A tiny protocol-buffers wire-format decoder.

Two files minibert reads are protobuf messages: the entries of a TensorFlow
checkpoint index (`BundleEntryProto`) and SentencePiece's `.model` file
(`ModelProto`). Neither needs the `protobuf` package: a message on the wire is
just a sequence of (field number, wire type, value) records, and a reader that
knows which field numbers it wants can skip the rest.

Wire types (https://protobuf.dev/programming-guides/encoding/):
  0 varint            int32, int64, uint32, bool, enum
  1 64-bit            fixed64, double
  2 length-delimited  string, bytes, embedded messages, packed repeated fields
  5 32-bit            fixed32, float
"""

import struct

from minibert.support.errors import MiniBertError


def read_varint(buf, pos, what="protobuf message"):
    """Decode a base-128 varint starting at buf[pos]. Returns (value, new_pos).

    Each byte holds 7 bits of the value, least significant group first; its
    high bit (0x80) says whether another byte follows. 300 = 0b10_0101100 is
    0xAC 0x02. An int64 takes at most 10 bytes."""
    if pos < len(buf) and buf[pos] < 0x80:
        return buf[pos], pos + 1          # a one-byte varint (0..127): most field keys and lengths
    # exercise: varint
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise MiniBertError(f"{what}: truncated varint at byte {pos}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise MiniBertError(f"{what}: varint longer than 10 bytes at byte {pos}")
    # end exercise


def iter_fields(buf, what="protobuf message"):
    """Yield (field_number, wire_type, value) for each field of one message.

    value is an int for wire types 0, 1 and 5 and a bytes object for type 2
    (the caller decides whether those bytes are a string or a nested message).
    """
    buf = memoryview(buf)
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos, what)
        field_number, wire_type = key >> 3, key & 7
        if field_number == 0:
            raise MiniBertError(f"{what}: field number 0 at byte {pos} (corrupt message)")
        if wire_type == 0:
            value, pos = read_varint(buf, pos, what)
        elif wire_type == 1:
            if pos + 8 > len(buf):
                raise MiniBertError(f"{what}: truncated 64-bit field {field_number}")
            (value,) = struct.unpack_from("<Q", buf, pos)
            pos += 8
        elif wire_type == 2:
            length, pos = read_varint(buf, pos, what)
            if pos + length > len(buf):
                raise MiniBertError(
                    f"{what}: field {field_number} says {length} bytes but only "
                    f"{len(buf) - pos} remain")
            value = bytes(buf[pos:pos + length])
            pos += length
        elif wire_type == 5:
            if pos + 4 > len(buf):
                raise MiniBertError(f"{what}: truncated 32-bit field {field_number}")
            (value,) = struct.unpack_from("<I", buf, pos)
            pos += 4
        else:
            raise MiniBertError(f"{what}: unsupported wire type {wire_type} for field {field_number}")
        yield field_number, wire_type, value


def fixed32_to_float(value):
    """Reinterpret the bits of a 32-bit field as an IEEE float (protobuf `float`)."""
    return struct.unpack("<f", struct.pack("<I", value))[0]


def to_signed64(value):
    """A varint holds int64 in two's complement; turn it back into a Python int."""
    return value - (1 << 64) if value >= 1 << 63 else value
