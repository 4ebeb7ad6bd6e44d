"""The NPU tile's command format and control registers: the one definition the RTL (hw/npu/tile.py), the
driver (tb/npu/driver.py) and docs/NPU.md share.

Control registers (the ``ctl`` write stream, {addr: 8, data: 32}, the same convention as the decoders' ``cfg``):

    CTL_CMD_ADDR_LO / _HI   byte address of the command list (aligned to the tile's data width)
    CTL_CMD_WORDS           command list length in 64-bit commands
    CTL_CTRL                bit 0 START: fetch and run the list; bit 1 CLEAR_ERROR (after an error, a
                            reset-free return to idle; the datapath must be drained by a reset if a pass was
                            cut, see docs/NPU.md "Errors")

Commands (64-bit, little-endian in memory, executed in order):

    [63:56] op   [55:48] target   [47:40] field / register   [39:0] value

    OP_END                      stop; ``busy`` falls
    OP_DEC   target = instance mask, field = decoder register (hw/decoder.Reg), value[31:0] = data:
             a register write to every decoder instance in the mask (books and per-tensor registers once for
             the cluster; NUMEL per instance)
    OP_SET   target = instance (0..N-1) or TARGET_TILE, field = one of the F_* below, value = its value
    OP_RUN   run one pass with the current settings (activations loaded, every enabled instance's planes
             streamed, decoded, multiplied, results written); the next command waits for its end
"""
from __future__ import annotations

CTL_CTRL, CTL_CMD_ADDR_LO, CTL_CMD_ADDR_HI, CTL_CMD_WORDS = 0x00, 0x01, 0x02, 0x03
CTRL_START, CTRL_CLEAR_ERROR = 1 << 0, 1 << 1

OP_END, OP_DEC, OP_SET, OP_RUN = 0x00, 0x01, 0x02, 0x03
TARGET_TILE = 0xFF

# pass kinds (F_MODE)
MODE_BF16, MODE_DRAFT, MODE_FULL = 0, 1, 2
MODE_NAMES = {"bf16": MODE_BF16, "draft": MODE_DRAFT, "full": MODE_FULL}

# tile fields (target TARGET_TILE)
F_MODE = 0x00        # MODE_*
F_ROWS = 0x01        # R, activation rows of the pass (1..max_rows)
F_GROUPS = 0x02      # in_features / V: V-value groups per weight row
F_ACT_ADDR = 0x03    # activations x[R][in_features], bf16, row-major, aligned to the data width

# instance fields (target = instance): plane slot p = 0..3 (C1: spec.codes, spec.signman, verif.codes,
# verif.rest; C2: spec.mx, -, verif.codes, verif.rest; a bf16 pass reads its weights through slot 0)
F_PLANE_ADDR = 0x00  # + p: byte address of the instance's first chunk in plane p (any byte)
F_PLANE_WORDS = 0x04  # + p: data-width words to fetch: ceil((addr % W + bytes) / W)
F_LEN_ADDR = 0x08    # + p: chunk-length table of plane p (u16 per chunk, aligned to the data width)
F_NCHUNKS = 0x0C     # chunks the instance decodes
F_OUT_ADDR = 0x0D    # byte address of its results (aligned to the data width)
F_OUT_ROWS = 0x0E    # weight rows it computes (its values / in_features)
F_ENABLE = 0x0F      # 1: the instance takes part in the next passes

ERR_DECODER, ERR_RRESP, ERR_BRESP, ERR_COMMAND = 0, 1, 2, 3     # bits of ``error_code``


def command(op: int, target: int = 0, field: int = 0, value: int = 0) -> int:
    if not (0 <= op < 256 and 0 <= target < 256 and 0 <= field < 256 and 0 <= value < (1 << 40)):
        raise ValueError(f"command out of range: op={op} target={target} field={field} value={value}")
    return (op << 56) | (target << 48) | (field << 40) | value
