#!/usr/bin/env python3
"""Tolerant reader of agentbox --json output (stdin).

    abjson.py ids          node ids of `agentbox --json log ENV`, oldest first
    abjson.py field KEY    first value of KEY anywhere in the document (breadth first)

`log` may print a JSON array of nodes or an object holding a `nodes` (or `log`, `history`)
array; a node is an object with an `id` (or a bare id string). Nodes carrying a numeric
`seq` are ordered by it; otherwise the order printed is taken as oldest first.
"""
import json
import sys


def load():
    text = sys.stdin.read().strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # JSON lines: one node per line
        return [json.loads(l) for l in text.splitlines() if l.strip()]


def ids(doc):
    nodes = doc
    if isinstance(doc, dict):
        for k in ("nodes", "log", "history", "items"):
            if isinstance(doc.get(k), list):
                nodes = doc[k]
                break
        else:
            raise SystemExit("abjson: no node list in log output")
    out = []
    for n in nodes:
        if isinstance(n, str):
            out.append((None, n))
        elif isinstance(n, dict) and "id" in n:
            seq = n.get("seq")
            out.append((seq if isinstance(seq, (int, float)) else None, str(n["id"])))
    if out and all(s is not None for s, _ in out):
        out.sort(key=lambda x: x[0])
    return [i for _, i in out]


def field(doc, key):
    queue = [doc]
    while queue:
        x = queue.pop(0)
        if isinstance(x, dict):
            if key in x:
                return x[key]
            queue.extend(x.values())
        elif isinstance(x, list):
            queue.extend(x)
    raise SystemExit(f"abjson: no {key!r} in output")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    doc = load()
    if sys.argv[1] == "ids":
        print("\n".join(ids(doc)))
    elif sys.argv[1] == "field":
        v = field(doc, sys.argv[2])
        print(json.dumps(v) if isinstance(v, (dict, list)) else v)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
