// Self-checking test of axi_ram.h with a scripted, AXI-compliant C++ master (no Verilator).
//
// Checks data integrity (bursts of 1, 2, 16 and 256 beats, partial strobes, random back-pressure and valid
// gaps), every protocol check (one case each), the exact read/write latencies, outstanding limits, and the
// timing model (pipelined reads at full and half bandwidth, one outstanding read, reads and writes sharing the
// budget). All figures are simulated cycles of the model, so they are deterministic. Prints one JSON line of
// figures on stdout; exits 1 if any check failed.
//
//   g++ -O2 -std=c++17 -I tb/npu tb/npu/test_axi_ram.cpp -o test_axi_ram && ./test_axi_ram
#include "axi_ram.h"

#include <cinttypes>
#include <cstdio>
#include <deque>
#include <functional>
#include <string>
#include <vector>

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        ++g_checks;                                                             \
        if (!(cond)) {                                                          \
            ++g_failures;                                                       \
            std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                                  \
            std::fprintf(stderr, "\n");                                         \
        }                                                                       \
    } while (0)

// xorshift64*: deterministic pseudo-random numbers
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1Dull;
    }
    bool chance(double p) { return p > 0 && double(next() >> 11) * (1.0 / 9007199254740992.0) < p; }
};

// A scripted AXI4 master: queued AR and AW/W requests, valids held until their handshake (AXI compliant),
// optional random valid gaps and ready back-pressure. Collects read data and B responses with their cycles.
class Master {
public:
    struct Req {
        uint64_t addr;
        unsigned beats;
    };
    struct WBeat {
        std::vector<uint8_t> data;
        uint64_t strb;
        bool last;
    };

    unsigned W;
    Rng rng;
    double valid_gap = 0.0;  // chance of not starting a new AR/AW/W in a cycle
    double w_gap = 0.0;      // extra chance of not starting a new W beat in a cycle
    double rready_p = 1.0;   // chance of rready high in a cycle
    double bready_p = 1.0;   // chance of bready high in a cycle

    std::deque<Req> ar_todo, aw_todo;
    std::deque<WBeat> w_todo;
    std::vector<uint8_t> rdata;          // all read bytes, in order
    std::vector<uint64_t> ar_cycles;     // cycle of each AR handshake
    std::vector<uint64_t> r_first;       // cycle of each burst's first R beat (handshake)
    std::vector<uint64_t> rlast_cycles;  // cycle of each burst's last R beat
    std::vector<uint64_t> w_last_cycles; // cycle of each burst's last W beat
    std::vector<uint64_t> b_cycles;      // cycle of each B handshake
    uint64_t first_rvalid = UINT64_MAX;  // first cycle rvalid was seen
    uint64_t first_bvalid = UINT64_MAX;
    uint64_t r_beats = 0, w_beats = 0;
    bool r_in_burst = false;

    Master(unsigned w, uint64_t seed) : W(w), rng(seed) {}

    void read(uint64_t addr, unsigned beats) { ar_todo.push_back({addr, beats}); }
    void write(uint64_t addr, unsigned beats, const std::vector<uint8_t>& bytes, const std::vector<uint64_t>& strb) {
        aw_todo.push_back({addr, beats});
        for (unsigned i = 0; i < beats; ++i)
            w_todo.push_back({std::vector<uint8_t>(bytes.begin() + size_t(i) * W, bytes.begin() + size_t(i + 1) * W),
                              strb[i], i + 1 == beats});
    }
    bool done(const AxiRam& ram) const {
        return ar_todo.empty() && aw_todo.empty() && w_todo.empty() && !arvalid && !awvalid && !wvalid &&
               ram.outstanding_reads() == 0 && ram.outstanding_writes() == 0;
    }

    // master outputs of this cycle (never from this cycle's readies)
    void drive(AxiPins& p) {
        if (!arvalid && !ar_todo.empty() && !rng.chance(valid_gap)) arvalid = true;
        if (!awvalid && !aw_todo.empty() && !rng.chance(valid_gap)) awvalid = true;
        if (!wvalid && !w_todo.empty() && !rng.chance(valid_gap) && !rng.chance(w_gap)) wvalid = true;
        p.arvalid = arvalid;
        if (arvalid) {
            p.araddr = ar_todo.front().addr;
            p.arlen = uint8_t(ar_todo.front().beats - 1);
            p.arsize = log2W();
            p.arburst = 1;
        }
        p.awvalid = awvalid;
        if (awvalid) {
            p.awaddr = aw_todo.front().addr;
            p.awlen = uint8_t(aw_todo.front().beats - 1);
            p.awsize = log2W();
            p.awburst = 1;
        }
        p.wvalid = wvalid;
        if (wvalid) {
            std::memcpy(p.wdata, w_todo.front().data.data(), W);
            p.wstrb = w_todo.front().strb;
            p.wlast = w_todo.front().last;
        }
        p.rready = rng.chance(rready_p);
        p.bready = rng.chance(bready_p);
    }

    // this cycle's handshakes, as seen on the pins after the slave and master both drove them
    void observe(const AxiPins& p, uint64_t cyc) {
        if (p.rvalid && first_rvalid == UINT64_MAX) first_rvalid = cyc;
        if (p.bvalid && first_bvalid == UINT64_MAX) first_bvalid = cyc;
        if (p.arvalid && p.arready) {
            ar_todo.pop_front();
            arvalid = false;
            ar_cycles.push_back(cyc);
        }
        if (p.awvalid && p.awready) {
            aw_todo.pop_front();
            awvalid = false;
        }
        if (p.wvalid && p.wready) {
            if (w_todo.front().last) w_last_cycles.push_back(cyc);
            w_todo.pop_front();
            wvalid = false;
            ++w_beats;
        }
        if (p.rvalid && p.rready) {
            if (!r_in_burst) r_first.push_back(cyc);
            r_in_burst = !p.rlast;
            if (p.rlast) rlast_cycles.push_back(cyc);
            rdata.insert(rdata.end(), p.rdata, p.rdata + W);
            ++r_beats;
        }
        if (p.bvalid && p.bready) b_cycles.push_back(cyc);
    }

private:
    bool arvalid = false, awvalid = false, wvalid = false;
    uint8_t log2W() const {
        uint8_t s = 0;
        while ((1u << s) < W) ++s;
        return s;
    }
};

// Runs ram + master until the master is done (or max_cycles); returns the cycles taken.
static uint64_t run(AxiRam& ram, Master& m, uint64_t max_cycles = 2000000,
                    const std::function<void(const AxiPins&, uint64_t)>& each = nullptr) {
    AxiPins p;
    uint64_t c = 0;
    while (c < max_cycles && !m.done(ram) && !ram.error()) {
        ram.drive(p);
        m.drive(p);
        m.observe(p, c);
        if (each) each(p, c);
        ram.edge(p);
        ++c;
    }
    CHECK(ram.error() == nullptr, "unexpected protocol error: %s", ram.error());
    CHECK(c < max_cycles, "did not finish in %" PRIu64 " cycles", max_cycles);
    return c;
}

// ---------------------------------------------------------------------------------------------------------
// data integrity

static void test_data(unsigned W) {
    const size_t MEM = 1 << 20;
    AxiRam ram(MEM, W, W * 0.75, 7, 5);
    Rng rng(W);
    std::vector<uint8_t> shadow(MEM);
    for (size_t i = 0; i < MEM; ++i) shadow[i] = ram.mem()[i] = uint8_t(rng.next());

    Master m(W, 100 + W);
    m.valid_gap = 0.3;
    m.rready_p = 0.7;
    m.bready_p = 0.6;
    struct B {
        uint64_t addr;
        unsigned beats;
    };
    std::vector<B> bursts;
    const unsigned sizes[] = {1, 2, 16, 256};
    uint64_t addr = 0x10000;
    for (int rep = 0; rep < 3; ++rep)
        for (unsigned beats : sizes) {
            uint64_t bytes = uint64_t(beats) * W;
            if ((addr & 0xFFF) + bytes > 0x1000) addr = (addr + 0xFFF) & ~uint64_t(0xFFF);  // no 4 KiB crossing
            bursts.push_back({addr, beats});
            addr += bytes + W * (rep + 1);  // gaps of untouched memory between bursts
        }
    // writes with random strobes (some all-ones, some partial, some empty)
    uint64_t strobed = 0;
    for (const B& b : bursts) {
        std::vector<uint8_t> bytes(size_t(b.beats) * W);
        std::vector<uint64_t> strb(b.beats);
        for (auto& x : bytes) x = uint8_t(rng.next());
        for (unsigned i = 0; i < b.beats; ++i) {
            uint64_t r = rng.next() % 4;
            uint64_t full = W == 64 ? ~0ull : ((1ull << W) - 1);
            strb[i] = r == 0 ? full : r == 1 ? 0 : (rng.next() & full);
            for (unsigned k = 0; k < W; ++k)
                if ((strb[i] >> k) & 1) {
                    shadow[b.addr + size_t(i) * W + k] = bytes[size_t(i) * W + k];
                    ++strobed;
                }
        }
        m.write(b.addr, b.beats, bytes, strb);
    }
    run(ram, m);
    CHECK(std::memcmp(ram.mem(), shadow.data(), MEM) == 0, "W=%u: memory after strobed writes differs", W);
    CHECK(ram.stats().write_bytes_strobed == strobed, "W=%u: strobed bytes %" PRIu64 " vs %" PRIu64, W,
          ram.stats().write_bytes_strobed, strobed);
    CHECK(m.b_cycles.size() == bursts.size(), "W=%u: %zu B responses for %zu bursts", W, m.b_cycles.size(),
          bursts.size());

    // read everything back through AXI (plus a few untouched neighbours)
    std::vector<uint8_t> expect;
    for (const B& b : bursts) {
        m.read(b.addr, b.beats);
        expect.insert(expect.end(), shadow.begin() + b.addr, shadow.begin() + b.addr + size_t(b.beats) * W);
    }
    run(ram, m);
    CHECK(m.rdata == expect, "W=%u: read data differs (%zu vs %zu bytes)", W, m.rdata.size(), expect.size());
    CHECK(ram.stats().read_bytes == ram.stats().read_beats * W, "read_bytes");
}

// ---------------------------------------------------------------------------------------------------------
// protocol checks: each case drives pins by hand for a few cycles and expects the named error

struct Case {
    const char* name;
    const char* expect;  // substring of the error
    unsigned max_beats, max_rd, max_wr;
    std::function<void(AxiPins&, uint64_t)> pins;  // master outputs of cycle c
};

static void ar(AxiPins& p, uint64_t addr, unsigned len, unsigned size = 3, unsigned burst = 1) {
    p.arvalid = 1, p.araddr = addr, p.arlen = uint8_t(len), p.arsize = uint8_t(size), p.arburst = uint8_t(burst);
}
static void aw(AxiPins& p, uint64_t addr, unsigned len, unsigned size = 3, unsigned burst = 1) {
    p.awvalid = 1, p.awaddr = addr, p.awlen = uint8_t(len), p.awsize = uint8_t(size), p.awburst = uint8_t(burst);
}
static void wbeat(AxiPins& p, uint8_t fill, bool last) {
    p.wvalid = 1, p.wlast = last, p.wstrb = 0xFF;
    std::memset(p.wdata, fill, sizeof p.wdata);
}

static int test_protocol() {
    const unsigned W = 8;  // size 3
    const size_t MEM = 64 << 10;
    std::vector<Case> cases = {
        {"burst_fixed", "not INCR", 256, 16, 8, [](AxiPins& p, uint64_t c) { if (c == 0) ar(p, 0, 3, 3, 0); }},
        {"burst_wrap", "not INCR", 256, 16, 8, [](AxiPins& p, uint64_t c) { if (c == 0) aw(p, 0, 3, 3, 2); }},
        {"size", "size 2 is not", 256, 16, 8, [](AxiPins& p, uint64_t c) { if (c == 0) ar(p, 0, 3, 2); }},
        {"cross_4k_read", "crosses a 4 KiB", 256, 16, 8,
         [](AxiPins& p, uint64_t c) { if (c == 0) ar(p, 0x1FF8, 1); }},
        {"cross_4k_write", "crosses a 4 KiB", 256, 16, 8,
         [](AxiPins& p, uint64_t c) { if (c == 0) aw(p, 0x2F00, 63); }},
        {"too_long", "exceeds max_burst_beats 16", 16, 16, 8,
         [](AxiPins& p, uint64_t c) { if (c == 0) ar(p, 0, 16); }},
        {"outside", "outside memory", 256, 16, 8,
         [MEM](AxiPins& p, uint64_t c) { if (c == 0) ar(p, MEM, 0); }},
        {"outside_far", "outside memory", 256, 16, 8,
         [](AxiPins& p, uint64_t c) { if (c == 0) aw(p, 1ull << 39, 0); }},
        {"unaligned", "not aligned", 256, 16, 8, [](AxiPins& p, uint64_t c) { if (c == 0) ar(p, 0x104, 0); }},
        {"wlast_early", "wlast set on beat 2 of a 4-beat", 256, 16, 8,
         [](AxiPins& p, uint64_t c) {
             p.awvalid = p.wvalid = 0;
             if (c == 0) aw(p, 0x100, 3);
             if (c >= 1) wbeat(p, uint8_t(c), c == 2);
         }},
        {"wlast_missing", "wlast missing on beat 2 of a 2-beat", 256, 16, 8,
         [](AxiPins& p, uint64_t c) {
             p.awvalid = p.wvalid = 0;
             if (c == 0) aw(p, 0x100, 1);
             if (c >= 1) wbeat(p, uint8_t(c), false);
         }},
        // stability: one read in flight with max_outstanding_reads = 1 keeps arready low for the second AR
        {"ar_dropped", "arvalid dropped", 256, 1, 8,
         [](AxiPins& p, uint64_t c) {
             p.arvalid = 0;
             p.rready = 0;
             if (c == 0 || c == 2 || c == 3) ar(p, 0x40 * (c > 0), 0);
         }},
        {"ar_changed", "payload changed while arvalid", 256, 1, 8,
         [](AxiPins& p, uint64_t c) {
             p.rready = 0;
             ar(p, c < 4 ? 0x40 : 0x80, 0);
         }},
        {"aw_dropped", "awvalid dropped", 256, 16, 1,
         [](AxiPins& p, uint64_t c) {
             p.awvalid = 0;
             if (c <= 3) aw(p, 0x200, 1);
         }},
        {"aw_changed", "payload changed while awvalid", 256, 16, 1,
         [](AxiPins& p, uint64_t c) { aw(p, 0x200, c < 3 ? 1 : 2); }},
        // W before any AW: wready stays low, so the beat must be held
        {"w_dropped", "wvalid dropped", 256, 16, 8,
         [](AxiPins& p, uint64_t c) {
             p.wvalid = 0;
             if (c <= 2) wbeat(p, 0x5A, true);
         }},
        {"w_changed", "payload changed while wvalid", 256, 16, 8,
         [](AxiPins& p, uint64_t c) { wbeat(p, c < 3 ? 0x5A : 0x5B, true); }},
    };
    int detected = 0;
    for (const Case& k : cases) {
        AxiRam ram(MEM, W, W, 4, 3, k.max_beats, k.max_rd, k.max_wr);
        AxiPins p;
        uint64_t c = 0;
        for (; c < 12 && !ram.error(); ++c) {
            ram.drive(p);
            k.pins(p, c);
            ram.edge(p);
        }
        const char* e = ram.error();
        CHECK(e && std::strstr(e, k.expect), "case %s: expected '%s', got '%s'", k.name, k.expect, e ? e : "(none)");
        if (e && std::strstr(e, k.expect)) ++detected;
        // after an error the model does nothing: all outputs low, no more cycles counted
        uint64_t cycles = ram.stats().cycles;
        ram.drive(p);
        ram.edge(p);
        ram.drive(p);
        CHECK(!p.arready && !p.awready && !p.wready && !p.rvalid && !p.bvalid && ram.stats().cycles == cycles,
              "case %s: model still active after its error", k.name);
    }
    // the same stimuli, legal, raise nothing: a clean AR/AW/W sequence with holds
    {
        AxiRam ram(MEM, W, W, 4, 3, 16, 1, 1);
        Master m(W, 7);
        m.valid_gap = 0.5;
        m.rready_p = 0.3;
        m.bready_p = 0.3;
        for (int i = 0; i < 20; ++i) {
            m.read(0x1000 + 0x80 * i, 16);
            m.write(0x8000 + 0x80 * i, 16, std::vector<uint8_t>(16 * W, uint8_t(i)), std::vector<uint64_t>(16, 0xFF));
        }
        run(ram, m);
        CHECK(ram.stats().max_outstanding_reads == 1 && ram.stats().max_outstanding_writes == 1,
              "limits of 1 exceeded: %" PRIu64 " / %" PRIu64, ram.stats().max_outstanding_reads,
              ram.stats().max_outstanding_writes);
    }
    return detected;
}

// ---------------------------------------------------------------------------------------------------------
// latency and outstanding limits

struct LatencyFigures {
    uint64_t read_latency_seen, write_latency_seen;
    uint64_t max_outstanding_reads, max_outstanding_writes;
};

static LatencyFigures test_latency() {
    LatencyFigures f{};
    const unsigned W = 16, RL = 20, WL = 9;
    {   // one single-beat read, one single-beat write, started in cycle 3 (master idle before)
        AxiRam ram(1 << 16, W, W, RL, WL);
        Master m(W, 1);
        AxiPins p;
        for (uint64_t c = 0; c < 3; ++c) {
            ram.drive(p);
            ram.edge(p);
        }
        m.read(0x40, 1);
        m.write(0x80, 1, std::vector<uint8_t>(W, 0xAB), {0xFFFF});
        run(ram, m, 1000);  // cycles counted from here
        CHECK(m.ar_cycles.size() == 1 && m.ar_cycles[0] == 0, "AR accepted in its first cycle");
        f.read_latency_seen = m.first_rvalid - m.ar_cycles[0];
        CHECK(f.read_latency_seen == RL, "rvalid %" PRIu64 " cycles after AR, expected %u", f.read_latency_seen, RL);
        CHECK(m.w_last_cycles.size() == 1, "one W");
        f.write_latency_seen = m.first_bvalid - m.w_last_cycles[0];
        CHECK(f.write_latency_seen == WL, "bvalid %" PRIu64 " cycles after last W, expected %u",
              f.write_latency_seen, WL);
    }
    {   // outstanding reads capped at 4: arready never high with 4 in flight
        AxiRam ram(1 << 16, W, W, RL, WL, 256, 4, 2);
        Master m(W, 2);
        m.bready_p = 0.05;  // slow B: writes pile up against the limit
        for (int i = 0; i < 12; ++i) m.read(0x100 * i, 4);
        for (int i = 0; i < 8; ++i)
            m.write(0x4000 + 0x100 * i, 2, std::vector<uint8_t>(2 * W, 1), std::vector<uint64_t>(2, 0xFFFF));
        bool ar_ok = true, aw_ok = true;
        run(ram, m, 100000, [&](const AxiPins& p, uint64_t) {
            if (p.arready && ram.outstanding_reads() >= 4) ar_ok = false;
            if (p.awready && ram.outstanding_writes() >= 2) aw_ok = false;
        });
        f.max_outstanding_reads = ram.stats().max_outstanding_reads;
        f.max_outstanding_writes = ram.stats().max_outstanding_writes;
        CHECK(ar_ok && f.max_outstanding_reads == 4, "reads in flight max %" PRIu64 " (limit 4)",
              f.max_outstanding_reads);
        CHECK(aw_ok && f.max_outstanding_writes == 2, "writes unanswered max %" PRIu64 " (limit 2)",
              f.max_outstanding_writes);
        // pipelined: 12 bursts of 4 beats with 4 outstanding take about 3 latencies, not 12
        CHECK(m.rlast_cycles.size() == 12 && m.rlast_cycles.back() < 4 * (RL + 4 * 4),
              "12 reads done by cycle %" PRIu64, m.rlast_cycles.empty() ? 0 : m.rlast_cycles.back());
    }
    return f;
}

// ---------------------------------------------------------------------------------------------------------
// timing model

struct Timing {
    unsigned n;
    uint64_t cycles, model;  // measured, and the simple formula it is compared with
    uint64_t budget_limited;
};

static Timing reads(unsigned W, double bw, unsigned RL, unsigned N, unsigned max_rd, unsigned beats = 16) {
    AxiRam ram(1 << 20, W, bw, RL, 10, 256, max_rd);
    Master m(W, 3);
    for (unsigned i = 0; i < N; ++i) m.read(uint64_t(i) * beats * W, beats);
    uint64_t c = run(ram, m);
    CHECK(m.r_beats == uint64_t(N) * beats, "read beats %" PRIu64, m.r_beats);
    return {N, c, 0, ram.stats().budget_limited_cycles};
}

struct Mixed {
    uint64_t cycles, read_beats, write_beats, last_r, last_w;
    double beats_per_cycle, bound;
    uint64_t budget_limited;
};

static Mixed mixed(unsigned W, double bw, unsigned N) {
    AxiRam ram(1 << 20, W, bw, 20, 10);
    Master m(W, 4);
    for (unsigned i = 0; i < N; ++i) {
        m.read(uint64_t(i) * 16 * W, 16);
        m.write(0x80000 + uint64_t(i) * 16 * W, 16, std::vector<uint8_t>(16 * W, uint8_t(i)),
                std::vector<uint64_t>(16, ~0ull));
    }
    uint64_t c = run(ram, m);
    const AxiRamStats& s = ram.stats();
    Mixed r{c, s.read_beats, s.write_beats, m.rlast_cycles.back(), m.w_last_cycles.back(), double(s.read_beats + s.write_beats) / double(c), bw / W,
            s.budget_limited_cycles};
    return r;
}

int main() {
    // data integrity at both NPU data widths
    test_data(8);
    test_data(16);

    const int protocol_detected = test_protocol();
    const LatencyFigures lat = test_latency();

    const unsigned W = 16, RL = 20, N = 64;
    // full bandwidth, enough outstanding: 16N + latency (+ small constant)
    Timing full = reads(W, W, RL, N, 16);
    full.model = 16ull * N + RL;
    CHECK(full.cycles >= full.model && full.cycles <= full.model + 4, "full bw: %" PRIu64 " cycles vs 16N+L = %" PRIu64,
          full.cycles, full.model);
    CHECK(full.budget_limited == 0, "full bw should never be budget limited (%" PRIu64 ")", full.budget_limited);
    // half bandwidth: 32N + latency (the bucket's few beats of credit collected during the latency come early)
    Timing half = reads(W, W / 2.0, RL, N, 16);
    half.model = 32ull * N + RL;
    CHECK(half.cycles + 2 * AxiRam::BUDGET_CAP_BEATS + 2 >= half.model && half.cycles <= half.model + 4,
          "half bw: %" PRIu64 " cycles vs 32N+L = %" PRIu64, half.cycles, half.model);
    CHECK(half.budget_limited >= 16ull * N - 8, "half bw: budget-limited cycles %" PRIu64, half.budget_limited);
    // one outstanding read: each burst costs 16 + latency
    Timing one = reads(W, W, RL, 16, 1);
    one.model = 16ull * (16 + RL);
    CHECK(one.cycles == one.model, "1 outstanding: %" PRIu64 " cycles vs N(16+L) = %" PRIu64, one.cycles, one.model);
    // latency overlapped by enough outstanding bursts even at W = 8
    Timing full8 = reads(8, 8, 40, N, 16);
    full8.model = 16ull * N + 40;
    CHECK(full8.cycles >= full8.model && full8.cycles <= full8.model + 4,
          "W=8 full bw latency 40: %" PRIu64 " vs %" PRIu64, full8.cycles, full8.model);

    // a write whose AW is accepted but whose data dribbles in (about 1 beat in 20 cycles) holds W bytes of budget
    // only in the cycles it uses: the reads at full bandwidth take 16N + latency plus one cycle per W beat that
    // moved meanwhile (the budget is shared), not the reservation of every cycle
    uint64_t slow_w_reads_done = 0, slow_w_beats_during = 0;
    {
        AxiRam ram(1 << 20, W, W, RL, 10);
        Master m(W, 5);
        m.w_gap = 0.95;
        for (unsigned i = 0; i < N; ++i) m.read(uint64_t(i) * 16 * W, 16);
        m.write(0x80000, 256, std::vector<uint8_t>(256 * W, 7), std::vector<uint64_t>(256, ~0ull));
        run(ram, m, 2000000, [&](const AxiPins& p, uint64_t) {
            if (p.wvalid && p.wready && m.r_beats < 16ull * N) ++slow_w_beats_during;
        });
        slow_w_reads_done = m.rlast_cycles.back() + 1;
        CHECK(m.w_last_cycles.back() > slow_w_reads_done, "the write should still be running after the reads");
        CHECK(slow_w_beats_during >= 20, "W beats during the reads: %" PRIu64, slow_w_beats_during);
        CHECK(slow_w_reads_done <= full.model + slow_w_beats_during + 4,
              "reads next to a slow write: done at %" PRIu64 " vs 16N+L = %" PRIu64 " + %" PRIu64 " W beats",
              slow_w_reads_done, full.model, slow_w_beats_during);
    }

    // reads and writes share one budget
    Mixed mx_full = mixed(W, W, N);       // one beat per cycle in total
    Mixed mx_half = mixed(W, W / 2.0, N); // half a beat per cycle
    Mixed mx_two = mixed(W, 2.0 * W, N);  // room for both every cycle
    for (const Mixed* m : {&mx_full, &mx_half, &mx_two}) {
        CHECK(m->read_beats == 16ull * N && m->write_beats == 16ull * N, "mixed beats");
        CHECK(m->beats_per_cycle <= m->bound + 0.01, "mixed: %.4f beats/cycle > %.4f", m->beats_per_cycle, m->bound);
        CHECK(m->beats_per_cycle >= 0.95 * m->bound, "mixed: %.4f beats/cycle well under %.4f", m->beats_per_cycle,
              m->bound);
    }
    // when they compete for one beat per cycle, the two directions alternate: together 32N beats take ~32N cycles
    CHECK(mx_full.cycles <= 32ull * N + 40, "mixed full: %" PRIu64 " cycles for %u beats", mx_full.cycles, 32 * N);
    // and neither starves the other: both finish within the last few percent of the run
    CHECK(mx_full.last_r * 100 >= mx_full.cycles * 97 && mx_full.last_w * 100 >= mx_full.cycles * 97,
          "mixed full: last read beat %" PRIu64 ", last write beat %" PRIu64 " of %" PRIu64 " cycles", mx_full.last_r,
          mx_full.last_w, mx_full.cycles);
    CHECK(mx_two.cycles <= 16ull * N + 40, "mixed 2x: %" PRIu64 " cycles", mx_two.cycles);

    std::printf("{\"checks\": %d, \"failures\": %d, \"protocol_cases_detected\": %d, "
                "\"read_latency_seen\": %" PRIu64 ", \"write_latency_seen\": %" PRIu64 ", "
                "\"max_outstanding_reads\": %" PRIu64 ", \"max_outstanding_writes\": %" PRIu64 ", "
                "\"data_bytes\": %u, \"latency\": %u, \"n_bursts\": %u, "
                "\"full_bw_cycles\": %" PRIu64 ", \"full_bw_model\": %" PRIu64 ", "
                "\"half_bw_cycles\": %" PRIu64 ", \"half_bw_model\": %" PRIu64 ", \"half_bw_budget_limited\": %" PRIu64 ", "
                "\"one_outstanding_cycles\": %" PRIu64 ", \"one_outstanding_model\": %" PRIu64 ", "
                "\"w8_lat40_cycles\": %" PRIu64 ", \"w8_lat40_model\": %" PRIu64 ", "
                "\"mixed_full_cycles\": %" PRIu64 ", \"mixed_full_beats_per_cycle\": %.4f, "
                "\"mixed_half_cycles\": %" PRIu64 ", \"mixed_half_beats_per_cycle\": %.4f, "
                "\"mixed_2x_cycles\": %" PRIu64 ", \"mixed_2x_beats_per_cycle\": %.4f, \"slow_write_reads_done\": %" PRIu64 ", \"slow_write_beats_during_reads\": %" PRIu64 "}\n",
                g_checks, g_failures, protocol_detected, lat.read_latency_seen, lat.write_latency_seen,
                lat.max_outstanding_reads, lat.max_outstanding_writes, W, RL, N, full.cycles, full.model, half.cycles,
                half.model, half.budget_limited, one.cycles, one.model, full8.cycles, full8.model, mx_full.cycles,
                mx_full.beats_per_cycle, mx_half.cycles, mx_half.beats_per_cycle, mx_two.cycles,
                mx_two.beats_per_cycle, slow_w_reads_done, slow_w_beats_during);
    return g_failures ? 1 : 0;
}
