"""The runner's TensorBoard event writer: records framed with CRC-32C as TFRecord, read back here."""

import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from trainingjob_runner import tensorboard  # noqa: E402


def records(path):
    out = []
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        (lcrc,) = struct.unpack("<I", data[i + 8:i + 12])
        body = data[i + 12:i + 12 + n]
        (dcrc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        assert lcrc == tensorboard.masked_crc(data[i:i + 8]) and dcrc == tensorboard.masked_crc(body), "bad CRC"
        out.append(body)
        i += 16 + n
    return out


class WriterTest(unittest.TestCase):
    def test_crc32c_known_value(self):
        # RFC 3720's test vector: 32 zero bytes.
        self.assertEqual(0x8A9136AA, tensorboard.crc32c(bytes(32)))

    def test_scalars_are_records(self):
        d = tempfile.mkdtemp()
        w = tensorboard.Writer(os.path.join(d, "tb"))
        w.scalars(1, {"loss": 0.5, "accuracy": None})
        w.scalars(2, {"loss": 0.25})
        w.close()
        got = records(w.path)
        self.assertEqual(3, len(got))
        self.assertIn(b"brain.Event:2", got[0])
        self.assertIn(b"loss", got[1])
        self.assertNotIn(b"accuracy", got[1])
        self.assertIn(struct.pack("<f", 0.25), got[2])
        self.assertTrue(os.path.basename(w.path).startswith("events.out.tfevents."))
