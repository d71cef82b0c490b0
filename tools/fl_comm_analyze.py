#!/usr/bin/env python3
"""flowlane-comm-analyze: explains a distributed hang from every rank's communicator dump.

    flowlane-comm-analyze [--max-mismatches N] DIR_OR_FILE...

Reads the JSON dumps flowlane writes per rank (schema flowlane.comm_dump/1: fl_comm_dump,
FLOWLANE_COMM_DUMP_DIR; comm/README.md, "Dumps"), matches every communicator's collectives
across the ranks by (communicator id, sequence number), and reports, earliest first:

  MISMATCH    ranks issued different collectives at one sequence number (which ranks, which field)
  CYCLE       ranks wait for each other across communicators (orders crossed between two
              communicators sharing a lane)
  ORDER       two communicators' collectives submitted in different orders by two ranks
  DEAD        a rank of a communicator left no dump (it died, or could not write)
  NOT REACHED the first collective some ranks wait in that another rank never issued, and
              what that rank's lane was doing instead (its head instruction, what it waits
              for, who writes that)
  FAILED      a collective that failed or was skipped on some rank (no mismatch behind it)

Exit status: 0 the ranks agree (nothing waits, nothing failed); 1 bad usage or input (a
message names the file and what is wrong); otherwise the first that applies of
2 mismatch, 5 cycle or crossed order, 4 dead rank, 3 not reached, 6 failed.

Standard library only; runs from the source tree (tools/fl_comm_analyze.py) or installed
as flowlane-comm-analyze.
"""
import argparse
import json
import os
import sys

SCHEMA = "flowlane.comm_dump/1"
EXIT_OK, EXIT_INPUT, EXIT_MISMATCH, EXIT_NOT_REACHED, EXIT_DEAD, EXIT_CYCLE, EXIT_FAILED = 0, 1, 2, 3, 4, 5, 6
PRECEDENCE = [EXIT_MISMATCH, EXIT_CYCLE, EXIT_DEAD, EXIT_NOT_REACHED, EXIT_FAILED]
VERDICTS = {
    EXIT_OK: "the ranks agree",
    EXIT_MISMATCH: "signature mismatch",
    EXIT_CYCLE: "cycle of waits or crossed order across ranks",
    EXIT_DEAD: "a rank left no dump",
    EXIT_NOT_REACHED: "a rank never issued a collective its peers wait in",
    EXIT_FAILED: "failed collectives",
}
ALIASES = {}  # communicator id -> "c1", ... (set by build())


class InputError(Exception):
    """A dump that cannot be read: the message names the file and what is wrong."""


# ---- reading ---------------------------------------------------------------------------------

def dump_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            names = sorted(n for n in os.listdir(p)
                           if n.endswith(".json") and not n.startswith(".") and ".tmp-" not in n)
            files += [os.path.join(p, n) for n in names]
        elif os.path.exists(p):
            files.append(p)
        else:
            raise InputError("%s: no such file or folder" % p)
    if not files:
        raise InputError("no dump files (*.json) in %s" % ", ".join(paths))
    return files


def require(obj, key, where, kind=None):
    if not isinstance(obj, dict) or key not in obj:
        raise InputError("%s lacks \"%s\"" % (where, key))
    value = obj[key]
    if kind is not None and not isinstance(value, kind):
        raise InputError("%s: \"%s\" is %s, expected %s" % (where, key, type(value).__name__,
                                                             kind.__name__ if isinstance(kind, type) else "a number"))
    return value


def load(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise InputError("%s: not valid JSON: line %d column %d: %s (a dump cut short?)" % (path, e.lineno, e.colno, e.msg))
    except OSError as e:
        raise InputError("%s: cannot read: %s" % (path, e.strerror))
    if not isinstance(doc, dict) or "schema" not in doc:
        raise InputError("%s: not a flowlane communicator dump (no \"schema\")" % path)
    schema = doc["schema"]
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("flowlane.comm_dump/"):
            raise InputError("%s: schema %s; this analyzer reads %s (use the flowlane-comm-analyze of the flowlane "
                             "that wrote it)" % (path, schema, SCHEMA))
        raise InputError("%s: schema %r is not a flowlane communicator dump (%s)" % (path, schema, SCHEMA))
    number = (int, float)
    process = require(doc, "process", path, dict)
    require(doc, "communicators", path, list)
    require(doc, "lanes", path, list)
    for k, c in enumerate(doc["communicators"]):
        where = "%s: communicators[%d]" % (path, k)
        for key in ("id", "backend"):
            require(c, key, where, str)
        for key in ("rank", "nranks", "lane", "queued", "issued", "finished", "trace_size"):
            require(c, key, where, int)
        for j, r in enumerate(require(c, "records", where, list)):
            rw = "%s.records[%d]" % (where, j)
            require(r, "seq", rw, int)
            require(r, "state", rw, str)
            require(r, "fingerprint", rw, str)
            require(r, "signature", rw, str)
            require(r, "parts", rw, list)
    for k, lane in enumerate(doc["lanes"]):
        require(lane, "lane", "%s: lanes[%d]" % (path, k), int)
    require(process, "pid", path + ": process", number)
    doc["_file"] = path
    return doc


# ---- the model -------------------------------------------------------------------------------

class Rank:
    """One dump: one rank (an engine with communicators) of the job."""

    def __init__(self, doc):
        self.doc = doc
        self.file = doc["_file"]
        p = doc["process"]
        self.rank = p.get("launcher_rank") if p.get("launcher_rank") is not None else p.get("rank")
        self.pid = p.get("pid")
        self.host = p.get("host", "?")
        self.lanes = {lane["lane"]: lane for lane in doc["lanes"]}
        self.label = "rank %s" % self.rank if self.rank is not None else os.path.basename(self.file)
        self.by_instr = {}  # instr id -> (communicator entry, record)
        for c in doc["communicators"]:
            for r in c["records"]:
                if r.get("instr"):
                    self.by_instr[r["instr"]] = (c, r)


class Comm:
    """One communicator across the ranks: member rank -> (Rank, its entry)."""

    def __init__(self, cid):
        self.id = cid
        self.alias = None
        self.nranks = None
        self.backend = None
        self.members = {}

    def name(self):
        return self.alias

    def state_at(self, r, seq):
        """(state, record or None) of collective `seq` on comm rank r."""
        dump, entry = self.members[r]
        for rec in entry["records"]:
            if rec["seq"] == seq:
                return rec["state"], rec
        if seq <= entry["finished"]:
            return "finished", None
        if seq <= entry["issued"]:
            return "issued", None
        if seq <= entry["queued"]:
            return "queued", None
        return "not submitted", None


def build(docs):
    ranks = [Rank(d) for d in docs]
    labels = {}
    for r in ranks:
        labels.setdefault(r.label, []).append(r)
    for label, same in labels.items():
        if len(same) > 1:  # two dumps claim one rank: tell them apart
            for r in same:
                r.label = "%s (pid %s, %s)" % (label, r.pid, os.path.basename(r.file))
    comms = {}
    for dump in ranks:
        for entry in dump.doc["communicators"]:
            c = comms.setdefault(entry["id"], Comm(entry["id"]))
            if c.nranks is None:
                c.nranks, c.backend = entry["nranks"], entry["backend"]
            elif c.nranks != entry["nranks"]:
                raise InputError("communicator %s has %d ranks in %s but %d in another dump" %
                                 (c.id, entry["nranks"], dump.file, c.nranks))
            if entry["rank"] in c.members:
                other = c.members[entry["rank"]][0]
                raise InputError("rank %d of communicator %s is in two dumps: %s and %s (give one dump per rank)" %
                                 (entry["rank"], c.id, other.file, dump.file))
            c.members[entry["rank"]] = (dump, entry)
    order = sorted(comms.values(), key=lambda c: (min(e.get("created_unix_ns", 0) for _, e in c.members.values()), c.id))
    ALIASES.clear()
    for k, c in enumerate(order):
        c.alias = "c%d" % (k + 1)
        ALIASES[c.id] = c.alias
    return ranks, order


# ---- words -----------------------------------------------------------------------------------

def rank_list(ranks):
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def instr_words(i):
    name = i.get("name") or "<unnamed>"
    return "'%s' (#%s, lane %s)" % (name, i.get("instr"), i.get("lane"))


def collective_part(parts):
    return [p for p in parts if p.get("op") not in ("send", "recv")]


def differing_field(a, b):
    """Which field two records' collective parts differ in, as words."""
    pa, pb = collective_part(a["parts"]), collective_part(b["parts"])
    if len(pa) != len(pb):
        return "the number of collective parts (%d vs %d)" % (len(pa), len(pb))
    for k, (x, y) in enumerate(zip(pa, pb)):
        for field in ("op", "dtype", "redop", "root", "count"):
            if x.get(field) != y.get(field):
                where = " of part %d" % k if len(pa) > 1 else ""
                return "%s%s (%s vs %s)" % (field, where, x.get(field), y.get(field))
    if a.get("num_parts", 0) > len(a["parts"]) or b.get("num_parts", 0) > len(b["parts"]):
        return "parts beyond the ones recorded (their fingerprints differ)"
    return "their fingerprints"


# ---- findings --------------------------------------------------------------------------------

class Report:
    def __init__(self):
        self.findings = []  # (order key, exit kind, text)
        self.notes = []

    def add(self, key, kind, text):
        self.findings.append((key, kind, text))

    def exit_status(self):
        kinds = {k for _, k, _ in self.findings}
        for k in PRECEDENCE:
            if k in kinds:
                return k
        return EXIT_OK


def check_mismatches(comm, report, cap):
    """Signatures (fingerprints) and send/recv pairs, at every seq two ranks recorded."""
    seqs = sorted({r["seq"] for _, e in comm.members.values() for r in e["records"]})
    found = 0
    for seq in seqs:
        recs = {}
        for rk, (_, e) in comm.members.items():
            for r in e["records"]:
                if r["seq"] == seq:
                    recs[rk] = r
        if len(recs) < 2:
            continue
        groups = {}
        for rk, r in sorted(recs.items()):
            groups.setdefault(r["fingerprint"], []).append(rk)
        text = None
        if len(groups) > 1:
            ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
            base = recs[ordered[0][0]]
            pieces = ["%s issued %s" % (rank_list(g), recs[g[0]]["signature"]) for g in ordered]
            fields = ["%s differs in %s" % (rank_list(g), differing_field(base, recs[g[0]])) for g in ordered[1:]]
            text = "; ".join(pieces) + ": " + "; ".join(fields)
        else:
            text = p2p_mismatch(recs)
        if text is None:
            continue
        name = next((r.get("name") for r in recs.values() if r.get("name")), "")
        outcome = sorted({(r["state"], r.get("status")) for r in recs.values()})
        tail = ""
        if all(s in ("failed", "skipped") for s, _ in outcome):
            tail = "\n  It failed on every rank that recorded it (%s)." % ", ".join(sorted({st or s for s, st in outcome}))
        report.add((seq, 0, comm.alias), EXIT_MISMATCH, "MISMATCH in %s at seq %d%s: %s.%s" %
                   (comm.alias, seq, " ('%s')" % name if name else "", text, tail))
        found += 1
        if found >= cap:
            report.notes.append("%s: stopped after %d mismatches (--max-mismatches): later sequence numbers pair "
                                "collectives that were meant for each other less and less" % (comm.alias, cap))
            return


def p2p_mismatch(recs):
    """The first send without its recv (or recv without its send) among the ranks' records."""
    sends, recvs = [], {}
    for rk, r in recs.items():
        if r.get("num_parts", 0) > len(r["parts"]):
            return None  # not all parts recorded: pairs cannot be checked
        for p in r["parts"]:
            if p.get("op") == "send":
                sends.append((rk, p))
            elif p.get("op") == "recv":
                recvs.setdefault((rk, p.get("peer")), []).append(p)
    for rk, p in sends:
        to = p.get("peer")
        if to not in recs:
            continue  # its record is not there: nothing to compare
        match = recvs.get((to, rk), [])
        hit = next((q for q in match if q.get("dtype") == p.get("dtype") and q.get("count") == p.get("count")), None)
        if hit is None:
            return ("rank %d sends %s count=%s to rank %d, but rank %d issued %s (no matching recv)" %
                    (rk, p.get("dtype"), p.get("count"), to, to, recs[to]["signature"]))
        match.remove(hit)
    for (rk, frm), rest in sorted(recvs.items()):
        if rest and frm in recs:
            return ("rank %d receives %s count=%s from rank %d, but rank %d issued %s (no matching send)" %
                    (rk, rest[0].get("dtype"), rest[0].get("count"), frm, frm, recs[frm]["signature"]))
    return None


def lane_story(dump, lane_id):
    """What lane `lane_id` of a rank is doing, following who writes what its head waits for."""
    lane = dump.lanes.get(lane_id)
    if lane is None:
        return "its lane %d has no pending work" % lane_id
    if lane.get("head") is None:
        return "its lane %d has work pending but none at its head right now (waiting for a worker)" % lane_id
    return "its lane %d is at %s" % (lane_id, head_story(dump, lane_id, 0, {lane_id}))


def head_story(dump, lane_id, depth, seen):
    """The head of a lane: the instruction, its state, and what it waits for (who writes it,
    and what that writer's lane is doing, a few steps deep)."""
    head = dump.lanes[lane_id]["head"]
    state = head.get("lane_state", "?")
    text = instr_words(head)
    coll = dump.by_instr.get(head.get("instr"))
    if coll is not None:
        c, r = coll
        text += ", collective seq %d %s of %s (%s)" % (r["seq"], r["signature"], ALIASES.get(c["id"], c["id"]), r["state"])
    if state == "BLOCKED":
        waits = head.get("waits_for", [])
        if not waits:
            return text + ", BLOCKED (its predecessors have just completed)"
        return text + ", BLOCKED on " + "; ".join(writer_story(dump, w, depth, seen) for w in waits)
    if state == "RUNNING":
        if head.get("collective_wait") and coll is not None:
            return text + ", RUNNING: it waits in the collective for its peers"
        if head.get("collective_wait"):
            return text + ", RUNNING: " + head["collective_wait"]
        waits = head.get("waits_for", [])
        if not waits:
            return text + ", RUNNING its callback and not waiting on anything flowlane tracks (computing, or " \
                          "blocked outside flowlane: a callback that never returns?)"
        return text + ", RUNNING its callback, which waits " + "; ".join(
            ("in fl_object_wait for " + writer_story(dump, w, depth, seen)) if "writer" in w else "in " + w.get("call", "?")
            for w in waits)
    if state == "NOT_RUN":
        return text + ", skipped or cancelled (an input was poisoned), finishing"
    return text + ", " + state


def writer_story(dump, wait, depth, seen):
    writer = wait.get("writer", {})
    wl = writer.get("lane")
    wlane = dump.lanes.get(wl) or {}
    if depth < 3 and wl not in seen and (wlane.get("head") or {}).get("instr") == writer.get("instr"):
        seen.add(wl)
        return "object %s written by %s" % (wait.get("object"), head_story(dump, wl, depth + 1, seen))
    return "object %s written by %s, %s" % (wait.get("object"), instr_words(writer), writer.get("state"))


def check_progress(comm, ranks_by_dump, report, edges):
    """The first sequence number not finished everywhere: who waits in it, who is not there."""
    present = sorted(comm.members)
    dead = sorted(set(range(comm.nranks)) - set(present))
    lowest = min(comm.members[r][1]["finished"] for r in present) + 1
    top = max(comm.members[r][1]["queued"] for r in present)
    if lowest > top and not dead:
        return
    seq = lowest
    states = {r: comm.state_at(r, seq) for r in present}
    waiting = [r for r in present if states[r][0] == "issued"]
    sig = next((rec["signature"] for _, rec in states.values() if rec is not None), None)
    what = "seq %d%s" % (seq, " " + sig if sig else "")
    if not waiting and not dead:
        return
    if not waiting and dead:
        report.add((seq, 1, comm.alias), EXIT_DEAD, "DEAD in %s: %s of %d left no dump (the process died, or could "
                   "not write it); the others were last at seq %d" % (comm.alias, rank_list(dead), comm.nranks, seq - 1))
        return
    if dead:
        report.add((seq, 1, comm.alias), EXIT_DEAD,
                   "DEAD in %s: %s of %d left no dump (the process died, or could not write it); %s wait for it in %s" %
                   (comm.alias, rank_list(dead), comm.nranks, rank_list(waiting), what))
    absent = [r for r in present if states[r][0] in ("queued", "not submitted")]
    for r in absent:
        dump, entry = comm.members[r]
        for w in waiting:
            edges.append((comm.members[w][0], dump, "%s waits in %s %s for %s, which has not issued it" % (
                comm.members[w][0].label, comm.alias, what, dump.label)))
    if not absent:
        return
    lines = ["NOT REACHED in %s at %s: %s issued it and wait%s for %s" % (
        comm.alias, what, rank_list(waiting), "s" if len(waiting) == 1 else "", rank_list(absent))]
    for r in absent:
        dump, entry = comm.members[r]
        state, rec = states[r]
        who = "rank %d" % r if dump.label == "rank %d" % r else "rank %d (%s)" % (r, dump.label)
        if state == "queued":
            why = "%s submitted it but never issued it: %s" % (who, lane_story(dump, entry["lane"]))
        else:
            why = "%s has not submitted it (its last is seq %d)" % (who, entry["queued"])
            busy = [lane_story(dump, lid) for lid in sorted(dump.lanes)]
            why += ": " + ("; ".join(busy) if busy else "its engine has no pending work (the program is "
                                                            "elsewhere: blocked outside flowlane, or done)")
        if rec is None and state == "queued":
            why += " (its record of seq %d was dropped from its ring of %d)" % (seq, entry["trace_size"])
        lines.append("  " + why)
    for w in waiting:
        _, entry = comm.members[w]
        if states[w][1] is None:
            lines.append("  rank %d's record of seq %d was dropped from its ring of %d (raise FLOWLANE_COMM_TRACE_SIZE "
                         "to keep it)" % (w, seq, entry["trace_size"]))
    report.add((seq, 2, comm.alias), EXIT_NOT_REACHED, "\n".join(lines))


def check_failures(comm, report):
    """Collectives that failed or were skipped without a mismatch behind them."""
    seqs = sorted({r["seq"] for _, e in comm.members.values() for r in e["records"] if r["state"] in ("failed", "skipped")})
    for seq in seqs:
        if any(k[0] == seq and k[2] == comm.alias and kind == EXIT_MISMATCH for k, kind, _ in report.findings):
            continue
        by_state = {}
        for rk in sorted(comm.members):
            state, rec = comm.state_at(rk, seq)
            label = state if rec is None or not rec.get("status") else "%s (%s)" % (state, rec["status"])
            by_state.setdefault(label, []).append(rk)
        words = "; ".join("%s: %s" % (rank_list(g), s) for s, g in sorted(by_state.items(), key=lambda x: x[1][0]))
        cause = ""
        skipped = [rk for rk in comm.members if comm.state_at(rk, seq)[0] == "skipped"]
        if skipped:
            cause = "\n  %s skipped it (an input was poisoned), so its peers could not complete it" % rank_list(skipped)
        report.add((seq, 3, comm.alias), EXIT_FAILED, "FAILED in %s at seq %d: %s%s" % (comm.alias, seq, words, cause))
        return  # the first one; later ones follow from it


# Backends whose collectives hold their lane until they complete (the host fake's wait in
# its callback; NCCL's engine-wide order). A transport's (MPI's) collectives do not: the
# lane starts one and moves on, so crossed orders on one lane still complete.
LANE_HOLDING_BACKENDS = ("host", "nccl")


def check_orders(comms, report):
    """Two communicators whose collectives two ranks submitted in different orders: a
    deadlock where they share a lane on both ranks (a lane issues in submission order) or
    go through an engine's NCCL order, for backends whose collectives hold their lane;
    harmless where they progress independently."""
    for i, a in enumerate(comms):
        for b in comms[i + 1:]:
            found = crossed(a, b)
            if found is None:
                continue
            text, dx, dy = found
            shared = all(lane_of(a, d) == lane_of(b, d) for d in (dx, dy)) or "nccl" in (a.backend, b.backend)
            holding = a.backend in LANE_HOLDING_BACKENDS and b.backend in LANE_HOLDING_BACKENDS
            if shared and not holding:
                report.notes.append(text + " (%s collectives do not hold their lane, so it does not hang; it would "
                                    "with the host or NCCL backends)" % " and ".join(sorted({a.backend, b.backend})))
            elif shared:
                report.add((0, 4, a.alias), EXIT_CYCLE, text + ". Ranks must submit the collectives of communicators "
                           "that share a lane (or an engine's NCCL order) in one order")
            else:
                report.notes.append(text + " (on different lanes, so it does not hang here; it would where they "
                                    "share a lane or an engine's NCCL order)")


def lane_of(comm, dump):
    for _, (d, e) in comm.members.items():
        if d is dump:
            return e["lane"]
    return None


def crossed(a, b):
    dumps = {}
    for comm in (a, b):
        for _, (dump, entry) in comm.members.items():
            dumps.setdefault(id(dump), [dump, {}, {}])
            dumps[id(dump)][1 if comm is a else 2] = {r["seq"]: r.get("instr") for r in entry["records"] if r.get("instr")}
    orders = []
    for dump, ra, rb in dumps.values():
        if ra and rb:
            orders.append((dump, ra, rb))
    for x in range(len(orders)):
        for y in range(x + 1, len(orders)):
            dx, ax, bx = orders[x]
            dy, ay, by = orders[y]
            for sa in sorted(set(ax) & set(ay)):
                for sb in sorted(set(bx) & set(by)):
                    if (ax[sa] < bx[sb]) != (ay[sa] < by[sb]):
                        first_x = "%s seq %d before %s seq %d" % ((a.alias, sa, b.alias, sb) if ax[sa] < bx[sb] else
                                                               (b.alias, sb, a.alias, sa))
                        first_y = "%s seq %d before %s seq %d" % ((a.alias, sa, b.alias, sb) if ay[sa] < by[sb] else
                                                               (b.alias, sb, a.alias, sa))
                        return ("ORDER crossed between %s and %s: %s submitted %s, %s submitted %s" %
                                (a.alias, b.alias, dx.label, first_x, dy.label, first_y), dx, dy)
    return None


def check_cycles(edges, report):
    """Cycles of waits between ranks (a rank waits in one communicator for a rank that waits in another)."""
    out = {}
    for frm, to, why in edges:
        out.setdefault(id(frm), []).append((to, why))
    reported = set()
    for start, _, _ in edges:
        path = []

        def dfs(node, on_path):
            for to, why in out.get(id(node), []):
                path.append(why)
                if to is start:
                    return True
                if id(to) not in on_path:
                    on_path.add(id(to))
                    if dfs(to, on_path):
                        return True
                    on_path.discard(id(to))
                path.pop()
            return False

        if dfs(start, {id(start)}):
            key = frozenset(path)
            if key not in reported:
                reported.add(key)
                report.add((0, 5, ""), EXIT_CYCLE, "CYCLE of waits across ranks (no collective on it can complete):\n" +
                           "\n".join("  " + w for w in path))


def analyze(docs, max_mismatches=10):
    ranks, comms = build(docs)
    report = Report()
    edges = []
    for c in comms:
        check_mismatches(c, report, max_mismatches)
        check_progress(c, ranks, report, edges)
        check_failures(c, report)
        dropped = sorted((rk, e) for rk, (_, e) in c.members.items() if e.get("records_dropped", 0) > 0)
        if dropped:
            kept = ", ".join("rank %d seq %s" % (rk, "%d-%d" % (min(r["seq"] for r in e["records"]),
                                                                max(r["seq"] for r in e["records"]))
                                                 if e["records"] else "none") for rk, e in dropped)
            report.notes.append("%s: rings dropped their oldest records (FLOWLANE_COMM_TRACE_SIZE; kept: %s): "
                                "collectives outside what every rank kept are not compared" % (c.alias, kept))
    check_orders(comms, report)
    check_cycles(edges, report)
    return ranks, comms, report


def render(ranks, comms, report):
    out = []
    rank_nums = sorted(r.rank for r in ranks if isinstance(r.rank, int))
    out.append("flowlane-comm-analyze: %d dump%s (%s), %d communicator%s" % (
        len(ranks), "" if len(ranks) == 1 else "s", rank_list(rank_nums) if rank_nums else "no ranks",
        len(comms), "" if len(comms) == 1 else "s"))
    for r in sorted(ranks, key=lambda r: (r.rank if isinstance(r.rank, int) else 1 << 30, r.file)):
        d = r.doc
        out.append("  %s: %s (host %s, pid %s; %s: %s)" % (r.label, os.path.basename(r.file), r.host, r.pid,
                                                          d.get("reason", "?"), d.get("detail", "")))
    for c in comms:
        lanes = sorted({e["lane"] for _, e in c.members.values()})
        out.append("  %s = communicator %s: %s backend, %d ranks, on lane%s %s" % (
            c.alias, c.id, c.backend, c.nranks, "" if len(lanes) == 1 else "s", ", ".join(map(str, lanes))))
    out.append("")
    for _, _, text in sorted(report.findings, key=lambda f: f[0]):
        out.append(text)
    if not report.findings:
        out.append("every collective of every communicator matched on every rank, and none is waiting")
    for n in report.notes:
        out.append("note: " + n)
    status = report.exit_status()
    out.append("verdict: %s (exit %d)" % (VERDICTS[status], status))
    return "\n".join(out) + "\n", status


class Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 1, not argparse's 2 (which means a mismatch here)
        self.print_usage(sys.stderr)
        sys.stderr.write("%s: error: %s\n" % (self.prog, message))
        sys.exit(EXIT_INPUT)


def main(argv=None):
    ap = Parser(prog="flowlane-comm-analyze", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="exit status: 0 agree, 1 bad input, 2 mismatch, 3 not reached, 4 dead rank, "
                                        "5 cycle or crossed order, 6 failed collectives")
    ap.add_argument("paths", nargs="+", metavar="DIR_OR_FILE", help="dump files, or folders of them (*.json)")
    ap.add_argument("--max-mismatches", type=int, default=10, help="stop reporting a communicator's mismatches "
                                                                    "after this many (default 10)")
    args = ap.parse_args(argv)
    try:
        docs = [load(f) for f in dump_files(args.paths)]
        text, status = render(*analyze(docs, args.max_mismatches))
    except InputError as e:
        sys.stderr.write("flowlane-comm-analyze: %s\n" % e)
        return EXIT_INPUT
    sys.stdout.write(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
