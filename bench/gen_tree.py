#!/usr/bin/env python3
"""Deterministic generator of a tree shaped like a real JavaScript project.

    gen_tree.py OUT [--seed S] [--scale F]          create the tree in OUT (must be empty/absent)
    gen_tree.py OUT --changes N --round R [--seed S] [--list-out FILE] [--json]
                                                     rewrite N files of an existing tree

Shape at --scale 1 (everything scales linearly with --scale):
  ~32,000 files in ~4,800 directories, ~550 MB; median file ~1.1 KB; ~75 % of the files
  under 4 KiB; 55 files over 1 MiB holding about half of the bytes; 2,000 source files
  under src/; the rest under node_modules/ in package-like directories (package.json,
  index.js, lib/..., dist/..., README.md, LICENSE).

Text files are slices of a generated code-like corpus (identifiers, keywords, strings),
so they compress roughly like real code; the big files are binaries made of random and
repeated blocks.

Change mode rewrites N deterministic files (a different set for every round R) whole, each
with one line added, and prints the changed paths' total size. The same (seed, round) on
two identical trees gives identical results, so several copies of a tree can be kept in
step.
"""

import argparse
import json
import math
import os
import random
import statistics
import sys
import time

KIB = 1024
MIB = 1024 * 1024

# Targets at scale 1.
T_FILES = 32000
T_DIRS = 4800
T_BYTES = 550_000_000
T_BIG = 55
T_SRC = 2000
T_MEDIAN = 1100
T_UNDER4K = 0.75

# Size model of the non-big files: log-normal (median ~1.1 KB, sigma 1.9) capped under
# 1 MiB, plus 0.6 % mid-size bundles/maps between 64 KiB and 1000 KiB.
SMALL_MEDIAN = 1300
SMALL_SIGMA = 1.8
MID_FRACTION = 0.006

WORDS = (
    "value key index item list map set get put node data buffer stream error callback "
    "options config result request response handler event emitter module exports require "
    "import default async await promise resolve reject then catch finally state props "
    "render component element context provider store action reducer dispatch selector "
    "schema type string number boolean object array function symbol undefined null "
    "parse format encode decode serialize validate transform merge clone compare hash "
    "path file dir read write open close flush size length count offset limit start end "
    "token lexer parser scanner ast visitor plugin loader resolver cache queue pool "
    "worker thread timer interval timeout retry backoff logger debug trace warn info "
    "user session auth login logout account profile settings theme style color width "
    "height layout grid row column cell table header footer body title label input "
    "button form field submit change click focus blur hover scroll resize mount update"
).split()
KEYWORDS = ["const", "let", "var", "return", "if", "else", "for", "while", "new", "this",
            "typeof", "instanceof", "throw", "try", "switch", "case", "break", "export"]


def ident(r):
    n = r.randint(1, 3)
    w = [r.choice(WORDS) for _ in range(n)]
    return w[0] + "".join(x.capitalize() for x in w[1:])


def code_line(r, depth):
    ind = "  " * depth
    k = r.random()
    if k < 0.16:
        return f"{ind}const {ident(r)} = {ident(r)}({ident(r)}, {r.randint(0, 999)});"
    if k < 0.26:
        return f"{ind}if ({ident(r)}.{ident(r)} === '{r.choice(WORDS)}') {{"
    if k < 0.34:
        return f"{ind}return {ident(r)}.{ident(r)}({ident(r)});"
    if k < 0.42:
        return f"{ind}}}"
    if k < 0.50:
        return f"{ind}function {ident(r)}({ident(r)}, {ident(r)}) {{"
    if k < 0.56:
        return f"{ind}// {' '.join(r.choice(WORDS) for _ in range(r.randint(3, 12)))}"
    if k < 0.62:
        return f"{ind}var {ident(r)} = require('{r.choice(WORDS)}-{r.choice(WORDS)}');"
    if k < 0.68:
        return f"{ind}{ident(r)}.{ident(r)} = {r.choice(KEYWORDS)} {ident(r)};"
    if k < 0.74:
        return f"{ind}export {r.choice(['const', 'function', 'class', 'type'])} {ident(r)} = {r.randint(0, 1 << 16)};"
    if k < 0.80:
        return ""
    if k < 0.88:
        return f"{ind}  {ident(r)}: {r.choice(['true', 'false', 'null', repr(r.choice(WORDS))])},"
    return f"{ind}{ident(r)}({ident(r)}, function ({ident(r)}) {{ return {ident(r)} + {r.randint(0, 99)}; }});"


def make_corpus(r, size):
    """Code-like text of about `size` bytes."""
    out = []
    n = 0
    depth = 0
    while n < size:
        line = code_line(r, depth)
        s = line.rstrip()
        if s.endswith("{"):
            depth = min(depth + 1, 5)
        elif s.endswith("}"):
            depth = max(depth - 1, 0)
        out.append(line)
        n += len(line) + 1
    return ("\n".join(out) + "\n").encode()


def make_prose(r, size):
    out = []
    n = 0
    while n < size:
        if r.random() < 0.1:
            line = "## " + " ".join(r.choice(WORDS) for _ in range(r.randint(1, 4))).title()
        elif r.random() < 0.1:
            line = "```js\n" + code_line(r, 0) + "\n```"
        else:
            line = " ".join(r.choice(WORDS) for _ in range(r.randint(6, 18))).capitalize() + "."
        out.append(line)
        n += len(line) + 1
    return ("\n".join(out) + "\n").encode()


LICENSE = b"""MIT License

Copyright (c) contributors

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT.
"""


# ---------------------------------------------------------------------------------------
# Plan: the list of (path, kind, size) fixed by (seed, scale), no content yet.
# ---------------------------------------------------------------------------------------

def small_size(r):
    if r.random() < MID_FRACTION:
        return int(math.exp(r.uniform(math.log(64 * KIB), math.log(1000 * KIB))))
    x = int(r.lognormvariate(math.log(SMALL_MEDIAN), SMALL_SIGMA))
    return max(0, min(x, MIB - 4096))


def plan_tree(seed, scale):
    r = random.Random(f"plan-{seed}")
    n_files = max(50, round(T_FILES * scale))
    n_dirs = max(10, round(T_DIRS * scale))
    n_src = max(10, round(T_SRC * scale))
    n_big = max(1, round(T_BIG * scale))
    dirs = []  # relative dir paths (excluding root)
    files = []  # [path, kind, size]

    def add_dir(d):
        dirs.append(d)
        return d

    # --- src/: n_src files in about n_src/8 dirs, nested up to 3 levels.
    add_dir("src")
    n_src_dirs = max(2, n_src // 8)
    src_dirs = ["src"]
    while len(src_dirs) < n_src_dirs:
        parent = r.choice(src_dirs[: max(1, len(src_dirs))])
        if parent.count("/") >= 3:
            parent = "src"
        d = f"{parent}/{ident(r)}"
        if d in src_dirs:
            continue
        src_dirs.append(add_dir(d))
    for i in range(n_src):
        d = r.choice(src_dirs)
        ext = r.choice([".ts", ".ts", ".tsx", ".js", ".jsx", ".css", ".json"])
        files.append([f"{d}/{ident(r)}_{i}{ext}", "code", 0])

    # --- node_modules/: packages; each has a root, lib/ and dist/ and sometimes lib/<sub>/.
    add_dir("node_modules")
    budget_dirs = n_dirs - len(dirs)
    pkgs = []
    scopes = {}
    used = set()
    while budget_dirs > 3:
        name = f"{r.choice(WORDS)}-{r.choice(WORDS)}" if r.random() < 0.7 else r.choice(WORDS) + str(r.randint(0, 99))
        if r.random() < 0.15:
            scope = "@" + r.choice(WORDS)
            if scope not in scopes:
                scopes[scope] = add_dir(f"node_modules/{scope}")
                budget_dirs -= 1
            name = f"{scope}/{name}"
        if name in used:
            continue
        used.add(name)
        root = add_dir(f"node_modules/{name}")
        pdirs = [add_dir(f"{root}/lib"), add_dir(f"{root}/dist")]
        budget_dirs -= 3
        while budget_dirs > 0 and r.random() < 0.35:
            pdirs.append(add_dir(f"{root}/lib/{ident(r)}_{len(pdirs)}"))
            budget_dirs -= 1
        pkgs.append((name, root, pdirs, r.paretovariate(1.2)))
    for name, root, pdirs, _w in pkgs:
        files.append([f"{root}/package.json", "pkgjson", 0])
        files.append([f"{root}/index.js", "code", 0])
        files.append([f"{root}/README.md", "prose", 0])
        files.append([f"{root}/LICENSE", "license", len(LICENSE)])
    # Remaining files go to package dirs, weighted by a heavy-tailed package weight.
    remaining = n_files - len(files)
    weights = [w for *_x, w in pkgs]
    cum = []
    acc = 0.0
    for w in weights:
        acc += w
        cum.append(acc)
    import bisect
    counters = {}
    for i in range(max(0, remaining)):
        p = pkgs[min(len(pkgs) - 1, bisect.bisect_left(cum, r.random() * acc))]
        d = r.choice(p[2])
        ext = r.choice([".js", ".js", ".js", ".d.ts", ".mjs", ".cjs", ".js.map", ".json"])
        k = counters.get(d, 0)
        counters[d] = k + 1
        files.append([f"{d}/{ident(r)}_{k}{ext}", "code", 0])

    # Sizes of the ordinary files.
    for f in files:
        if f[1] == "license":
            continue
        f[2] = small_size(r)
        if f[1] == "pkgjson":
            f[2] = max(f[2] // 4, 300)
    # Big binaries: replace n_big random node_modules files by native modules / wasm /
    # bundles; total bytes of big files ~ total bytes of the rest.
    small_total = sum(f[2] for f in files)
    big_target = max(int(T_BYTES * scale) - small_total, n_big * (MIB + 64 * KIB))
    cand = [i for i, f in enumerate(files) if f[0].startswith("node_modules/") and f[1] == "code"]
    picks = r.sample(cand, n_big)
    raw = [math.exp(r.uniform(math.log(1.2 * MIB), math.log(16 * MIB))) for _ in picks]
    fac = big_target / sum(raw)
    for i, x in zip(picks, raw):
        base = files[i][0].rsplit("/", 1)[0]
        ext = r.choice([".node", ".wasm", ".bin", ".pack"])
        files[i] = [f"{base}/{ident(r)}_big{i}{ext}", "binary", max(int(x * fac), MIB + 64 * KIB)]
    return dirs, files


# ---------------------------------------------------------------------------------------
# Content
# ---------------------------------------------------------------------------------------

class Content:
    def __init__(self, seed):
        r = random.Random(f"corpus-{seed}")
        self.code = make_corpus(r, 6 * MIB)
        self.prose = make_prose(r, 1 * MIB)
        self.r = random.Random(f"content-{seed}")
        self.blocks = [r.randbytes(64 * KIB) for _ in range(16)]

    def text(self, corpus, size):
        if size <= 0:
            return b""
        out = []
        while size > 0:
            n = min(size, len(corpus) // 2)
            off = self.r.randrange(0, len(corpus) - n)
            # start on a line boundary when one is near
            nl = corpus.find(b"\n", off, off + 200)
            if nl != -1 and nl + 1 + n <= len(corpus):
                off = nl + 1
            out.append(corpus[off:off + n])
            size -= n
        return b"".join(out)

    def pkgjson(self, name, size):
        r = self.r
        deps = {f"{r.choice(WORDS)}-{r.choice(WORDS)}": f"^{r.randint(0, 9)}.{r.randint(0, 30)}.{r.randint(0, 20)}"
                for _ in range(r.randint(0, 12))}
        d = {"name": name, "version": f"{r.randint(0, 9)}.{r.randint(0, 30)}.{r.randint(0, 20)}",
             "description": " ".join(r.choice(WORDS) for _ in range(8)), "main": "index.js",
             "license": "MIT", "dependencies": deps,
             "scripts": {"build": "tsc -p .", "test": "node test.js"}}
        b = json.dumps(d, indent=2).encode() + b"\n"
        if len(b) < size:
            b += b" " * 0  # keep real JSON; size is approximate for package.json
        return b

    def binary(self, size):
        """Mix of fresh random 64 KiB blocks (~50 %), repeated blocks and zero runs."""
        r = self.r
        out = []
        n = 0
        while n < size:
            k = r.random()
            if k < 0.5:
                b = r.randbytes(64 * KIB)
            elif k < 0.85:
                b = r.choice(self.blocks)
            else:
                b = bytes(64 * KIB)
            out.append(b)
            n += len(b)
        return b"".join(out)[:size]

    def for_file(self, path, kind, size):
        if kind == "code":
            return self.text(self.code, size)
        if kind == "prose":
            return self.text(self.prose, size)
        if kind == "license":
            return LICENSE
        if kind == "pkgjson":
            return self.pkgjson(path.split("node_modules/", 1)[1].rsplit("/", 1)[0], size)
        return self.binary(size)


def generate(out, seed, scale):
    t0 = time.time()
    dirs, files = plan_tree(seed, scale)
    c = Content(seed)
    os.makedirs(out, exist_ok=True)
    if os.listdir(out):
        sys.exit(f"gen_tree: {out} is not empty")
    for d in dirs:
        os.makedirs(os.path.join(out, d), exist_ok=True)
    for path, kind, size in files:
        data = c.for_file(path, kind, size)
        fd = os.open(os.path.join(out, path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            mv = memoryview(data)
            while mv:
                n = os.write(fd, mv)
                mv = mv[n:]
        finally:
            os.close(fd)
    return time.time() - t0


# ---------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------

def summarize(root):
    sizes = []
    ndirs = 0
    for dp, dn, fn in os.walk(root):
        ndirs += len(dn)
        for f in fn:
            sizes.append(os.lstat(os.path.join(dp, f)).st_size)
    total = sum(sizes)
    big = [s for s in sizes if s > MIB]
    src = 0
    if os.path.isdir(os.path.join(root, "src")):
        src = sum(len(fn) for _, _, fn in os.walk(os.path.join(root, "src")))
    return {
        "files": len(sizes), "dirs": ndirs, "bytes": total,
        "median": statistics.median(sizes) if sizes else 0,
        "under_4k_pct": 100.0 * sum(1 for s in sizes if s < 4096) / max(1, len(sizes)),
        "big_files": len(big), "big_bytes": sum(big),
        "big_bytes_pct": 100.0 * sum(big) / max(1, total),
        "src_files": src,
    }


def check(s, scale):
    """Compare a summary with the targets (scaled); returns list of (name, value, target, ok)."""
    def within(v, t, tol):
        return abs(v - t) <= tol * t
    return [
        ("files", s["files"], T_FILES * scale, within(s["files"], T_FILES * scale, 0.05)),
        ("dirs", s["dirs"], T_DIRS * scale, within(s["dirs"], T_DIRS * scale, 0.10)),
        ("bytes", s["bytes"], T_BYTES * scale, within(s["bytes"], T_BYTES * scale, 0.15)),
        ("median", s["median"], T_MEDIAN, within(s["median"], T_MEDIAN, 0.15)),
        ("under_4k_pct", round(s["under_4k_pct"], 1), 75, within(s["under_4k_pct"], 75, 0.05)),
        ("big_files", s["big_files"], max(1, round(T_BIG * scale)), within(s["big_files"], max(1, round(T_BIG * scale)), 0.1)),
        ("big_bytes_pct", round(s["big_bytes_pct"], 1), 50, within(s["big_bytes_pct"], 50, 0.2)),
        ("src_files", s["src_files"], round(T_SRC * scale), within(s["src_files"], T_SRC * scale, 0.05)),
    ]


# ---------------------------------------------------------------------------------------
# Changes
# ---------------------------------------------------------------------------------------

def list_files(root):
    out = []
    for dp, dn, fn in os.walk(root):
        dn[:] = sorted(d for d in dn if d not in (".git",))
        rel = os.path.relpath(dp, root)
        for f in sorted(fn):
            out.append(f if rel == "." else f"{rel}/{f}")
    return out


def apply_changes(root, n, rnd, seed):
    """Rewrite n files whole, each with one line added. ~70 % of the picks come from src/,
    the rest from node_modules/; big binaries (> 1 MiB) are never picked."""
    files = list_files(root)
    src = [f for f in files if f.startswith("src/")]
    nm = [f for f in files if not f.startswith("src/")]
    r = random.Random(f"changes-{seed}-{rnd}")
    n_src = min(len(src), round(n * 0.7))
    picks = r.sample(src, n_src)
    rest = [f for f in r.sample(nm, min(len(nm), n * 3))]
    for f in rest:
        if len(picks) >= n:
            break
        if os.lstat(os.path.join(root, f)).st_size <= MIB:
            picks.append(f)
    total = 0
    for i, f in enumerate(picks):
        p = os.path.join(root, f)
        with open(p, "rb") as fh:
            data = fh.read()
        cut = data.find(b"\n", len(data) // 2)
        cut = len(data) if cut == -1 else cut + 1
        line = f"// change {rnd}.{i} {r.getrandbits(64):016x}\n".encode()
        new = data[:cut] + line + data[cut:]
        with open(p, "wb") as fh:  # whole rewrite, like an editor saving the file
            fh.write(new)
        total += len(new)
    return picks, total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--changes", type=int, help="rewrite N files of an existing tree")
    ap.add_argument("--round", type=int, default=1)
    ap.add_argument("--list-out", help="change mode: write changed paths (relative) here")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON only")
    ap.add_argument("--no-summary", action="store_true")
    a = ap.parse_args()

    if a.changes is not None:
        picks, total = apply_changes(a.out, a.changes, a.round, a.seed)
        if a.list_out:
            with open(a.list_out, "w") as fh:
                fh.write("".join(p + "\n" for p in picks))
        res = {"round": a.round, "changed_files": len(picks), "changed_bytes": total}
        print(json.dumps(res) if a.json else f"round {a.round}: rewrote {len(picks)} files, {total} bytes")
        return

    secs = generate(a.out, a.seed, a.scale)
    if a.no_summary:
        return
    s = summarize(a.out)
    s["seconds"] = round(secs, 2)
    if a.json:
        print(json.dumps(s))
        return
    print(f"generated {a.out} (seed {a.seed}, scale {a.scale}) in {secs:.1f} s")
    print(f"  files {s['files']}, dirs {s['dirs']}, bytes {s['bytes']} ({s['bytes'] / 1e6:.0f} MB), "
          f"median {s['median']:.0f} B, under 4 KiB {s['under_4k_pct']:.1f} %, "
          f"{s['big_files']} files > 1 MiB holding {s['big_bytes']} B ({s['big_bytes_pct']:.1f} %), "
          f"src files {s['src_files']}")
    bad = 0
    for name, v, t, ok in check(s, a.scale):
        print(f"  {'ok  ' if ok else 'MISS'} {name:14} {v!s:>12}  target ~{t:g}")
        bad += not ok
    if bad:
        print(f"  {bad} figure(s) off target")


if __name__ == "__main__":
    main()
