#!/usr/bin/env python3
"""Reads the flight recorder's dumps of every rank (DIR/rank-R.json, written by dpt on a
timeout, a fatal error or SIGUSR2; framework/comm/flight_recorder.h) and says, per
process group, the first collective where the ranks disagree or stall: which ranks reached
it, in what state, and what each missing rank last completed. Usage: flight.py DIR"""
import glob
import json
import os
import sys


def call_text(e):
    """all_reduce(sum) of 1000 f32 from rank 0, as dpt's messages write a call."""
    text = e["op"] + (f"({e['reduce']})" if "reduce" in e else "")
    if "count" in e and e["op"] != "barrier":
        text += f" of {e['count']} {e['dtype']}"
    if "root" in e:
        text += f" {'to' if e['op'] in ('reduce', 'gather') else 'from'} rank {e['root']}"
    return text


def signature(e):
    return tuple(e.get(k) for k in ("op", "reduce", "dtype", "count", "root"))


def ranks_text(ranks):
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def load(directory):
    """{world rank: dump} of every rank-R.json in directory."""
    dumps = {}
    for path in glob.glob(os.path.join(directory, "rank-*.json")):
        with open(path) as f:
            d = json.load(f)
        dumps[d["rank"]] = d
    return dumps


def group_stall(name, members, rings, dump_time):
    """Lines about one group: members are its world ranks, rings {world rank: ring}."""
    entries = {r: {e["seq"]: e for e in ring["entries"]} for r, ring in rings.items()}
    oldest = {r: min(es, default=1) for r, es in entries.items()}
    newest = {r: max(es, default=0) for r, es in entries.items()}
    seqs = sorted(set().union(*entries.values())) if entries else []
    header = f"group {name} ({len(members)} ranks)"
    for seq in seqs:
        # A number older than a rank's ring was passed by it: it went on to later calls.
        here = {r: es[seq] for r, es in entries.items() if seq in es}
        absent = [r for r in rings if seq not in entries[r] and seq > newest[r]]
        if len({signature(e) for e in here.values()}) > 1:
            lines = [f"{header}: ranks disagree at collective #{seq}:"]
            by_call = {}
            for r, e in here.items():
                by_call.setdefault(call_text(e), []).append(r)
            lines += [f"  {ranks_text(rs)}: {text}" for text, rs in sorted(by_call.items(), key=lambda i: min(i[1]))]
            return lines
        if not absent and all(e["state"] == "completed" for e in here.values()):
            continue
        first = here[min(here)] if here else None
        lines = [f"{header}: collective #{seq} {call_text(first) if first else ''} did not complete"]
        by_state = {}
        for r, e in here.items():
            by_state.setdefault(e["state"], []).append(r)
        for state in ("completed", "started", "queued"):
            if state in by_state:
                rs = by_state[state]
                since = min(here[r]["queued_us"] for r in rs)
                ago = f", called {(dump_time[rs[0]] - since) / 1e6:.1f} s before the dump" if state != "completed" else ""
                lines.append(f"  {state} on {ranks_text(rs)}{ago}")
        for r in sorted(absent):
            done = [s for s, e in entries[r].items() if e["state"] == "completed"]
            if done:
                last = entries[r][max(done)]
                idle = (dump_time[r] - last["completed_us"]) / 1e6
                lines.append(f"  rank {r} never called it: last completed #{max(done)} {call_text(last)}, "
                             f"{idle:.1f} s before its dump")
            else:
                lines.append(f"  rank {r} never called it: it completed no collective on {name}")
        return lines
    if not seqs:
        return [f"{header}: no collectives recorded"]
    return [f"{header}: every rank completed every collective up to #{seqs[-1]}"]


def summary(dumps):
    """The report's lines for the dumps of one job, {world rank: dump}."""
    if not dumps:
        return ["no flight dumps (rank-R.json) found"]
    world_size = max(d["world_size"] for d in dumps.values())
    lines = []
    missing = [r for r in range(world_size) if r not in dumps]
    if missing:
        lines.append(f"no dump from {ranks_text(missing)} (of {world_size})")
    reasons = {}
    for r, d in dumps.items():
        reasons.setdefault(d["reason"].split("; ")[0], []).append(r)  # an error's first clause says enough
    for reason, rs in sorted(reasons.items(), key=lambda i: min(i[1])):
        lines.append(f"{ranks_text(rs)} dumped on: {reason}")
    groups = {}
    for r, d in dumps.items():
        for ring in d["groups"]:
            groups.setdefault(ring["group"], (ring["world_ranks"], {}))[1][r] = ring
    dump_time = {r: d["time_us"] for r, d in dumps.items()}
    for name in sorted(groups, key=lambda n: (n != "world", n)):
        members, rings = groups[name]
        lines += group_stall(name, members, rings, dump_time)
    return lines


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    print("\n".join(summary(load(sys.argv[1]))))


if __name__ == "__main__":
    main()
