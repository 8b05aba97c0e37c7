"""Parsing an ONNX file without copying the weights it stores inline (`parse_leaving_weights`).

A real-size export such as GPT-2 small (650 MB) holds its weights inside the protobuf, as
each initializer's `raw_data`. `onnx.load` reads the whole file and copies every weight into a
protobuf string, and the frontend then copied each once more to check its length and to view
it as an array: about 1.5 s for GPT-2 small, for bytes most stages never read. Instead, the
file is memory-mapped and walked at the protobuf wire format down to the initializers of its
main graph; each large `raw_data` field is left out of the bytes given to protobuf and its
place in the file (offset, length) is returned, so that `load_model` can treat the weight as
it treats external data it validated: memory-mapped read-only when converted
(`wsecc.frontend.common.tensor_array`).

Anything the walk does not expect (a truncated or corrupt file, a graph field given twice, a
tensor with two `raw_data` fields or with external-data fields, a file of 2 GiB or more, a
format other than binary protobuf) returns None, and the caller parses the file with
`onnx.load` as before: the same model, or the same error, in every case.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx.serialization

_GRAPH = 7  # ModelProto.graph
_INITIALIZER = 5  # GraphProto.initializer
_RAW_DATA = 9  # TensorProto.raw_data
_EXTERNAL = (13, 14)  # TensorProto.external_data, TensorProto.data_location
_LEN = 2  # wire type of a length-delimited field
_MAX_FILE = 1 << 31  # protobuf refuses a message of 2 GiB or more: onnx.load says so


@dataclass(frozen=True)
class InlineWeight:
    """Where an initializer's raw bytes lie in the model file."""

    offset: int
    length: int


class _Malformed(Exception):
    """The wire format is not what the walk expects; the caller falls back to onnx.load."""


def parse_leaving_weights(
    path: Path, min_bytes: int
) -> tuple[onnx.ModelProto, dict[int, InlineWeight]] | None:
    """The model in `path` without the `raw_data` of its main graph's initializers of at least
    `min_bytes` bytes, and where each of those lies in the file, by the initializer's index
    in `graph.initializer`; None when the file is not one this walk reads (the module
    docstring), and the caller is to parse it with onnx.load."""
    serializer = onnx._get_serializer(None, str(path))
    if not isinstance(serializer, onnx.serialization._ProtobufSerializer):
        return None
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if not 0 < size < _MAX_FILE:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                stripped, weights = _strip(buf, size, min_bytes)
            except _Malformed:
                return None
    if not weights:
        return None  # nothing left out: onnx.load reads it as fast
    model = onnx.ModelProto()
    try:
        model.ParseFromString(stripped)
    except Exception:  # protobuf's DecodeError and others: onnx.load reports it
        return None
    return model, weights


def _strip(buf: mmap.mmap, size: int, min_bytes: int) -> tuple[bytes, dict[int, InlineWeight]]:
    """The file's bytes with the large initializers' raw_data fields left out, and where each
    lies. Raises _Malformed on anything unexpected."""
    graphs = [
        (wt, start, vs, ve)
        for number, wt, start, vs, ve in _fields(buf, 0, size)
        if number == _GRAPH
    ]
    if len(graphs) != 1 or graphs[0][0] != _LEN:
        raise _Malformed  # none (nothing to leave out) or several (protobuf merges them)
    _, start, gs, ge = graphs[0]
    pieces: list[bytes] = []
    weights: dict[int, InlineWeight] = {}
    last, index = gs, 0
    for number, wt, fstart, vs, ve in _fields(buf, gs, ge):
        if number != _INITIALIZER:
            continue
        if wt != _LEN:
            raise _Malformed
        raw = _raw_data(buf, vs, ve)
        if raw is not None and raw[2] - raw[1] >= min_bytes:
            rstart, data, rend = raw
            pieces += [
                buf[last:fstart],
                _key(_INITIALIZER) + _varint_bytes((ve - vs) - (rend - rstart)),
                buf[vs:rstart],
                buf[rend:ve],
            ]
            weights[index] = InlineWeight(offset=data, length=rend - data)
            last = ve
        index += 1
    pieces.append(buf[last:ge])
    graph = b"".join(pieces)
    return b"".join(
        [buf[:start], _key(_GRAPH), _varint_bytes(len(graph)), graph, buf[ge:size]]
    ), weights


def _raw_data(buf: mmap.mmap, start: int, end: int) -> tuple[int, int, int] | None:
    """(where its key starts, where its data starts, where it ends) of the tensor's raw_data,
    or None when it has none or has external-data fields. Two raw_data fields are _Malformed
    (protobuf keeps the last; this walk does not guess)."""
    found: tuple[int, int, int] | None = None
    for number, wt, fstart, vs, ve in _fields(buf, start, end):
        if number in _EXTERNAL:
            return None
        if number == _RAW_DATA:
            if wt != _LEN or found is not None:
                raise _Malformed
            found = (fstart, vs, ve)
    return found


def _fields(buf: mmap.mmap, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Each field of the message in buf[start:end]: (number, wire type, where its key starts,
    where its value starts, where it ends)."""
    pos = start
    while pos < end:
        key, vs = _varint(buf, pos, end)
        number, wt = key >> 3, key & 7
        if wt == 0:
            ve = _varint(buf, vs, end)[1]
        elif wt == 1:
            ve = vs + 8
        elif wt == _LEN:
            n, vs = _varint(buf, vs, end)
            ve = vs + n
        elif wt == 5:
            ve = vs + 4
        else:  # groups (3, 4) and the undefined 6, 7: none in an ONNX file
            raise _Malformed
        if number == 0 or ve > end:
            raise _Malformed
        yield number, wt, pos, vs, ve
        pos = ve


def _varint(buf: mmap.mmap, pos: int, end: int) -> tuple[int, int]:
    """The varint at buf[pos] and the position after it."""
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int) -> bytes:
    return _varint_bytes(number << 3 | _LEN)
