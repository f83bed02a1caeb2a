"""Pure parsers for what the compiler produced: TTGIR, PTX, SASS and ptxas/cuobjdump logs.

Every function takes text and returns plain data (dicts, lists, ints), so each can be
tested on real compiler output without a GPU. What the article reads off these
("What the compiler did", Round 0 Step 6, "The P cast"):

* the MMA layout of the dot results: `#ttg.nvidia_mma<{versionMajor = 2, ..., warpsPerCTA
  = [1, 4], instrShape = [16, 8]}>`. versionMajor 2 is mma.sync (SASS HMMA), 3 is Hopper's
  warpgroup MMA (wgmma, SASS HGMMA). warpsPerCTA [1, N] puts the warps side by side along
  the key axis: no warp owns whole rows, so row reductions and P go through shared memory;
* operations inside the key loop (the body of each scf.for): a ttg.local_alloc there is a
  trip through shared memory on every iteration (P in the 16x16 baseline), a
  ttg.convert_layout is a change of layout that may or may not cost anything;
* the pipeline's shared-memory buffers: `!ttg.memdesc<SxKxD...>` allocations;
* SASS opcode counts (HGMMA, HMMA, MUFU.EX2, BAR.SYNC, ...), for the whole kernel and for
  each loop (a backward branch), which is where the per-iteration counts come from.
"""

from __future__ import annotations

import re
from collections import Counter

# --------------------------------------------------------------------------- TTGIR

_LOC = re.compile(r"\s*loc\((?:[^()]|\([^()]*\))*\)")
_ALIAS = re.compile(r"^(#[\w.]+)\s*=\s*(#.*?)\s*$", re.M)
_MMA = re.compile(r"#ttg\.nvidia_mma<\{(.*?)\}>")
_MEMDESC = re.compile(r"!ttg\.memdesc<([0-9x]+)x([a-z]+\d+)((?:,\s*[^,>]+)*)>")
_RESULT = re.compile(r"^\s*(%[\w#:.]+)\s*=\s*([\w.]+)")

MMA_INSTRUCTION = {2: "mma.sync (SASS HMMA)", 3: "wgmma (SASS HGMMA, Hopper warpgroup MMA)",
                   5: "tcgen05.mma (Blackwell)"}


def strip_locations(text: str) -> str:
    """TTGIR without its `loc(...)` suffixes and `#locN = loc(...)` lines."""
    lines = [ln for ln in text.splitlines() if not re.match(r"^#loc\d*\s*=", ln)]
    return "\n".join(_LOC.sub("", ln) for ln in lines)


def parse_attributes(body: str) -> dict:
    """'versionMajor = 3, warpsPerCTA = [8, 1], x = true' -> {'versionMajor': 3, 'warpsPerCTA': [8, 1], 'x': True}."""
    out: dict = {}
    for m in re.finditer(r"(\w+)\s*=\s*(\[[^\]]*\]|[^,]+)", body):
        key, raw = m.group(1), m.group(2).strip()
        if raw.startswith("["):
            items = [s.strip() for s in raw[1:-1].split(",") if s.strip()]
            out[key] = [int(s) if re.fullmatch(r"-?\d+", s) else s for s in items]
        elif re.fullmatch(r"-?\d+", raw):
            out[key] = int(raw)
        elif raw in ("true", "false"):
            out[key] = raw == "true"
        else:
            out[key] = raw
    return out


def layout_aliases(ttgir: str) -> dict[str, str]:
    """The `#name = #ttg.…<{…}>` definitions at the top of a TTGIR module (locations excluded)."""
    return {m.group(1): m.group(2) for m in _ALIAS.finditer(ttgir) if not m.group(1).startswith("#loc")}


def mma_layouts(ttgir: str) -> list[dict]:
    """Every #ttg.nvidia_mma layout alias, parsed: alias, versionMajor/Minor, warpsPerCTA, instrShape."""
    out = []
    for alias, definition in layout_aliases(ttgir).items():
        m = _MMA.fullmatch(definition) or _MMA.search(definition)
        if m:
            attrs = parse_attributes(m.group(1))
            attrs["alias"] = alias
            attrs["instruction"] = MMA_INSTRUCTION.get(attrs.get("versionMajor"), "unknown")
            out.append(attrs)
    return out


def _brace_delta(line: str) -> int:
    return line.count("{") - line.count("}")


def for_loops(ttgir: str) -> list[dict]:
    """Each scf.for, outermost first: its header line, its body lines (nested regions included,
    without the closing brace), its nesting depth and the line number of its header."""
    lines = strip_locations(ttgir).splitlines()
    loops, stack = [], []  # stack of (loop dict, depth at which its body closes)
    depth = 0
    for i, ln in enumerate(lines):
        for loop, _ in stack:
            loop["body"].append(ln)
        if re.search(r"=\s*scf\.for\b|^\s*scf\.for\b", ln) and ln.rstrip().endswith("{"):
            loop = {"line": i + 1, "header": ln.strip(), "body": [], "depth": len(stack)}
            loops.append(loop)
            depth += _brace_delta(ln)
            stack.append((loop, depth - 1))
            continue
        depth += _brace_delta(ln)
        while stack and depth <= stack[-1][1]:
            stack[-1][0]["body"].pop()  # the closing brace of the loop itself
            stack.pop()
    return loops


def _op_name(line: str) -> str | None:
    m = _RESULT.match(line)
    if m:
        return m.group(2)
    m = re.match(r"^\s*([a-z_]+\.[\w.]+)\b", line)
    return m.group(1) if m else None


def op_counts(lines) -> Counter:
    """Operation names (ttg.local_alloc, tt.dot, …) over some TTGIR lines."""
    c: Counter = Counter()
    for ln in lines:
        name = _op_name(ln)
        if name:
            c[name] += 1
    return c


def _memdesc(text: str) -> dict | None:
    m = _MEMDESC.search(text)
    if not m:
        return None
    shape = [int(s) for s in m.group(1).split("x")]
    rest = [s.strip() for s in m.group(3).split(",") if s.strip()]
    return {"shape": shape, "dtype": m.group(2), "encoding": rest[0] if rest else "",
            "mutable": "mutable" in rest}


_BITS = {"bf16": 16, "f16": 16, "f32": 32, "i8": 8, "f8E4M3FN": 8, "f8E5M2": 8, "i32": 32, "i64": 64, "f64": 64}


def memdesc_bytes(desc: dict) -> int:
    n = 1
    for s in desc["shape"]:
        n *= s
    bits = _BITS.get(desc["dtype"], int(re.sub(r"\D", "", desc["dtype"]) or 0))
    return n * bits // 8


def local_allocs(ttgir: str) -> list[dict]:
    """Every ttg.local_alloc: the value it defines, its memdesc (shape, dtype, encoding, mutable),
    its bytes, whether it sits inside a key loop, and the tensor layout it was filled from."""
    loop_lines = set()
    for loop in for_loops(ttgir):
        start = loop["line"]
        loop_lines.update(range(start + 1, start + 1 + len(loop["body"])))
    out = []
    for i, ln in enumerate(strip_locations(ttgir).splitlines(), start=1):
        if "ttg.local_alloc" not in ln:
            continue
        result = ln.split("=")[0].strip()
        desc = _memdesc(ln.split("->")[-1]) or {}
        src = re.search(r"\(tensor<[^,]*,\s*(#[^>]+?)>\)", ln)
        out.append({"value": result, **desc, "bytes": memdesc_bytes(desc) if desc else None,
                    "in_loop": i in loop_lines, "from_layout": src.group(1) if src else None, "line": i})
    return out


def _is_buffer(a: dict) -> bool:
    return bool(a.get("mutable")) and len(a.get("shape", [])) == 3


def shared_accounted(ttgir: str) -> dict:
    """Shared memory the TTGIR's own allocations account for: allocations outside any loop that are
    not pipeline buffers (the Q tile), plus, for the loop that needs most, its pipeline buffers (those
    allocated before it and after the previous loop) and the allocations inside it (P in the baseline).
    Loops run one after another, so their buffers can share memory. Excludes the scratch space of
    cross-warp reductions and layout conversions, which Triton adds later (and which can overlap)."""
    loops = for_loops(ttgir)
    allocs = local_allocs(ttgir)
    starts = [lp["line"] for lp in loops]
    spans = [(lp["line"], lp["line"] + len(lp["body"])) for lp in loops]
    fixed = [a for a in allocs if not a["in_loop"] and not _is_buffer(a)]
    per_loop = [{"buffers": [], "inside": []} for _ in loops]
    for a in allocs:
        if a["in_loop"]:
            idx = max((i for i, (s, e) in enumerate(spans) if s < a["line"] <= e), default=None)
            if idx is not None:
                per_loop[idx]["inside"].append(a)
        elif _is_buffer(a):
            idx = next((i for i, s in enumerate(starts) if s > a["line"]), None)
            if idx is not None:
                per_loop[idx]["buffers"].append(a)
            else:
                fixed.append(a)
    loop_bytes = [sum(x["bytes"] or 0 for x in p["buffers"] + p["inside"]) for p in per_loop]
    worst = max(range(len(loops)), key=lambda i: loop_bytes[i]) if loops else None
    total = sum(a["bytes"] or 0 for a in fixed) + (loop_bytes[worst] if worst is not None else 0)

    def desc(a):
        return f"{a['value']} {'x'.join(map(str, a['shape']))}x{a['dtype']} {a['bytes']} B"

    parts = [desc(a) for a in fixed]
    if worst is not None:
        parts += [desc(a) for a in per_loop[worst]["buffers"]]
        parts += [desc(a) + " (inside the loop)" for a in per_loop[worst]["inside"]]
    return {"bytes": total, "detail": " + ".join(parts) or "no allocations",
            "per_loop_bytes": loop_bytes}


def pipeline_buffers(ttgir: str) -> list[dict]:
    """The multi-buffered allocations the software pipeliner made (mutable, rank 3: buffers x tile)."""
    return [a for a in local_allocs(ttgir) if a.get("mutable") and len(a.get("shape", [])) == 3]


def convert_layouts(lines) -> list[dict]:
    """ttg.convert_layout ops in some lines: source and destination tensor types."""
    out = []
    for ln in lines:
        if "ttg.convert_layout" in ln:
            m = re.search(r":\s*(tensor<.*?>)\s*->\s*(tensor<.*>)\s*$", ln)
            out.append({"from": m.group(1), "to": m.group(2)} if m else {"op": ln.strip()})
    return out


LOOP_OPS = ("ttg.local_alloc", "ttg.local_load", "ttg.local_store", "ttg.convert_layout", "tt.dot",
            "ttng.warp_group_dot", "ttng.warp_group_dot_wait", "ttg.async_copy_global_to_local",
            "ttg.async_wait", "ttng.async_tma_copy_global_to_local", "ttng.barrier_expect", "ttng.wait_barrier",
            "math.exp", "math.exp2", "tt.reduce", "arith.truncf")


def summarize_ttgir(ttgir: str) -> dict:
    """The one-screen facts the article reads off a TTGIR (see the module docstring)."""
    loops = for_loops(ttgir)
    allocs = local_allocs(ttgir)
    per_loop = []
    for loop in loops:
        counts = op_counts(loop["body"])
        per_loop.append({
            "line": loop["line"], "depth": loop["depth"],
            "ops": {k: counts[k] for k in LOOP_OPS if counts[k]},
            "local_alloc": [ln.strip() for ln in loop["body"] if "ttg.local_alloc" in ln],
            "convert_layout": convert_layouts(loop["body"]),
        })
    all_ops = op_counts(strip_locations(ttgir).splitlines())
    mmas = mma_layouts(ttgir)
    return {
        "mma_layouts": mmas,
        "mma_version": sorted({m.get("versionMajor") for m in mmas}),
        "dots": {"tt.dot": all_ops["tt.dot"], "ttng.warp_group_dot": all_ops["ttng.warp_group_dot"]},
        "n_loops": len(loops),
        "local_alloc_in_loop": any(a["in_loop"] for a in allocs),
        "convert_layout_in_loop": any(p["convert_layout"] for p in per_loop),
        "loops": per_loop,
        "local_allocs": allocs,
        "pipeline_buffers": [{"shape": a["shape"], "dtype": a["dtype"], "bytes": a["bytes"], "value": a["value"]}
                             for a in allocs if a.get("mutable") and len(a.get("shape", [])) == 3],
        "uses_tma": bool(all_ops["ttng.async_tma_copy_global_to_local"]),
        "uses_cp_async": bool(all_ops["ttg.async_copy_global_to_local"]),
    }


# --------------------------------------------------------------------------- PTX

def ptx_counts(ptx: str, prefixes=("ex2.approx.ftz.f32", "ex2.approx.f32", "mma.sync", "wgmma.mma_async",
                                    "cp.async.cg", "cp.async.ca", "cp.async.bulk", "bar.sync", "cvt.rn.bf16x2.f32",
                                    "shfl.sync")) -> dict:
    """How many PTX instructions start with each prefix. A prefix matches an instruction that equals
    it or continues it with '.' or whitespace, so 'ex2.approx.f32' does not count '.ftz' ones."""
    ops = Counter()
    for ln in ptx.splitlines():
        s = ln.strip()
        if not s or s.startswith(("//", ".", "$", "{", "}")):
            continue
        s = re.sub(r"^@!?%?\w+\s+", "", s)
        ops[s.split()[0].rstrip(";")] += 1
    return {p: sum(n for op, n in ops.items() if op == p or op.startswith(p + ".")) for p in prefixes}


# --------------------------------------------------------------------------- SASS

# Opcodes the article reads, matched on the whole mnemonic or a '.'-separated prefix of it.
KEY_OPCODES = ("HGMMA", "HMMA", "MUFU.EX2", "FSETP.GEU", "BAR.SYNC", "LDGSTS", "UTMALDG", "UBLKCP",
               "SYNCS", "F2FP", "SHFL", "LDS", "STS", "LDSM", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "LDL", "STL")

_SASS = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s+(?:(@!?U?P(?:T|\d+))\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)"
                   r"\s*([^;]*);")
_LABEL = re.compile(r"^\s*(\.L_[\w]+):")


def sass_instructions(sass: str) -> list[dict]:
    """Parse nvdisasm/cuobjdump SASS: address, predicate, mnemonic, operands (labels give branch targets)."""
    out, labels, pending = [], {}, []
    for ln in sass.splitlines():
        lm = _LABEL.match(ln)
        if lm:
            pending.append(lm.group(1))
            continue
        m = _SASS.match(ln)
        if not m:
            continue
        addr = int(m.group(1), 16)
        for name in pending:
            labels[name] = addr
        pending = []
        out.append({"addr": addr, "pred": m.group(2) or "", "op": m.group(3), "args": m.group(4).strip()})
    for ins in out:
        if ins["op"].startswith("BRA") or ins["op"].startswith("BRX"):
            t = re.search(r"\(?(\.L_\w+)\)?", ins["args"]) or None
            if t and t.group(1) in labels:
                ins["target"] = labels[t.group(1)]
            else:
                h = re.search(r"0x([0-9a-fA-F]+)", ins["args"])
                if h:
                    ins["target"] = int(h.group(1), 16)
    return out


def _matches(op: str, key: str) -> bool:
    return op == key or op.startswith(key + ".")


def opcode_counts(instructions, keys=KEY_OPCODES) -> dict:
    """Count instructions per key opcode (e.g. 'MUFU.EX2' counts MUFU.EX2 but not MUFU.RCP)."""
    return {k: sum(1 for i in instructions if _matches(i["op"], k)) for k in keys}


def sass_opcode_counts(sass: str, keys=KEY_OPCODES) -> dict:
    """Key opcode counts over the whole SASS text, plus 'total' instructions."""
    ins = sass_instructions(sass)
    return {"total": len(ins), **opcode_counts(ins, keys)}


def mnemonic_histogram(sass: str) -> Counter:
    return Counter(i["op"] for i in sass_instructions(sass))


def sass_loops(sass: str, keys=KEY_OPCODES) -> list[dict]:
    """Loops as backward branches: [start address, branch address]. Each with its instruction count,
    key opcode counts (so per-iteration counts), and whether it is innermost (contains no other loop)."""
    ins = sass_instructions(sass)
    # A backward branch closes a loop; `BRA` to itself is the padding after EXIT, not a loop. Nor is the
    # unconditional `BRA` that returns from an out-of-line block placed after the last EXIT into the body
    # (the retry of an mbarrier try-wait on the TMA path): that block is reached by a forward branch.
    last_exit = max((i["addr"] for i in ins if i["op"] == "EXIT" and not i["pred"]), default=None)

    def returns_from_tail(i):
        return last_exit is not None and not i["pred"] and i["addr"] > last_exit >= i["target"]

    spans = sorted({(i["target"], i["addr"]) for i in ins
                    if "target" in i and i["target"] < i["addr"] and not returns_from_tail(i)})
    out = []
    for start, end in spans:
        body = [i for i in ins if start <= i["addr"] <= end]
        inner = not any((s, e) != (start, end) and start <= s and e <= end for s, e in spans)
        out.append({"start": f"0x{start:04x}", "end": f"0x{end:04x}", "instructions": len(body),
                    "innermost": inner, "counts": {k: v for k, v in opcode_counts(body, keys).items() if v}})
    return out


# --------------------------------------------------------------------------- ptxas / cuobjdump

def ptxas_usage(log: str) -> dict:
    """Parse `ptxas -v`: registers, barriers, stack frame, spill stores and loads (bytes)."""
    out: dict = {}
    m = re.search(r"Used (\d+) registers", log)
    if m:
        out["registers"] = int(m.group(1))
    m = re.search(r"used (\d+) barriers", log)
    if m:
        out["barriers"] = int(m.group(1))
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if m:
        out.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
    return out


def cuobjdump_resource_usage(text: str) -> dict:
    """Parse `cuobjdump -res-usage`: REG, STACK, SHARED (static), LOCAL for the (first) function."""
    m = re.search(r"Function [^:]+:\s*\n\s*(.*)", text)
    if not m:
        return {}
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", m.group(1))}
