"""Unit tests of tools/fl_comm_analyze.py on small hand-made dumps (ctest: comm.analyzer_unit).

Every finding and its exit status, malformed input (a clear message, exit 1), the schema
version. The analyzer on dumps written by real runs is tests/comm (comm.dump.*).
"""
import copy
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "fl_comm_analyze.py")
sys.path.insert(0, os.path.join(HERE, ".."))
import fl_comm_analyze as fa  # noqa: E402


def part(op="all_reduce", dtype="float32", count=4, **kw):
    p = {"op": op, "dtype": dtype, "count": count}
    if op in ("all_reduce", "reduce_scatter"):
        p["redop"] = kw.get("redop", "sum")
    if op == "broadcast":
        p["root"] = kw.get("root", 0)
    if op in ("send", "recv"):
        p["peer"] = kw["peer"]
    return p


def signature(parts):
    def one(p):
        extra = ""
        if "redop" in p:
            extra += ", " + p["redop"]
        if "root" in p:
            extra += ", root=%d" % p["root"]
        if p["op"] == "send":
            extra += ", to=%d" % p["peer"]
        if p["op"] == "recv":
            extra += ", from=%d" % p["peer"]
        return "%s(%s%s, count=%d)" % (p["op"], p["dtype"], extra, p["count"])
    return one(parts[0]) if len(parts) == 1 else "group[" + "; ".join(one(p) for p in parts) + "]"


def record(seq, state="completed", parts=None, instr=None, name="grad", status=None):
    parts = parts or [part()]
    fp = "0x%016x" % (hash(json.dumps([p for p in parts if p["op"] not in ("send", "recv")], sort_keys=True))
                      & 0xFFFFFFFFFFFFFFFF)
    return {"seq": seq, "instr": instr if instr is not None else seq, "name": name, "fingerprint": fp,
            "signature": signature(parts), "num_parts": len(parts), "parts": parts, "state": state,
            "status": status, "t_queued_ns": 1, "t_issued_ns": None, "t_done_ns": None}


def comm(cid, rank, nranks, records, lane=1, created=0, trace_size=1024, dropped=0):
    def last(states):
        return max([r["seq"] for r in records if r["state"] in states], default=0)
    return {"id": cid, "handle": "0x1", "backend": "host", "rank": rank, "nranks": nranks, "lane": lane,
            "state": "active", "reason": None, "queued": last(("queued", "issued", "completed", "failed", "skipped")),
            "issued": last(("issued", "completed", "failed", "skipped")),
            "finished": last(("completed", "failed", "skipped")), "succeeded": 0, "trace_size": trace_size,
            "timeout_ms": 0, "created_unix_ns": created, "age_ns": 0, "records": records, "records_dropped": dropped}


def dump(rank, comms, lanes=None):
    return {"schema": "flowlane.comm_dump/1", "reason": "on_demand", "detail": "test", "time_unix_ns": 0,
            "process": {"host": "h", "pid": 100 + rank, "launcher": None, "launcher_rank": None,
                        "launcher_size": None, "rank": rank},
            "engine": {"handle": "0x1", "serial": 1, "lanes": 4, "workers": 2},
            "communicators": comms, "lanes": lanes or [], "wait_cycles": [], "text": ""}


def head(instr, name, lane, lane_state, waits=None, collective_wait=None, state="running"):
    return {"lane": lane, "pending": 1, "head": {"instr": instr, "name": name, "lane": lane, "stream": "lane %d, host" % lane,
                                                 "state": state, "lane_state": lane_state, "waits_for": waits or [],
                                                 "waits_not_shown": 0, "collective_wait": collective_wait},
            "queued": [], "more_queued": False}


class Analyze(unittest.TestCase):
    def run_tool(self, docs, *args):
        """Writes the dumps into a folder, runs the command line; (exit status, stdout, stderr)."""
        with tempfile.TemporaryDirectory() as d:
            for k, doc in enumerate(docs):
                with open(os.path.join(d, "r%d.json" % k), "w") as f:
                    f.write(doc if isinstance(doc, str) else json.dumps(doc))
            out, err = io.StringIO(), io.StringIO()
            with redirect_stdout(out), redirect_stderr(err):
                status = fa.main([d] + list(args))
            return status, out.getvalue(), err.getvalue()

    def test_ranks_that_agree_exit_0(self):
        docs = [dump(r, [comm("0xa", r, 2, [record(1), record(2)])]) for r in range(2)]
        status, out, _ = self.run_tool(docs)
        self.assertEqual(status, 0, out)
        self.assertIn("every collective of every communicator matched on every rank", out)
        self.assertIn("verdict: the ranks agree (exit 0)", out)

    def test_a_mismatch_names_the_ranks_and_the_field(self):
        docs = [dump(r, [comm("0xa", r, 3, [record(1), record(2, "failed", [part(dtype="int32" if r == 1 else "float32")],
                                                                 status="FL_ERR_INSTRUCTION_FAILED")])])
                for r in range(3)]
        status, out, _ = self.run_tool(docs)
        self.assertEqual(status, 2, out)
        self.assertIn("MISMATCH in c1 at seq 2 ('grad'): ranks 0, 2 issued all_reduce(float32, sum, count=4); "
                      "rank 1 issued all_reduce(int32, sum, count=4): rank 1 differs in dtype (float32 vs int32).", out)
        self.assertIn("It failed on every rank that recorded it (FL_ERR_INSTRUCTION_FAILED)", out)

    def test_a_send_without_its_recv_is_a_mismatch(self):
        r0 = [record(1, parts=[part("send", peer=1)])]
        r1 = [record(1, parts=[part("recv", count=8, peer=0)])]
        status, out, _ = self.run_tool([dump(0, [comm("0xa", 0, 2, r0)]), dump(1, [comm("0xa", 1, 2, r1)])])
        self.assertEqual(status, 2, out)
        self.assertIn("rank 0 sends float32 count=4 to rank 1, but rank 1 issued recv(float32, from=0, count=8) "
                      "(no matching recv)", out)

    def test_mismatches_stop_at_the_cap(self):
        docs = [dump(r, [comm("0xa", r, 2, [record(s, parts=[part(count=s + r)]) for s in range(1, 16)])])
                for r in range(2)]
        status, out, _ = self.run_tool(docs, "--max-mismatches", "10")
        self.assertEqual(status, 2)
        self.assertEqual(out.count("MISMATCH"), 10, out)
        self.assertIn("stopped after 10 mismatches", out)

    def test_a_rank_that_never_submitted_shows_what_its_lanes_do(self):
        waiting = dump(0, [comm("0xa", 0, 2, [record(1), record(2, "issued")])])
        lanes = [head(7, "loss", 0, "RUNNING", waits=[{"call": "fl_object_wait", "object": "0xb",
                                                       "writer": {"instr": 6, "name": "fwd", "lane": 2,
                                                                  "state": "running"}}]),
                 head(6, "fwd", 2, "RUNNING")]
        stuck = dump(1, [comm("0xa", 1, 2, [record(1)])], lanes)
        status, out, _ = self.run_tool([waiting, stuck])
        self.assertEqual(status, 3, out)
        self.assertIn("NOT REACHED in c1 at seq 2 all_reduce(float32, sum, count=4): rank 0 issued it and waits for "
                      "rank 1", out)
        self.assertIn("rank 1 has not submitted it (its last is seq 1): its lane 0 is at 'loss' (#7, lane 0), RUNNING "
                      "its callback, which waits in fl_object_wait for object 0xb written by 'fwd' (#6, lane 2), RUNNING "
                      "its callback and not waiting on anything flowlane tracks", out)

    def test_a_rank_whose_collective_is_queued_shows_its_lane_head(self):
        waiting = dump(0, [comm("0xa", 0, 2, [record(1, "issued")])])
        lanes = [head(9, "step", 1, "BLOCKED", waits=[{"object": "0xc", "writer": {"instr": 8, "name": "opt", "lane": 3,
                                                                                     "state": "pending"}}])]
        stuck = dump(1, [comm("0xa", 1, 2, [record(1, "queued", instr=10)])], lanes)
        status, out, _ = self.run_tool([waiting, stuck])
        self.assertEqual(status, 3, out)
        self.assertIn("rank 1 submitted it but never issued it: its lane 1 is at 'step' (#9, lane 1), BLOCKED on object "
                      "0xc written by 'opt' (#8, lane 3), pending", out)

    def test_a_rank_without_a_dump_is_dead(self):
        docs = [dump(r, [comm("0xa", r, 3, [record(1), record(2, "issued")])]) for r in range(2)]
        status, out, _ = self.run_tool(docs)
        self.assertEqual(status, 4, out)
        self.assertIn("DEAD in c1: rank 2 of 3 left no dump (the process died, or could not write it); ranks 0, 1 wait "
                      "for it in seq 2 all_reduce(float32, sum, count=4)", out)

    def test_a_cycle_through_three_ranks_and_three_communicators(self):
        # rank k waits in communicator k (its lane busy there) for rank k+1, whose lane is busy
        # in communicator k+1: ranks 0 -> 1 -> 2 -> 0.
        ids = ["0xa", "0xb", "0xc"]
        docs = []
        for r in range(3):
            comms = []
            for k, cid in enumerate(ids):
                if k == r:
                    comms.append(comm(cid, 0, 2, [record(1, "issued", instr=1)], created=k))
                elif (k + 1) % 3 == r:
                    comms.append(comm(cid, 1, 2, [record(1, "queued", instr=2)], created=k))
            docs.append(dump(r, comms, [head(1, "c%d" % r, 1, "RUNNING", collective_wait="waits for peers")]))
        status, out, _ = self.run_tool(docs)
        self.assertEqual(status, 5, out)
        self.assertIn("CYCLE of waits across ranks", out)
        for r in range(3):
            self.assertIn("rank %d waits in c%d seq 1 all_reduce(float32, sum, count=4) for rank %d" % (r, r + 1, (r + 1) % 3),
                          out)

    def test_orders_crossed_on_different_lanes_are_a_note(self):
        def ranked(r, first):
            a = comm("0xa", r, 2, [record(1, instr=1 if first == "a" else 2)], lane=1, created=0)
            b = comm("0xb", r, 2, [record(1, instr=2 if first == "a" else 1)], lane=2, created=1)
            return dump(r, [a, b])
        status, out, _ = self.run_tool([ranked(0, "a"), ranked(1, "b")])
        self.assertEqual(status, 0, out)
        self.assertIn("note: ORDER crossed between c1 and c2: rank 0 submitted c1 seq 1 before c2 seq 1, rank 1 "
                      "submitted c2 seq 1 before c1 seq 1 (on different lanes", out)

    def test_orders_crossed_on_one_lane_of_a_transport_are_a_note(self):
        # MPI's collectives do not hold their lane (the lane starts one and moves on): no hang.
        def ranked(r, first, backend):
            a = comm("0xa", r, 2, [record(1, instr=1 if first == "a" else 2)], lane=1, created=0)
            b = comm("0xb", r, 2, [record(1, instr=2 if first == "a" else 1)], lane=1, created=1)
            a["backend"] = b["backend"] = backend
            return dump(r, [a, b])
        status, out, _ = self.run_tool([ranked(0, "a", "mpi"), ranked(1, "b", "mpi")])
        self.assertEqual(status, 0, out)
        self.assertIn("(mpi collectives do not hold their lane, so it does not hang", out)
        status, out, _ = self.run_tool([ranked(0, "a", "host"), ranked(1, "b", "host")])
        self.assertEqual(status, 5, out)
        self.assertIn("Ranks must submit the collectives of communicators that share a lane", out)

    def test_a_skipped_collective_explains_its_peers_failure(self):
        docs = [dump(0, [comm("0xa", 0, 2, [record(1, "skipped", status="FL_ERR_DEPENDENCY_FAILED")])]),
                dump(1, [comm("0xa", 1, 2, [record(1, "failed", status="FL_ERR_INSTRUCTION_FAILED")])])]
        status, out, _ = self.run_tool(docs)
        self.assertEqual(status, 6, out)
        self.assertIn("FAILED in c1 at seq 1: rank 0: skipped (FL_ERR_DEPENDENCY_FAILED); rank 1: failed "
                      "(FL_ERR_INSTRUCTION_FAILED)", out)
        self.assertIn("rank 0 skipped it (an input was poisoned), so its peers could not complete it", out)

    def test_a_record_dropped_from_a_ring_is_said(self):
        waiting = dump(0, [comm("0xa", 0, 2, [record(s, "queued") for s in range(9, 11)], trace_size=2, dropped=8)])
        waiting["communicators"][0].update(queued=10, issued=5, finished=4)
        stuck = dump(1, [comm("0xa", 1, 2, [record(4), record(5, "queued")])],
                     [head(3, "cb", 1, "RUNNING")])
        status, out, _ = self.run_tool([waiting, stuck])
        self.assertEqual(status, 3, out)
        self.assertIn("rank 0's record of seq 5 was dropped from its ring of 2", out)
        self.assertIn("note: c1: rings dropped their oldest records (FLOWLANE_COMM_TRACE_SIZE; kept: rank 0 seq 9-10)", out)


class BadInput(unittest.TestCase):
    def run_tool(self, texts):
        return Analyze.run_tool(self, texts)

    def test_malformed_json_names_the_file_and_place(self):
        good = json.dumps(dump(0, [comm("0xa", 0, 1, [record(1)])]))
        status, _, err = self.run_tool([good[: len(good) // 2]])
        self.assertEqual(status, 1)
        self.assertRegex(err, r"r0\.json: not valid JSON: line 1 column \d+: .* \(a dump cut short\?\)")

    def test_another_schema_version_is_refused(self):
        doc = dump(0, [])
        doc["schema"] = "flowlane.comm_dump/2"
        status, _, err = self.run_tool([doc])
        self.assertEqual(status, 1)
        self.assertIn("schema flowlane.comm_dump/2; this analyzer reads flowlane.comm_dump/1", err)

    def test_a_file_that_is_no_dump_is_refused(self):
        status, _, err = self.run_tool([{"traceEvents": []}])
        self.assertEqual(status, 1)
        self.assertIn("not a flowlane communicator dump (no \"schema\")", err)

    def test_a_missing_field_is_named(self):
        doc = dump(0, [comm("0xa", 0, 1, [record(1)])])
        del doc["communicators"][0]["nranks"]
        status, _, err = self.run_tool([doc])
        self.assertEqual(status, 1)
        self.assertIn("communicators[0] lacks \"nranks\"", err)
        doc = dump(0, [comm("0xa", 0, 1, [record(1)])])
        doc["communicators"][0]["records"][0]["seq"] = "one"
        status, _, err = self.run_tool([doc])
        self.assertIn("records[0]: \"seq\" is str, expected int", err)

    def test_two_dumps_of_one_rank_are_refused(self):
        d = dump(0, [comm("0xa", 0, 2, [record(1)])])
        status, _, err = self.run_tool([d, copy.deepcopy(d)])
        self.assertEqual(status, 1)
        self.assertIn("rank 0 of communicator 0xa is in two dumps", err)

    def test_ranks_disagreeing_on_the_size_are_refused(self):
        status, _, err = self.run_tool([dump(0, [comm("0xa", 0, 2, [])]), dump(1, [comm("0xa", 1, 3, [])])])
        self.assertEqual(status, 1)
        self.assertIn("communicator 0xa has 3 ranks in", err)

    def test_an_empty_folder_and_a_missing_path(self):
        with tempfile.TemporaryDirectory() as d:
            err = io.StringIO()
            with redirect_stderr(err), redirect_stdout(io.StringIO()):
                self.assertEqual(fa.main([d]), 1)
            self.assertIn("no dump files (*.json) in", err.getvalue())
            with redirect_stderr(err), redirect_stdout(io.StringIO()):
                self.assertEqual(fa.main([os.path.join(d, "nope")]), 1)
            self.assertIn("nope: no such file or folder", err.getvalue())

    def test_the_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "r0.json"), "w") as f:
                json.dump(dump(0, [comm("0xa", 0, 1, [record(1)])]), f)
            p = subprocess.run([sys.executable, TOOL, d], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            p = subprocess.run([sys.executable, TOOL], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1)  # usage: 1, never 2 (a mismatch)
            self.assertIn("usage: flowlane-comm-analyze", p.stderr)


if __name__ == "__main__":
    unittest.main()
