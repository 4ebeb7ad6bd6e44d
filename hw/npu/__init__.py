"""The Cassandra NPU tile (docs/NPU.md)."""

# The headline tile's decoder: the C1 decoder v3's cluster part (the cores share one TensorRegisters)
DEFAULT_DECODER = "decoder_c1v3_l8_core"
# The most decoders a cluster holds: OP_DEC's instance mask is 8 bits (one TensorRegisters per cluster)
MAX_CLUSTER = 8
