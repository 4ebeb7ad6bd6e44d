"""Parameters of the Cassandra bitstream format (docs/FORMAT.md, version 2.0; 1.0 = one superblock per chunk,
no pair groups).

Every width in the golden codec and in the RTL derives from the constants and the ``CodecConfig`` here.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..errors import ConfigError

FORMAT_VERSION = (3, 0)          # (major, minor) the container writes
READABLE_MAJORS = (1, 2, 3)       # 2.x in the 2.0 layout, 1.x as its case A = 1, pairs = 0 (FORMAT.md §8); others rejected
BF16_EXPONENT_BITS = 8
BF16_MANTISSA_BITS = 7
BF16_SIGN_SHIFT = 15
EXPONENT_MASK = 0xFF
MANTISSA_MASK = 0x7F
MAGNITUDE_MASK = 0x7FFF           # the magnitude key used for pruning: bits & 0x7FFF (monotone in |x|)

K_MAX = 15                        # at most 15 ranked symbols: the longest non-escape code is 15 bits
ESCAPE_PAYLOAD_BITS = 8           # an escape code is followed by the raw 8-bit symbol
MAX_CODE_BITS = K_MAX + 1 + ESCAPE_PAYLOAD_BITS   # 24: an escape at K = K_MAX
PRUNED = 256                      # the C1 speculation alphabet's "pruned" symbol (exponents are 0..255)
MX_BLOCK = 32                     # Cassandra-2 shared-exponent block (OCP MX block size, E8M0 scale)
ALLOWED_GROUP_SIZES = (32, 64, 128, 256)
INDEX_ANCHOR_STRIDE = 16          # index: one u32 anchor per 16 chunks, one u16 offset per chunk
ALLOWED_CHUNK_SUPERBLOCKS = (1, 2, 4, 8, 16, 32, 64)   # A: superblocks per chunk (§1), with A * G <= 1024
MAX_CHUNK_VALUES = 1024           # A * G bound: 16 chunks * 1024 values * 24 bits / 8 < 2**16 (u16 offsets)

# Golden defaults of the format 2.0 features (FORMAT.md §1, §3.1). True (since both RTL decoders read 2.0):
# CodecConfig(chunk_superblocks=None, pair_codes=None) resolves to the golden policy, weights A = 1024 / G
# with pair groups, KV (kind="kv") A = 1 without pairs (what the RTL KV encoders write). False would give
# format 1.0's planes bit for bit (A = 1, no pairs). Explicit values always override.
FORMAT2_DEFAULTS = True

SCHEMES = ("c1", "c2")
KINDS = ("weight", "kv")


@dataclass(frozen=True)
class CodecConfig:
    """How one tensor is split into speculation and verification data.

    ``keep_count`` (values kept per full superblock) is the normative parameter; ``keep_ratio`` is a
    convenience: ``CodecConfig(keep_ratio=0.3)`` sets ``keep_count = ceil(0.3 * group_size)``.
    """

    scheme: str = "c1"
    group_size: int = 128
    mantissa_bits: int = 3
    keep_count: int | None = None
    keep_ratio: float | None = None
    kind: str = "weight"
    chunk_superblocks: int | None = None   # A: superblocks per chunk (None: golden policy, see FORMAT2_DEFAULTS)
    pair_codes: bool | None = None         # golden books with pair groups (None: golden policy)

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ConfigError(f"scheme must be one of {SCHEMES}, got {self.scheme!r}")
        if self.kind not in KINDS:
            raise ConfigError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.group_size not in ALLOWED_GROUP_SIZES:
            raise ConfigError(f"group size must be one of {ALLOWED_GROUP_SIZES}, got {self.group_size}")
        if isinstance(self.mantissa_bits, bool) or not isinstance(self.mantissa_bits, int) \
                or not 0 <= self.mantissa_bits <= BF16_MANTISSA_BITS:
            raise ConfigError(f"mantissa bits must be an integer in 0..7, got {self.mantissa_bits!r}")
        if self.keep_count is None:
            ratio = 1.0 if self.keep_ratio is None else self.keep_ratio
            if not isinstance(ratio, (int, float)) or math.isnan(ratio) or not 0.0 < ratio <= 1.0:
                raise ConfigError(f"keep ratio must be in (0, 1], got {ratio!r}")
            # G is a power of two, so ratio * G is exact in binary floating point and ceil() is exact too.
            count = min(self.group_size, max(1, math.ceil(ratio * self.group_size)))
            object.__setattr__(self, "keep_count", count)
        elif not isinstance(self.keep_count, int) or not 1 <= self.keep_count <= self.group_size:
            raise ConfigError(f"keep count must be in 1..{self.group_size}, got {self.keep_count!r}")
        object.__setattr__(self, "keep_ratio", self.keep_count / self.group_size)
        policy = FORMAT2_DEFAULTS and self.kind == "weight"
        A = self.chunk_superblocks
        if A is None:
            A = MAX_CHUNK_VALUES // self.group_size if policy else 1
        elif isinstance(A, bool) or not isinstance(A, int) or A not in ALLOWED_CHUNK_SUPERBLOCKS:
            raise ConfigError(f"chunk_superblocks must be one of {ALLOWED_CHUNK_SUPERBLOCKS}, got {A!r}")
        if A * self.group_size > MAX_CHUNK_VALUES:
            raise ConfigError(f"chunk_superblocks {A} x group size {self.group_size} = {A * self.group_size} values "
                              f"per chunk, at most {MAX_CHUNK_VALUES} allowed")
        object.__setattr__(self, "chunk_superblocks", A)
        pc = self.pair_codes
        if pc is None:
            pc = policy
        elif not isinstance(pc, bool):
            raise ConfigError(f"pair_codes must be True, False or None, got {pc!r}")
        object.__setattr__(self, "pair_codes", pc)

    @property
    def prunes(self) -> bool:
        return self.keep_count < self.group_size

    @property
    def chunk_values(self) -> int:
        """Values per full chunk: A * G."""
        return self.chunk_superblocks * self.group_size

    def kept_in(self, n: int) -> int:
        """Values kept in a superblock of ``n`` values (``n < G`` only for a tensor's last superblock)."""
        return (self.keep_count * n + self.group_size - 1) // self.group_size

    def to_json(self) -> dict:
        d = asdict(self)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "CodecConfig":
        if not isinstance(d, dict):
            raise ConfigError("codec config must be an object")
        known = {"scheme", "group_size", "mantissa_bits", "keep_count", "kind", "chunk_superblocks", "pair_codes"}
        try:
            return cls(**{k: d[k] for k in known if k in d})
        except TypeError as exc:
            raise ConfigError(f"bad codec config: {exc}") from None
