"""A tiny protocol-buffers wire-format decoder.

Two files minibert reads are protobuf messages: the entries of a TensorFlow
checkpoint index (`BundleEntryProto`) and SentencePiece's `.model` file
(`ModelProto`). Neither needs the `protobuf` package: a message on the wire is
just a sequence of (field number, wire type, value) records, and a reader that
knows which field numbers it wants can skip the rest. The second half of
this file reads a SentencePiece `.model` file with it.

Wire types (https://protobuf.dev/programming-guides/encoding/):
  0 varint            int32, int64, uint32, bool, enum
  1 64-bit            fixed64, double
  2 length-delimited  string, bytes, embedded messages, packed repeated fields
  5 32-bit            fixed32, float
"""

import pathlib
import struct
from dataclasses import dataclass

from minibert.support import MiniBertError


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


# ==============================================================================
# Supports tokenization: reads a SentencePiece `.model` file (ALBERT's
# spiece.model, DeBERTa-v2/v3's spm.model), a ModelProto written with protocol
# buffers, into the few fields the tokenizers need. The file format, not the
# algorithm: tokenization.py builds the unigram tokenizer from what this returns.
# ==============================================================================


# SentencePiece piece types (sentencepiece_model.proto, SentencePiece.Type).
SPM_NORMAL, SPM_UNKNOWN, SPM_CONTROL, SPM_USER_DEFINED, SPM_UNUSED, SPM_BYTE = 1, 2, 3, 4, 5, 6
SPM_UNIGRAM = 1  # TrainerSpec.ModelType


def read_model_file(model_file):
    """The bytes of a `.model` file and what they hold: (data, SentencePieceModel)."""
    path = pathlib.Path(model_file)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise MiniBertError(f"{path}: cannot read the SentencePiece model ({e})") from None
    return data, read_sentencepiece_model(data, source=str(path))


@dataclass
class SentencePieceModel:
    """What minibert reads from a SentencePiece `.model` file (a ModelProto)."""

    pieces: list                 # (piece, score, type) in id order
    unk_id: int                  # the one piece of type UNKNOWN
    pad_id: int                  # -1 if the model has none
    precompiled_charsmap: bytes  # the compiled normalization rules ("nmt_nfkc"); b"" for none
    add_dummy_prefix: bool       # start the text with "▁" like every other word
    remove_extra_whitespaces: bool = True  # no spaces at the ends, runs of spaces become one


def read_sentencepiece_model(data, source="SentencePiece model"):
    """Parse the bytes of a `.model` file with minibert's protobuf decoder.

    sentencepiece_model.proto (only the fields used here):
      ModelProto      1: repeated SentencePiece pieces, 2: TrainerSpec, 3: NormalizerSpec
      SentencePiece   1: piece (string), 2: score (float), 3: type (enum, default NORMAL=1)
      TrainerSpec     3: model_type (UNIGRAM=1, BPE=2, WORD=3, CHAR=4), 35: byte_fallback,
                      43: pad_id (int32; -1 = none)
      NormalizerSpec  2: precompiled_charsmap (bytes), 3: add_dummy_prefix (default true),
                      4: remove_extra_whitespaces (default true)
    A field left at its default is not written to the file, hence the defaults below.
    """
    pieces = []
    model_type, byte_fallback, pad_id = SPM_UNIGRAM, False, -1
    charsmap, add_dummy_prefix, remove_extra_whitespaces = b"", True, True
    for field, wire_type, value in iter_fields(data, source):
        if field == 1 and wire_type == 2:
            piece, score, kind = None, 0.0, SPM_NORMAL
            for f, w, v in iter_fields(value, f"{source} piece {len(pieces)}"):
                if f == 1 and w == 2:
                    try:
                        piece = v.decode("utf-8")
                    except UnicodeDecodeError:
                        raise MiniBertError(f"{source}: piece {len(pieces)} is not valid UTF-8") from None
                elif f == 2 and w == 5:
                    score = fixed32_to_float(v)
                elif f == 3 and w == 0:
                    kind = v
            if piece is None:
                raise MiniBertError(f"{source}: piece {len(pieces)} has no text (corrupt .model file?)")
            pieces.append((piece, score, kind))
        elif field == 2 and wire_type == 2:
            for f, w, v in iter_fields(value, f"{source} trainer_spec"):
                if f == 3 and w == 0:
                    model_type = v
                elif f == 35 and w == 0:
                    byte_fallback = bool(v)
                elif f == 43 and w == 0:
                    pad_id = to_signed64(v)
        elif field == 3 and wire_type == 2:
            for f, w, v in iter_fields(value, f"{source} normalizer_spec"):
                if f == 2 and w == 2:
                    charsmap = v
                elif f == 3 and w == 0:
                    add_dummy_prefix = bool(v)
                elif f == 4 and w == 0:
                    remove_extra_whitespaces = bool(v)
    if not pieces:
        raise MiniBertError(f"{source}: no pieces found (expected a SentencePiece ModelProto)")
    unknown = [i for i, (_, _, kind) in enumerate(pieces) if kind == SPM_UNKNOWN]
    if len(unknown) != 1:
        raise MiniBertError(f"{source}: expected exactly one piece of type UNKNOWN, found {len(unknown)} "
                            f"(corrupt .model file?)")
    if model_type != SPM_UNIGRAM:
        raise MiniBertError(f"{source}: model_type {model_type} is not supported "
                            f"(ALBERT and DeBERTa-v2/v3 use a unigram model, type 1)")
    if byte_fallback:
        raise MiniBertError(f"{source}: byte_fallback models are not supported "
                            f"(ALBERT's and DeBERTa-v2/v3's are not byte-fallback)")
    # The compiled table starts with the byte size of its trie: a uint32, a
    # multiple of 4 that fits in the table. (`tokenizers` may crash on garbage.)
    trie_size = int.from_bytes(charsmap[:4], "little")
    if charsmap and not (len(charsmap) >= 4 and 0 < trie_size <= len(charsmap) - 4 and trie_size % 4 == 0):
        raise MiniBertError(f"{source}: normalizer_spec.precompiled_charsmap is malformed (corrupt .model file?)")
    if not 0 <= pad_id < len(pieces):
        pad_id = next((i for i, (piece, _, _) in enumerate(pieces) if piece == "<pad>"), -1)
    return SentencePieceModel(pieces, unknown[0], pad_id, charsmap, add_dummy_prefix, remove_extra_whitespaces)
