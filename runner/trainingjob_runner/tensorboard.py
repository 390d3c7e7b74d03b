"""TensorBoard event files without the tensorboard package (standard library only): scalars, as
torch.utils.tensorboard's SummaryWriter writes them, so TensorBoard reads TENSORBOARD_LOG_DIR as usual.

An event file is a TFRecord stream of Event protocol buffers: each record is its length (uint64), the
masked CRC-32C of the length, the data, and the masked CRC-32C of the data.
"""

import os
import socket
import struct
import time

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number, wire, payload):
    return _varint(number << 3 | wire) + payload


def _bytes_field(number, data):
    return _field(number, 2, _varint(len(data)) + data)


def event(wall_time, step=0, file_version=None, scalars=None):
    """An Event: wall_time (1, double), step (2, int64), file_version (3) or summary (5) of simple values."""
    out = _field(1, 1, struct.pack("<d", wall_time)) + _field(2, 0, _varint(step))
    if file_version:
        out += _bytes_field(3, file_version.encode())
    if scalars:
        values = b"".join(_bytes_field(1, _bytes_field(1, tag.encode()) + _field(2, 5, struct.pack("<f", float(v))))
                          for tag, v in sorted(scalars.items()))
        out += _bytes_field(5, values)
    return out


def record(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


class Writer:
    """Appends scalars to a new events file in log_dir (created), one flushed record per call."""

    def __init__(self, log_dir):
        os.makedirs(log_dir, exist_ok=True)
        now = time.time()
        self.path = os.path.join(log_dir, "events.out.tfevents.%d.%s.%d" % (int(now), socket.gethostname(), os.getpid()))
        self._f = open(self.path, "ab")
        self._write(event(now, file_version="brain.Event:2"))

    def _write(self, data):
        self._f.write(record(data))
        self._f.flush()

    def scalars(self, step, values):
        self._write(event(time.time(), step=step, scalars={k: v for k, v in values.items() if v is not None}))

    def close(self):
        self._f.close()
