# shellcheck shell=bash
# Helpers of the agentbox benchmark suite: loop filesystems, timing, result rows, table.
# Sourced by bench/run. Needs: bash >= 5, python3, hyperfine, losetup, mkfs.btrfs, mkfs.ext4.

BENCH_DIR=${BENCH_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/out}
BENCH_WORK=${BENCH_WORK:-/var/tmp/agentbox-bench}
ROWS=${ROWS:-$BENCH_OUT/rows.jsonl}
mkdir -p "$BENCH_OUT" "$BENCH_WORK"

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# ---------------------------------------------------------------------------------------
# Cleanup registry: everything created here is undone on exit (also on error / Ctrl-C).
# ---------------------------------------------------------------------------------------
_CLEANUP=()
on_cleanup() { _CLEANUP+=("$*"); }
run_cleanup() {
    # The loop variable has a name no cleanup command uses: they run in this scope.
    local _cleanup_idx
    for ((_cleanup_idx = ${#_CLEANUP[@]} - 1; _cleanup_idx >= 0; _cleanup_idx--)); do
        eval "${_CLEANUP[$_cleanup_idx]}" >/dev/null 2>&1 || true
    done
    _CLEANUP=()
}
trap run_cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------
# Loop filesystems
# ---------------------------------------------------------------------------------------
# loopfs_create KIND SIZE MNT   KIND = btrfs | ext4; SIZE as for truncate (sparse image).
# Sets LOOPDEV. The image lives in $BENCH_WORK/img; everything is torn down by
# loopfs_teardown MNT or at exit.
declare -A _LOOP_DEV _LOOP_IMG
loopfs_create() {
    local kind=$1 size=$2 mnt=$3 img dev
    mkdir -p "$BENCH_WORK/img" "$mnt"
    img=$BENCH_WORK/img/$(basename "$mnt").$kind.img
    rm -f "$img"
    truncate -s "$size" "$img"
    dev=$(losetup --find --show "$img")
    case $kind in
        btrfs) mkfs.btrfs -q -f -K "$dev" >/dev/null ;;
        # Inode tables and journal written now, as on a disk formatted long ago: left lazy,
        # a kernel thread zeroes them in the background while the measurements run (an
        # import then took 3 s instead of 1.8 s, whichever tool ran at that moment).
        ext4) mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$dev" >/dev/null ;;
        *) echo "loopfs_create: unknown kind $kind" >&2; return 1 ;;
    esac
    mount "$dev" "$mnt"
    _LOOP_DEV[$mnt]=$dev
    _LOOP_IMG[$mnt]=$img
    on_cleanup "loopfs_teardown '$mnt'"
    LOOPDEV=$dev
}

# umount_under PATH...   unmounts everything mounted at or below each PATH, deepest first
umount_under() {
    local p m
    for p in "$@"; do
        while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(
            awk -v p="$p" '$2 == p || index($2, p "/") == 1 {print $2}' /proc/self/mounts | sort -r)
    done
}

loopfs_teardown() {
    local mnt=$1 dev=${_LOOP_DEV[$1]:-} img=${_LOOP_IMG[$1]:-}
    [[ -n $dev ]] || return 0
    # Anything still using the mount (an overlay mount of the layers backend, a container)
    # is unmounted first, deepest first.
    local m
    while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(
        awk -v p="$mnt/" 'index($2, p) == 1 {print $2}' /proc/self/mounts | sort -r)
    umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    losetup -d "$dev" 2>/dev/null || true
    rm -f "$img"
    unset "_LOOP_DEV[$mnt]" "_LOOP_IMG[$mnt]"
}

# settle PATH: write out what is dirty on PATH's filesystem and, on btrfs, wait for the
# cleaner to finish freeing deleted subvolumes, so that a measurement that follows pays
# only for its own work (the cleaner, left running, took one import from 3.5 s to 15 s).
settle() {
    local p=$1
    sync -f "$p" 2>/dev/null || sync
    if [[ $(stat -f -c %T "$p") == btrfs ]]; then
        btrfs subvolume sync "$p" >/dev/null 2>&1 || true
    fi
}
# hyperfine's --prepare runs in a shell of its own
export -f settle

# Used bytes of the filesystem holding PATH (after a sync), for "true usage" deltas.
fs_used_bytes() {
    local p=$1
    sync -f "$p" 2>/dev/null || sync
    if [[ $(stat -f -c %T "$p") == btrfs ]]; then
        btrfs filesystem sync "$p" >/dev/null 2>&1 || true
        # used = data + metadata + system, as allocated inside the chunks
        btrfs filesystem usage -b "$p" 2>/dev/null | awk '/^ *Used:/ {print $2; exit}'
    else
        df -B1 --output=used "$p" | tail -1 | tr -d ' '
    fi
}

# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------
# now_ns: wall clock in ns without forking (bash 5 EPOCHREALTIME), else date +%s%N.
now_ns() {
    if [[ -n ${EPOCHREALTIME:-} ]]; then
        local t=${EPOCHREALTIME/./}
        echo "${t}000"
    else
        date +%s%N
    fi
}

# time_ms CMD...  runs CMD (stdout/stderr to $BENCH_OUT/cmd.log) and sets LAST_MS.
# Fails (returns CMD's status) if CMD fails.
time_ms() {
    local t0 t1 rc=0
    t0=${EPOCHREALTIME/./}
    "$@" >>"$BENCH_OUT/cmd.log" 2>&1 || rc=$?
    t1=${EPOCHREALTIME/./}
    LAST_MS=$(( (t1 - t0) / 1000 )).$(printf '%03d' $(( (t1 - t0) % 1000 )))
    if ((rc != 0)); then
        log "command failed ($rc): $*  (see $BENCH_OUT/cmd.log)"
    fi
    return $rc
}

# stats MS...  prints "median min max n" of the figures (ms)
stats() {
    python3 - "$@" <<'EOF'
import statistics, sys
v = [float(x) for x in sys.argv[1:]]
print(f"{statistics.median(v):.3f} {min(v):.3f} {max(v):.3f} {len(v)}" if v else "nan nan nan 0")
EOF
}
median() { stats "$@" | cut -d' ' -f1; }

# measure NAME RUNS CMD [PREPARE]
# hyperfine with --export-json $BENCH_OUT/NAME.json (and --prepare PREPARE when given, for
# commands that change state); sets MEASURE_MS to the median in ms.
measure() {
    local name=$1 runs=$2 cmd=$3 prepare=${4:-} json=$BENCH_OUT/$1.json
    local args=(--runs "$runs" --export-json "$json" --style none)
    # MEASURE_NO_SHELL=1: run the command directly (for commands of a few ms, where a shell's
    # startup would dominate); it must then be a plain command line without quoting.
    if [[ -n ${MEASURE_NO_SHELL:-} ]]; then args+=(-N); else args+=(--shell=bash); fi
    [[ -n $prepare ]] && args+=(--prepare "$prepare")
    [[ -z $prepare ]] && args+=(--warmup 1)
    if ! hyperfine "${args[@]}" "$cmd" >>"$BENCH_OUT/cmd.log" 2>&1; then
        log "hyperfine failed for $name: $cmd (see $BENCH_OUT/cmd.log)"
        MEASURE_MS=
        return 1
    fi
    MEASURE_MS=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.3f" % (r["median"] * 1000))' "$json")
}

# ---------------------------------------------------------------------------------------
# Result rows and the table
# ---------------------------------------------------------------------------------------
# add_row KEY=VALUE...   keys: scenario fs agentbox alt alt_fs alt_value unit target
#   target forms: "ratio<=X" (agentbox/alt <= X), "faster>=X" (alt/agentbox >= X),
#   "abs<=X" (agentbox <= X in unit), "disk<=X+A" (agentbox <= X*alt + A bytes), "" (info)
#   empty agentbox/alt_value = not measured.
add_row() {
    python3 - "$ROWS" "$@" <<'EOF'
import json, sys
row = {}
for kv in sys.argv[2:]:
    k, _, v = kv.partition("=")
    row[k] = v
for k in ("agentbox", "alt_value"):
    v = row.get(k, "")
    row[k] = float(v) if v not in ("", None) else None
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(row) + "\n")
EOF
}

# print_table [JSON_OUT]   prints the table of $ROWS; saves rows + meta as JSON.
print_table() {
    local meta=${BENCH_META:-'{}'}
    python3 - "$ROWS" "${1:-}" "$meta" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]

def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v:.1f} ms" if v < 1000 else f"{v / 1000:.2f} s"
    if unit == "bytes":
        return f"{v / 1048576:.2f} MiB"
    return f"{v:g} {unit}"

def judge(r):
    a, b, t = r["agentbox"], r["alt_value"], r.get("target", "")
    ratio = a / b if (a is not None and b) else None
    r["ratio"] = ratio
    met = "n/a"
    if t and a is not None:
        kind, _, x = t.partition("<=") if "<=" in t else t.partition(">=")
        if t.startswith("abs<="):
            met = a <= float(x)
        elif t.startswith("ratio<=") and ratio is not None:
            met = ratio <= float(x)
        elif t.startswith("faster>=") and ratio:
            met = (1 / ratio) >= float(x)
        elif t.startswith("disk<=") and b is not None:
            f, _, allow = x.partition("+")
            met = a <= float(f) * b + float(allow or 0)
    r["met"] = met
    return r

def target_text(r):
    t, u = r.get("target", ""), r.get("unit", "")
    if not t:
        return "(info)"
    if t.startswith("abs<="):
        return f"<= {t[5:]} {u}"
    if t.startswith("ratio<="):
        return f"<= {t[7:]}x alt"
    if t.startswith("faster>="):
        return f">= {t[8:]}x faster"
    if t.startswith("disk<="):
        f, _, allow = t[6:].partition("+")
        return f"<= {f}x alt + {float(allow or 0) / 1048576:.2f} MiB meta"
    return t

def ratio_text(r):
    x = r["ratio"]
    if x is None:
        return "-"
    return f"{x:.2f}x" if x >= 1 else f"{x:.3f}x ({1 / x:.1f}x faster)"

hdr = ["scenario", "filesystem", "agentbox", "alternative", "alt figure", "ratio", "target", "met?"]
out = []
for r in map(judge, rows):
    alt = r.get("alt", "")
    if r.get("alt_fs"):
        alt += f" [{r['alt_fs']}]"
    met = r["met"]
    out.append([r.get("scenario", ""), r.get("fs", ""), fmt(r["agentbox"], r.get("unit", "")), alt,
                fmt(r["alt_value"], r.get("unit", "")), ratio_text(r), target_text(r),
                "n/a" if met == "n/a" else ("yes" if met else "NO")])
w = [max(len(str(x[i])) for x in out + [hdr]) for i in range(len(hdr))]
line = lambda c: "| " + " | ".join(str(x).ljust(w[i]) for i, x in enumerate(c)) + " |"
print(line(hdr))
print("|" + "|".join("-" * (n + 2) for n in w) + "|")
for c in out:
    print(line(c))
if sys.argv[2]:
    try:
        meta = json.loads(sys.argv[3])
    except Exception:
        meta = {}
    json.dump({"meta": meta, "rows": rows}, open(sys.argv[2], "w"), indent=2)
    print(f"\nsaved {sys.argv[2]}")
EOF
}

# ---------------------------------------------------------------------------------------
# agentbox JSON (tolerant parsing; no jq)
# ---------------------------------------------------------------------------------------
# ab_ids < log.json        node ids, oldest first
# ab_field KEY < x.json    first value of KEY found anywhere in the document
ab_ids() { python3 "$BENCH_DIR/abjson.py" ids; }
ab_field() { python3 "$BENCH_DIR/abjson.py" field "$1"; }

# ---------------------------------------------------------------------------------------
# Docker (for comparisons): docker_up starts dockerd when needed; sets DOCKER_NOTE on failure
# ---------------------------------------------------------------------------------------
DOCKER_NOTE=
DOCKERD_PID=
docker_up() {
    if [[ -n ${BENCH_NO_DOCKER:-} ]]; then DOCKER_NOTE="BENCH_NO_DOCKER set"; return 1; fi
    command -v docker >/dev/null || { DOCKER_NOTE="docker CLI not installed (apt-get install docker.io)"; return 1; }
    docker info >/dev/null 2>&1 && return 0
    command -v dockerd >/dev/null || { DOCKER_NOTE="dockerd not installed"; return 1; }
    log "starting dockerd (log: /tmp/dockerd.log)"
    dockerd >/tmp/dockerd.log 2>&1 &
    DOCKERD_PID=$!
    on_cleanup "kill $DOCKERD_PID; wait $DOCKERD_PID"
    local i
    for i in $(seq 1 30); do
        docker info >/dev/null 2>&1 && return 0
        kill -0 "$DOCKERD_PID" 2>/dev/null || break
        sleep 1
    done
    DOCKER_NOTE="dockerd did not come up: $(tail -1 /tmp/dockerd.log 2>/dev/null)"
    return 1
}

