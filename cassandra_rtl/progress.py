"""Progress display shared by long-running commands (tqdm on stderr; silent when not a terminal)."""
from __future__ import annotations

import sys

from tqdm import tqdm


def progress(iterable=None, total=None, desc="", unit="it", **kw):
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                disable=kw.pop("disable", None), leave=kw.pop("leave", False), **kw)
