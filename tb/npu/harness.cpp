// Bulk harness of the Verilated NPU tile (hw/npu/tile.py) behind the AXI4 memory model of axi_ram.h.
//
// Job file (little-endian), written by tb/npu/__init__.py:
//   "CASSNPU1" u64 mem_bytes, u64 image_bytes, image (loaded at address 0), u64 cmd_addr, u32 cmd_words,
//   u32 nregions, nregions x (u64 addr, u64 bytes)   regions dumped to OUT after the run, in order
// Usage: Vtile JOB OUT [--bw BYTES_PER_CYCLE] [--rlat N] [--wlat N] [--max-burst N] [--outstanding N]
//                      [--timeout CYCLES]
// stdout: one JSON line: status, cycles, the memory model's statistics, and per pass (each rise and fall of
// the tile's `running`): cycles, read / write beats, activation wait, and per instance busy / wait_mem /
// wait_dec cycles (the tile's perf counters), plus the cycles from the pass's first command to its end.
// Exit status: 0 ok; 3 tile error output; 4 hang or timeout; 5 memory-model protocol violation; 2 usage.
#include "Vtile.h"
#include "verilated.h"
#include "axi_ram.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define P(name, f) name##___05F##f

template <typename T> static inline void put_bytes(T& sig, const uint8_t* b, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n && i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    sig = (T)v;
}
template <std::size_t N> static inline void put_bytes(VlWide<N>& sig, const uint8_t* b, int n) {
    for (std::size_t w = 0; w < N; w++) {
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) if ((int)(4 * w + i) < n) v |= (uint32_t)b[4 * w + i] << (8 * i);
        sig[w] = v;
    }
}
template <typename T> static inline void get_bytes(const T& sig, uint8_t* b, int n) {
    uint64_t v = (uint64_t)sig;
    for (int i = 0; i < n; i++) b[i] = i < 8 ? (uint8_t)(v >> (8 * i)) : 0;
}
template <std::size_t N> static inline void get_bytes(const VlWide<N>& sig, uint8_t* b, int n) {
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(sig[i / 4] >> (8 * (i % 4)));
}

static bool rd(FILE* f, void* p, size_t n) { return fread(p, 1, n, f) == n; }

#ifndef TILE_INSTANCES
#define TILE_INSTANCES 2
#endif
#ifndef TILE_DATA_BYTES
#define TILE_DATA_BYTES 8
#endif

struct Counters {
    uint64_t cyc, rb, wb, act;
    uint64_t busy[TILE_INSTANCES], mem[TILE_INSTANCES], dec[TILE_INSTANCES];
};

static Counters sample(Vtile* t) {
    Counters c;
    c.cyc = t->perf_cycles; c.rb = t->perf_read_beats; c.wb = t->perf_write_beats; c.act = t->perf_act_wait;
#define INST(i) \
    if (i < TILE_INSTANCES) { c.busy[i] = t->P(perf_busy, i); c.mem[i] = t->P(perf_wait_mem, i); c.dec[i] = t->P(perf_wait_dec, i); }
    INST(0)
#if TILE_INSTANCES > 1
    INST(1)
#endif
#if TILE_INSTANCES > 2
    INST(2)
#endif
#if TILE_INSTANCES > 3
    INST(3)
#endif
#undef INST
    return c;
}

static inline uint64_t d32(uint64_t a, uint64_t b) { return (b - a) & 0xFFFFFFFFull; }

int main(int argc, char** argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s JOB OUT [--bw B] [--rlat N] [--wlat N] [--max-burst N] [--outstanding N] [--timeout C]\n", argv[0]); return 2; }
    double bw = TILE_DATA_BYTES;
    unsigned rlat = 64, wlat = 32, max_burst = 256, outstanding = 16;
    uint64_t timeout = 0;
    for (int i = 3; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--bw") bw = atof(argv[i + 1]);
        else if (a == "--rlat") rlat = atoi(argv[i + 1]);
        else if (a == "--wlat") wlat = atoi(argv[i + 1]);
        else if (a == "--max-burst") max_burst = atoi(argv[i + 1]);
        else if (a == "--outstanding") outstanding = atoi(argv[i + 1]);
        else if (a == "--timeout") timeout = strtoull(argv[i + 1], nullptr, 10);
        else { fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
    }
    FILE* f = fopen(argv[1], "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", argv[1]); return 2; }
    char magic[8];
    uint64_t mem_bytes = 0, image_bytes = 0, cmd_addr = 0;
    uint32_t cmd_words = 0, nreg = 0;
    if (!rd(f, magic, 8) || memcmp(magic, "CASSNPU1", 8) || !rd(f, &mem_bytes, 8) || !rd(f, &image_bytes, 8)
        || image_bytes > mem_bytes) { fprintf(stderr, "bad job header\n"); return 2; }
    AxiRam ram(mem_bytes, TILE_DATA_BYTES, bw, rlat, wlat, max_burst, outstanding, 8);
    if (!rd(f, ram.mem(), image_bytes) || !rd(f, &cmd_addr, 8) || !rd(f, &cmd_words, 4) || !rd(f, &nreg, 4)) {
        fprintf(stderr, "truncated job\n"); return 2;
    }
    std::vector<std::pair<uint64_t, uint64_t>> regions(nreg);
    for (auto& r : regions) if (!rd(f, &r.first, 8) || !rd(f, &r.second, 8)) { fprintf(stderr, "truncated job\n"); return 2; }
    fclose(f);

    Verilated::randReset(0);
    Vtile* t = new Vtile;
    AxiPins pins;
    auto t0 = std::chrono::steady_clock::now();
    // control writes: CMD_ADDR_LO, CMD_ADDR_HI, CMD_WORDS, CTRL = START
    std::vector<std::pair<uint32_t, uint32_t>> ctl = {{1, (uint32_t)cmd_addr}, {2, (uint32_t)(cmd_addr >> 32)},
                                                       {3, cmd_words}, {0, 1}};
    size_t ctl_i = 0;
    t->rst = 1; t->clk = 0; t->eval();
    for (int i = 0; i < 4; i++) { t->clk = 1; t->eval(); t->clk = 0; t->eval(); }
    t->rst = 0;

    std::string status = "ok", why;
    int rc = 0;
    uint64_t cycle = 0, last_progress = 0, last_beats = 0;
    bool was_busy = false, was_running = false;
    Counters at_start{};
    std::string passes;
    int npasses = 0;
    for (;;) {
        ram.drive(pins);
        t->m_axi_arready = pins.arready;
        put_bytes(t->m_axi_rdata, pins.rdata, TILE_DATA_BYTES);
        t->m_axi_rresp = pins.rresp; t->m_axi_rlast = pins.rlast; t->m_axi_rvalid = pins.rvalid;
        t->m_axi_awready = pins.awready; t->m_axi_wready = pins.wready;
        t->m_axi_bresp = pins.bresp; t->m_axi_bvalid = pins.bvalid;
        bool ctl_valid = ctl_i < ctl.size();
        t->P(ctl, valid) = ctl_valid;
        if (ctl_valid) t->P(ctl, payload) = ((uint64_t)ctl[ctl_i].second << 8) | ctl[ctl_i].first;
        t->clk = 0;
        t->eval();
        pins.araddr = t->m_axi_araddr; pins.arlen = t->m_axi_arlen; pins.arsize = t->m_axi_arsize;
        pins.arburst = t->m_axi_arburst; pins.arvalid = t->m_axi_arvalid; pins.rready = t->m_axi_rready;
        pins.awaddr = t->m_axi_awaddr; pins.awlen = t->m_axi_awlen; pins.awsize = t->m_axi_awsize;
        pins.awburst = t->m_axi_awburst; pins.awvalid = t->m_axi_awvalid;
        get_bytes(t->m_axi_wdata, pins.wdata, TILE_DATA_BYTES);
        pins.wstrb = t->m_axi_wstrb; pins.wlast = t->m_axi_wlast; pins.wvalid = t->m_axi_wvalid;
        pins.bready = t->m_axi_bready;
        if (ctl_valid && t->P(ctl, ready)) ctl_i++;
        ram.edge(pins);
        if (ram.error()) { status = "memory"; why = ram.error(); rc = 5; break; }
        t->clk = 1;
        t->eval();
        cycle++;
        bool running = t->running;
        if (running && !was_running) at_start = sample(t);
        if (!running && was_running) {
            Counters e = sample(t);
            char buf[512];
            snprintf(buf, sizeof buf, "%s{\"cycles\":%llu,\"read_beats\":%llu,\"write_beats\":%llu,\"act_wait\":%llu",
                     npasses ? "," : "", (unsigned long long)d32(at_start.cyc, e.cyc), (unsigned long long)d32(at_start.rb, e.rb),
                     (unsigned long long)d32(at_start.wb, e.wb), (unsigned long long)d32(at_start.act, e.act));
            passes += buf;
            const char* names[3] = {"busy", "wait_mem", "wait_dec"};
            for (int k = 0; k < 3; k++) {
                passes += std::string(",\"") + names[k] + "\":[";
                for (int i = 0; i < TILE_INSTANCES; i++) {
                    uint64_t a = k == 0 ? at_start.busy[i] : k == 1 ? at_start.mem[i] : at_start.dec[i];
                    uint64_t b = k == 0 ? e.busy[i] : k == 1 ? e.mem[i] : e.dec[i];
                    snprintf(buf, sizeof buf, "%s%llu", i ? "," : "", (unsigned long long)d32(a, b));
                    passes += buf;
                }
                passes += "]";
            }
            passes += "}";
            npasses++;
        }
        was_running = running;
        if (t->error) { status = "error"; char b[64]; snprintf(b, sizeof b, "tile error_code 0x%02x", (unsigned)t->error_code); why = b; rc = 3; break; }
        bool busy = t->busy;
        if (was_busy && !busy && ctl_i >= ctl.size()) break;
        was_busy = busy || was_busy;
        uint64_t beats = ram.stats().read_beats + ram.stats().write_beats;
        if (beats != last_beats || running != was_running) { last_beats = beats; last_progress = cycle; }
        if (cycle - last_progress > 200000) { status = "hang"; why = "no memory traffic for 200000 cycles"; rc = 4; break; }
        if (timeout && cycle >= timeout) { status = "timeout"; why = "cycle limit"; rc = 4; break; }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rc == 0) {
        FILE* o = fopen(argv[2], "wb");
        if (!o) { fprintf(stderr, "cannot write %s\n", argv[2]); return 2; }
        for (auto& r : regions) {
            if (r.first + r.second > mem_bytes) { fprintf(stderr, "region outside memory\n"); return 2; }
            fwrite(ram.mem() + r.first, 1, r.second, o);
        }
        fclose(o);
    }
    const AxiRamStats& s = ram.stats();
    printf("{\"status\":\"%s\",\"why\":\"%s\",\"cycles\":%llu,\"seconds\":%.3f,\"read_beats\":%llu,\"write_beats\":%llu,"
           "\"budget_limited_cycles\":%llu,\"max_outstanding_reads\":%llu,\"passes\":[%s]}\n",
           status.c_str(), why.c_str(), (unsigned long long)cycle, secs, (unsigned long long)s.read_beats,
           (unsigned long long)s.write_beats, (unsigned long long)s.budget_limited_cycles,
           (unsigned long long)s.max_outstanding_reads, passes.c_str());
    t->final();
    delete t;
    return rc;
}
