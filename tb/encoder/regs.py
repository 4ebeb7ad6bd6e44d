"""Register writes of the KV encoders (docs/HARDWARE.md section 3 / 3a), shared by the encoder testbench
(tb/encoder/test_encoder.py) and the C2 encoder -> decoder loopback (tb/selftest/test_kv_loopback_c2.py)."""
from __future__ import annotations

from cassandra_rtl.tb.decoder import framing as F


def program(cfg, books):
    """MBITS, KEEP, GROUP, then each book's symbols and size (``books[0]`` is None for C2)."""
    spec, verif = books
    w = [(F.MBITS, cfg.mantissa_bits), (F.KEEP, cfg.keep_count), (F.GROUP, cfg.group_size)]
    if spec is not None:             # C2: no speculation book
        w += [(F.SPEC_SYM + r, s) for r, s in enumerate(spec.symbols)] + [(F.SPEC_K, spec.K)]
    w += [(F.VERIF_SYM + r, s) for r, s in enumerate(verif.symbols)] + [(F.VERIF_K, verif.K)]
    return w
