"""Shared testbench code: simulator discovery, Verilog export + cocotb runner glue (build.py), valid/ready
stream agents (stream.py), the bit-exact scoreboard (scoreboard.py) and functional coverage (coverage.py)."""
