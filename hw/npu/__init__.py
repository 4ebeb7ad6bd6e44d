"""NPU tile: DMA, framing and compute blocks around the plane decoders (cassandra_rtl.hw.npu)."""
