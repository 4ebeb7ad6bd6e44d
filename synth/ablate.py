"""Where a decoder's area goes: the block synthesised again with one function at a time replaced by a cheap
stand-in (an *ablation*); the area it loses is that function's cost in this flow.

    python -m cassandra_rtl.synth.ablate decoder_c2v3_l8_core [--only NAME,...] [--out build/ablate] [--list]

Each ablation is a named edit of the block's source module (exact text -> stand-in, every text found exactly
once), applied to a copy of the module in memory: the files under hw/ are never touched, so a run can go on
beside simulations and other flows. A stand-in keeps the function's inputs alive (it XORs them into its output
where it can), so the logic around it stays; it is not a working decoder. The figures are differences of one
synthesis each (generic library, the same Yosys / ABC script as ``make synth``), which moves by up to ~2 % for a
one-gate change: read them as where the area goes, not as exact costs, and do not add them up (removing two
functions can remove shared logic once). The first row is the unchanged block with its per-submodule split.

Writes <out>/<block>/report.json and report.md (a table: ablation, area, difference, flip-flops, clock);
``--clock-gating``: the same in the gated flow, into <out>/<block>-cg (the hardware report adds its column).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import pathlib
import sys
import time
from typing import Callable

from ..errors import ConfigError
from . import flow

ROOT = pathlib.Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Ablation:
    name: str
    what: str                         # the function the stand-in replaces
    edits: tuple                      # ((text, stand-in), ...)


@dataclasses.dataclass(frozen=True)
class Subject:
    source: str                       # the module's file, from the project root
    module: str                       # its import name
    build: Callable                   # module -> the block (its registry entry's parameters)
    ablations: tuple


C1V3 = Subject("hw/decoder_c1_v3.py", "cassandra_rtl.hw.decoder_c1_v3", lambda mod: mod.DecoderC1v3Core(lanes=8), (
    Ablation("full_mode", "everything only full mode uses (verif planes' readers, pass B, H)",
             (("full, mm = p.full, p.m", "full, mm = Const(0, 1), p.m"),
              ("m.d.comb += [f_view.eq(Mux(df_b, RS.view, SM.view)), f_bit.eq(Mux(df_b, RS.view_bit, SM.view_bit))]",
               "m.d.comb += [f_view.eq(SM.view), f_bit.eq(SM.view_bit)]"),
              ("m.d.comb += [rspan.eq(Mux(r_turn_b, vb_span, pd_span)), rpre_all.eq(Mux(r_turn_b, vb_pre, pd_pre))]",
               "m.d.comb += [rspan.eq(pd_span), rpre_all.eq(pd_pre)]"),
              ("m.d.comb += b_try.eq(r_turn_b & ", "m.d.comb += b_try.eq(0 & r_turn_b & "),
              ("m.d.comb += [rd.take.eq(take), rd.skip.eq(last_step), rd.commit.eq((f_fire | f_step) & (df_b == is_b))]",
               "m.d.comb += [rd.take.eq(take), rd.skip.eq(last_step), rd.commit.eq((f_fire | f_step) & (is_b == 0))]"),
              ("value = Mux(df_b, exact, draft)", "value = draft"))),
    Ablation("positions", "stage R: the positions of a pass's ones (L + 1 select networks)",
             (('rpos, r_head = one_positions(m, rspan, rpre_all, SC.prefix_bits, L, "r_pos")',
               "rpos, r_head = [rspan[6 * j: 6 * j + 6] ^ rpre_all[9 * j: 9 * j + 6] for j in range(L + 1)], "
               "rpre_all[0]"),)),
    Ablation("slot_select", "stage D: pass B's code slot per lane",
             (("q_new = Array(ranks)[slot][:4]", "q_new = ranks[i][:4] ^ slot"),)),
    Ablation("code_check", "stage D: code-range checks (CODE error)",
             (("d_code_err = d_code_err | ((j < rk_n) & (ranks[j] > book_q))", "d_code_err = d_code_err"),)),
    Ablation("keep_check", "stage D: the KEEP check (kept count per superblock, last_k)",
             (("m.d.comb += d_keep_err.eq(d_go & ~rk_b & rk_fin & (kept_now != Mux(rk_last, last_k, p.k)))",
               "m.d.comb += d_keep_err.eq(0)"),)),
    Ablation("offsets", "stage D: field offsets (prefix sums of the lanes' widths)",
             (('offs = prefix_sums(m, lw, bits_for(beat_bits), "d_off")',
               "offs = [Const(9 * j, 8) ^ (lw[j - 1] if j else 0) for j in range(L + 1)]"),)),
    Ablation("window_shift", "stage F: the window shifter on the field readers' view",
             (('fwin = shift_right(m, f_view, f_bit, FW, "f_win")', "fwin = f_view[:FW] ^ f_bit"),)),
    Ablation("lane_extract", "stage F: the lanes' field extractors",
             (('narrow = shift_right(m, fwin[:reach], df_off[i][:bits_for(reach - FIELD_BITS)], FIELD_BITS,\n'
               '                                 f"f_field{i}") if i else fwin[:FIELD_BITS]',
               "narrow = fwin[FIELD_BITS * i: FIELD_BITS * (i + 1)] ^ df_off[i][:FIELD_BITS]"),)),
    Ablation("escape_tail", "stage F: the escape field's tail extractor",
             (('e_tail = shift_right(m, fwin[FIELD_BITS:], e_off, ESC_FIELD_BITS - FIELD_BITS, "f_esc_tail")',
               "e_tail = fwin[FIELD_BITS:ESC_FIELD_BITS] ^ e_off"),)),
    Ablation("rebase", "stage F: the offsets rebased after a step",
             (("m.d.sync += [df_off[i].eq(df_off[i] - f_stk) for i in range(L)]", "pass"),)),
    Ablation("lookup", "stage F: exponent lookups (base[q] + t, then the book's table)",
             (("m.d.comb += exp.eq(Mux(esc, f[:8], tab[idx][:8]))",
               "m.d.comb += exp.eq(Mux(esc, f[:8], Cat(df_q[i], t)))"),)),
))

C2V3 = Subject("hw/decoder_c2_v3.py", "cassandra_rtl.hw.decoder_c2_v3", lambda mod: mod.DecoderC2v3Core(lanes=8), (
    Ablation("full_mode", "everything only full mode uses (verif planes' readers, pass B's stages)",
             (("m.d.comb += b_live.eq(s_valid & full & ~b_fault.any() & ~halt)", "m.d.comb += b_live.eq(0)"),)),
    Ablation("dense_fields", "stage I: the beat's fields at the tensor's width m + 2 (a select on m)",
             (("m.d.comb += [dense[r].eq(win[r * (mv + 2): r * (mv + 2) + mv + 2]) for r in range(L)]",
               "m.d.comb += [dense[r].eq(win[r * 9: r * 9 + 9] ^ mm) for r in range(L)]"),)),
    Ablation("lane_fields", "stage I: each lane's field by its rank among the kept",
             (("lane_fld = [dense[0] if i == 0 else Cat(*dense[:i + 1]).word_select(rank[i], MXF) for i in range(L)]",
               "lane_fld = [dense[i] ^ rank[i] for i in range(L)]"),)),
    Ablation("header_shift", "stage I: the next block's header at the beat's field bits (a shifter)",
             (('hdr = shift_right(m, win, fbits, HEADER_BITS, "i_hdr")', "hdr = win[:HEADER_BITS] ^ fbits"),)),
    Ablation("draft_arith", "out: the draft arithmetic of every lane (normalising shift, exponent)",
             (('draft_lane(m, k, mm, lane, f"o_d{i}")',
               "lane.update(draft=Cat(s_fld[i], s_fld[i][:7] ^ s_x[:7]), nz=s_fld[i].xor(), "
               "rest_w=s_fld[i][:4] ^ s_x[4:])"),)),
    Ablation("draft_carry", "pass B: the half's draft values carried through BR and DF",
             (('+ [dst["draft"][i].eq(src["draft"][i]) for i in range(Lv)]', "+ []"),)),
    Ablation("positions", "pass B, BC -> BR: the positions of the half's ones (select networks)",
             (('pos, head = one_positions(m, bc["span"], bc["pre"], VC.prefix_bits, Lv, "r_pos")',
               'pos, head = [bc["span"][6 * j: 6 * j + 6] ^ bc["pre"][6 * j: 6 * j + 6] for j in range(Lv + 1)], '
               'bc["pre"][0]'),)),
    Ablation("ranks", "pass B, BC -> BR: ranks from positions",
             (('ranks = code_ranks(m, pos, head, Lv, "r_rank")', "ranks = [pp[:5] ^ head for pp in pos[1:]]"),)),
    Ablation("code_select", "pass B, BR -> DF: each draft-zero lane's code",
             (("m.d.comb += q.eq(Array(br_q)[slot[i]] if i else br_q[0])", "m.d.comb += q.eq(br_q[i] ^ slot[i])"),)),
    Ablation("offsets", "pass B, BR -> DF: rest-field offsets (prefix sums)",
             (('offs = prefix_sums(m, widths, bits_for(REST_LANE_BITS * Lv), "d_off")',
               "offs = [Const(16 * j, 7) ^ (widths[j - 1] if j else 0) for j in range(Lv + 1)]"),)),
    Ablation("rest_extract", "pass B, F: the lanes' rest-field extractors",
             (('f = shift_right(m, RS.win, df_off[i], REST_LANE_BITS, f"f_field{i}") if i else RS.win[:REST_LANE_BITS]',
               "f = RS.win[16 * i: 16 * i + 16] ^ df_off[i]"),)),
    Ablation("lookup", "pass B, F: the book's table (delta = S[b_q + t])",
             (("m.d.comb += delta.eq(Mux(esc, f[:8], tab[(df_base[i] + t)[:4]]))",
               "m.d.comb += delta.eq(Mux(esc, f[:8], Cat(df_base[i], t)))"),)),
    Ablation("negative_check", "pass B, F: X - delta < 0 (CODE error)",
             (("negs.append(dzi & Mux(esc, f[:8] > df_x, n_t))", "negs.append(0)"),)),
))

SUBJECTS = {"decoder_c1v3_l8_core": C1V3, "decoder_c2v3_l8_core": C2V3}


def edited_source(subject: Subject, ablation: Ablation) -> str:
    """The module's text with the ablation's edits; ConfigError (one line) when a text is not found exactly once."""
    path = ROOT / subject.source
    text = path.read_text()
    for old, new in ablation.edits:
        n = text.count(old)
        if n != 1:
            raise ConfigError(f"ablation {ablation.name!r}: its text {old.splitlines()[0][:60]!r} occurs {n} times in "
                              f"{subject.source} (the source changed: update synth/ablate.py)")
        text = text.replace(old, new)
    return text


class _Swapped:
    """``text`` executed as ``subject.module`` (its relative imports resolve as the real module's), standing in
    sys.modules for it while the block is built and elaborated, then the real module again."""

    def __init__(self, subject: Subject, text: str):
        self.subject, self.text = subject, text

    def __enter__(self):
        name = self.subject.module
        importlib.import_module(name)
        self.saved = sys.modules[name]
        spec = importlib.util.spec_from_loader(name, loader=None, origin=str(ROOT / self.subject.source))
        mod = importlib.util.module_from_spec(spec)
        mod.__file__ = str(ROOT / self.subject.source)
        sys.modules[name] = mod
        try:
            exec(compile(self.text, mod.__file__, "exec"), mod.__dict__)   # noqa: S102 - the project's own source
        except BaseException:
            sys.modules[name] = self.saved
            raise
        return mod

    def __exit__(self, *exc):
        sys.modules[self.subject.module] = self.saved
        return False


def report_dir(out: pathlib.Path, block: str, gated: bool = False) -> pathlib.Path:
    """Where a block's ablation report goes: <out>/<block>, with clock gating <out>/<block>-cg."""
    return out / (block + ("-cg" if gated else ""))


def run(block: str, out: pathlib.Path, only=None, progress=print, gated: bool = False) -> dict:
    if block not in SUBJECTS:
        raise ConfigError(f"no ablations for {block!r}; known: {', '.join(SUBJECTS)}")
    subject = SUBJECTS[block]
    names = [a.name for a in subject.ablations]
    for n in only or ():
        if n not in names:
            raise ConfigError(f"unknown ablation {n!r} of {block}; known: {', '.join(names)}")
    chosen = [a for a in subject.ablations if not only or a.name in only]
    texts = {a.name: edited_source(subject, a) for a in chosen}     # every edit checked before any synthesis
    blocks, why = flow.hw_blocks()
    if block not in blocks:
        raise ConfigError(f"{block} is not in hw/configs.py ({why or 'not registered'})")
    d = report_dir(out, block, gated)
    # the per-submodule split is a generic-flow pass (the flow does not split a gated netlist)
    opts = flow.FlowOptions(out=d, jobs=1, breakdown=not gated, clock_gating=gated)
    b = blocks[block]
    rows = []
    for i, ab in enumerate([None] + chosen):
        tag = ab.name if ab else "(none)"
        progress(f"[ablate {i + 1}/{len(chosen) + 1}] {block}: {tag}")
        t0 = time.monotonic()
        if ab is None:
            variant = b
            rtlil_text, meta = flow.elaborate(variant)
        else:
            with _Swapped(subject, texts[ab.name]) as mod:
                variant = flow.Block(f"{block}__{ab.name}", lambda mod=mod: subject.build(mod), b.source, b.meta)
                rtlil_text, meta = flow.elaborate(variant)
        try:
            entry = flow.synthesise_block(variant, opts, rtlil_text, meta)
        except RuntimeError as exc:         # Yosys failed: one line, no report
            raise ConfigError(f"{variant.name}: {exc}") from None
        rows.append({"ablation": ab.name if ab else None, "what": ab.what if ab else "the unchanged block",
                     "area_ge": round(entry["area_ge"], 1), "flip_flops": entry["flip_flops"],
                     "fmax_mhz": (entry.get("timing") or {}).get("est_fmax_mhz"),
                     "breakdown": (entry.get("breakdown") or {}).get("area_ge_by_module") if ab is None else None,
                     "seconds": round(time.monotonic() - t0, 1)})
    base = rows[0]["area_ge"]
    for r in rows[1:]:
        r["saved_ge"] = round(base - r["area_ge"], 1)
        r["saved_percent"] = round(100 * (base - r["area_ge"]) / base, 1)
    report = {"block": block, "source": subject.source, "flow": "gated" if gated else "generic", "rows": rows,
              "command": f"python -m cassandra_rtl.synth.ablate {block}" + (" --clock-gating" if gated else "")}
    d.mkdir(parents=True, exist_ok=True)
    (d / "report.json").write_text(json.dumps(report, indent=1))
    (d / "report.md").write_text(render(report))
    return report


def render(report: dict, gated: dict | None = None) -> str:
    """The table of a report (largest cost first); with ``gated`` (the same block's ``--clock-gating`` report)
    a column of what each function costs in the gated flow as well."""
    rows = report["rows"]
    base = rows[0]
    split = ", ".join(f"{k} {v:,.0f}" for k, v in (base.get("breakdown") or {}).items())
    g_rows = {r["ablation"]: r for r in (gated or {}).get("rows", [])}
    g_base = g_rows.get(None)
    lines = [f"Area of {report['block']} by function ({report.get('flow', 'generic')} flow, `{report['command']}`"
             + (f"; gated: `{gated['command']}`" if g_base else "") + f"): the block is {base['area_ge']:,.0f} GE"
             + (f" ({g_base['area_ge']:,.0f} gated)" if g_base else "") + f", {base['flip_flops']:,} flip-flops"
             + (f"; per submodule {split}" if split else "") + ". A one-gate change moves this flow's mapping by up "
             f"to ~2 % ({base['area_ge'] * 0.02:,.0f} GE): smaller rows are within that.", "",
             "| function replaced by a stand-in | GE without it | GE it costs | share |"
             + (" gated: GE it costs |" if g_base else "") + " flip-flops | MHz |",
             "|---|---:|---:|---:|" + ("---:|" if g_base else "") + "---:|---:|"]
    for r in sorted(rows[1:], key=lambda r: -r["saved_ge"]):
        mhz = f"{r['fmax_mhz']:.1f}" if r["fmax_mhz"] else "—"
        g = g_rows.get(r["ablation"])
        gcol = (f" {g['saved_ge']:,.0f} |" if g else " — |") if g_base else ""
        lines.append(f"| {r['what']} (`{r['ablation']}`) | {r['area_ge']:,.0f} | {r['saved_ge']:,.0f} | "
                     f"{r['saved_percent']:.1f} % |{gcol} {r['flip_flops']:,} | {mhz} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.synth.ablate", description=__doc__.split("\n\n")[0])
    ap.add_argument("block", nargs="?", help=f"one of: {', '.join(SUBJECTS)}")
    ap.add_argument("--only", help="comma-separated ablation names")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/ablate"))
    ap.add_argument("--list", action="store_true", help="list the ablations of every block and exit")
    ap.add_argument("--clock-gating", action="store_true",
                    help="the gated flow (integrated clock gates), into OUT/BLOCK-cg; no per-submodule split")
    a = ap.parse_args(argv)
    try:
        if a.list or not a.block:
            for blk, sub in SUBJECTS.items():
                for ab in sub.ablations:
                    print(f"{blk}  {ab.name:16s} {ab.what}")
            return 0
        only = [s for s in a.only.split(",") if s] if a.only else None
        report = run(a.block, a.out, only, progress=lambda s: print(s, file=sys.stderr, flush=True),
                     gated=a.clock_gating)
    except ConfigError as exc:
        print(f"ablate: {exc}", file=sys.stderr)
        return 2
    print(render(report), end="")
    print(f"wrote {report_dir(a.out, a.block, a.clock_gating)}/report.json and report.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
