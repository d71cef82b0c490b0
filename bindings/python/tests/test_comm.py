"""Communicators through the Python binding, on the host-fake backend (runs everywhere):
two ranks of one process as two lanes of one engine, collectives over ctypes buffers, the
errors a bad group gets, and the FL_COMM_UNORDERED option."""

import ctypes
import json
import os
import tempfile
import unittest

from _support import flowlane


def floats(*values):
    return (ctypes.c_float * len(values))(*values)


def addr(buf):
    return ctypes.addressof(buf)


class HostFakeComm(unittest.TestCase):
    def make(self, engine, nranks, **kw):
        uid = flowlane.CommUniqueId.new(flowlane.CommBackend.HOST_FAKE)
        return [engine.comm(nranks, r, uid, lane=1 + r, backend=flowlane.CommBackend.HOST_FAKE, **kw)
                for r in range(nranks)]

    def test_all_reduce_all_gather_broadcast_on_two_ranks(self):
        # A rank's collective blocks its worker until the peer arrives: one worker per rank.
        with flowlane.Engine(workers=2, lanes=4) as e:
            comms = self.make(e, 2)
            send = [floats(1, 2, 3), floats(10, 20, 30)]
            ar = [floats(0, 0, 0), floats(0, 0, 0)]
            ag = [(ctypes.c_float * 6)(), (ctypes.c_float * 6)()]
            bc = [floats(0, 0, 0), floats(0, 0, 0)]
            for r, c in enumerate(comms):
                c.all_reduce(addr(send[r]), addr(ar[r]), 3, flowlane.DType.FLOAT32, name="ar")
                c.submit([flowlane.CollPart(flowlane.CollOp.ALL_GATHER, flowlane.DType.FLOAT32, 3, addr(send[r]),
                                            addr(ag[r]))], name="ag")
                c.submit([flowlane.CollPart(flowlane.CollOp.BROADCAST, flowlane.DType.FLOAT32, 3, addr(send[r]),
                                            addr(bc[r]), peer=1)], name="bc")
            e.synchronize()
            for r in range(2):
                self.assertEqual(list(ar[r]), [11.0, 22.0, 33.0])
                self.assertEqual(list(ag[r]), [1.0, 2.0, 3.0, 10.0, 20.0, 30.0])
                self.assertEqual(list(bc[r]), [10.0, 20.0, 30.0])
            for c in comms:
                c.close()

    def test_unordered_is_accepted(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            comms = self.make(e, 2, unordered=True)
            send = [floats(1, 2), floats(3, 4)]
            out = [floats(0, 0), floats(0, 0)]
            for r, c in enumerate(comms):
                c.all_reduce(addr(send[r]), addr(out[r]), 2, flowlane.DType.FLOAT32, op=flowlane.RedOp.MAX)
            e.synchronize()
            self.assertEqual([list(o) for o in out], [[3.0, 4.0], [3.0, 4.0]])
            for c in comms:
                c.close()

    def test_dump_writes_the_json_the_analyzer_reads(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            comms = self.make(e, 2)
            send = [floats(1, 2), floats(3, 4)]
            out = [floats(0, 0), floats(0, 0)]
            for r, c in enumerate(comms):
                c.all_reduce(addr(send[r]), addr(out[r]), 2, flowlane.DType.FLOAT32, name="grad")
            e.synchronize()
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "rank.json")
                comms[0].dump(path)
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
                self.assertEqual(doc["schema"], "flowlane.comm_dump/1")
                # Both ranks live on this engine: its dump has both communicators.
                self.assertEqual(sorted(c["rank"] for c in doc["communicators"]), [0, 1])
                self.assertEqual(len({c["id"] for c in doc["communicators"]}), 1)
                records = doc["communicators"][0]["records"]
                self.assertEqual([(r["name"], r["state"]) for r in records], [("grad", "completed")])
                with self.assertRaises(flowlane.InvalidArgument):
                    comms[0].dump(os.path.join(d, "no", "such", "folder.json"))
                if "FLOWLANE_COMM_DUMP_DIR" not in os.environ:
                    with self.assertRaises(flowlane.InvalidArgument):
                        comms[0].dump()  # no path, no dump folder
            for c in comms:
                c.close()

    def test_bad_groups_raise_specific_errors(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            uid = flowlane.CommUniqueId.new(flowlane.CommBackend.HOST_FAKE)
            fake = flowlane.CommBackend.HOST_FAKE
            comms = [e.comm(2, r, uid, lane=1 + r, backend=fake) for r in range(2)]
            with self.assertRaises(flowlane.InvalidArgument):  # rank 0 of this id already joined
                e.comm(2, 0, uid, lane=3, backend=fake)
            with self.assertRaises(flowlane.OutOfRange):
                e.comm(2, 2, uid, lane=3, backend=fake)
            buf = floats(0, 0)
            with self.assertRaises(flowlane.OutOfRange):
                comms[0].submit([flowlane.CollPart(flowlane.CollOp.BROADCAST, flowlane.DType.FLOAT32, 2, addr(buf),
                                                   addr(buf), peer=5)])
            with self.assertRaises(flowlane.InvalidArgument):
                comms[0].all_reduce(0, addr(buf), 2, flowlane.DType.FLOAT32)  # no sendbuf
            for c in comms:
                c.close()
            with self.assertRaises(flowlane.FlowlaneError):  # the handle is closed
                comms[0].all_reduce(addr(buf), addr(buf), 2, flowlane.DType.FLOAT32)


if __name__ == "__main__":
    unittest.main()
