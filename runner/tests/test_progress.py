"""Which processes serve the progress endpoint (every pod's first), and what they serve."""

import os
import socket
import sys
import unittest
import urllib.request
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from trainingjob_runner.progress import Progress  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ProgressEndpointTest(unittest.TestCase):
    def test_every_pods_first_process_serves(self):
        port = free_port()
        with mock.patch.dict(os.environ, {"RANK": "3", "POD_IP": "127.0.0.1", "METRICS_PORT": str(port)}, clear=False):
            os.environ.pop("LOCAL_RANK", None)
            p = Progress(total_steps=100)
            try:
                p.report(step=7)
                body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
                self.assertIn("training_step 7.0", body)
            finally:
                p.close()

    def test_a_pods_other_processes_do_not(self):
        for var in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"):
            with mock.patch.dict(os.environ, {var: "1", "POD_IP": "127.0.0.1", "METRICS_PORT": str(free_port())}):
                self.assertIsNone(Progress().address, var)

    def test_a_taken_port_is_not_fatal(self):
        port = free_port()
        with mock.patch.dict(os.environ, {"POD_IP": "127.0.0.1", "METRICS_PORT": str(port)}):
            os.environ.pop("LOCAL_RANK", None)
            first = Progress()
            try:
                self.assertIsNone(Progress().address)
            finally:
                first.close()


if __name__ == "__main__":
    unittest.main()
