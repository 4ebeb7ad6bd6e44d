// Bulk co-simulation harness for the Cassandra-1 decoder (docs/HARDWARE.md section 2) and, compiled with
// -DHARNESS_C2, the Cassandra-2 decoder (section 2a: plane slot 0 = spec_mx, slot 1 unused), compiled with
// Verilator together with the exported Verilog. It streams whole tensors through the decoder without any
// per-cycle Python: register writes and plane words come from a job file, decoded bf16 values go to an
// output file, and a one-line JSON summary goes to stdout.
//
// Job file (little-endian), written by tb/bulk/__init__.py:
//   "CASSBULK" u32 version=2, u32 lanes, 4 x u32 word_bits (per port, in the order below), u32 ntensors
//   per tensor: u32 nregs, nregs x (u32 addr, u32 data), u64 numel,
//               4 x (u64 nwords, nwords x word_bytes data, nwords x u8 last)   ports: spec_codes,
//               spec_signman, verif_codes, verif_rest (nwords = 0 for planes the mode does not read);
//               word_bytes = that port's word_bits / 8 (a decoder may have narrower code / verification ports)
// Usage: Vharness JOB OUT.u16 [--idle P] [--backpressure P] [--seed S]
//   --idle P: probability that an input channel idles in a cycle; --backpressure P: out.ready low.
// Exit status: 0 = every tensor produced numel values with a clean protocol; 3 = decoder error output;
// 4 = hang (no progress); 5 = protocol violation (bad count / flags / nonzero unused lanes, a beat across a
// superblock end, sb_end not where GROUP puts it); 2 = usage.
#include "Vdec.h"
#include "verilated.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef HARNESS_PORT
#define HARNESS_PORT(p, f) p##___05F##f
#endif
#define PORT_READY(name) HARNESS_PORT(name, ready)
#ifdef HARNESS_C2
#define SPEC0 spec_mx
#else
#define SPEC0 spec_codes
#endif

template <typename T> static inline void set_sig(T& sig, const uint32_t* w, int nw) {
    uint64_t v = w[0];
    if (nw > 1) v |= (uint64_t)w[1] << 32;
    sig = (T)v;
}
template <std::size_t N> static inline void set_sig(VlWide<N>& sig, const uint32_t* w, int nw) {
    for (std::size_t i = 0; i < N; i++) sig[i] = (int)i < nw ? w[i] : 0;
}
template <typename T> static inline void get_sig(const T& sig, uint32_t* w, int nw) {
    uint64_t v = (uint64_t)sig;
    for (int i = 0; i < nw; i++) w[i] = i < 2 ? (uint32_t)(v >> (32 * i)) : 0;
}
template <std::size_t N> static inline void get_sig(const VlWide<N>& sig, uint32_t* w, int nw) {
    for (int i = 0; i < nw; i++) w[i] = i < (int)N ? sig[i] : 0;
}
static inline uint32_t getbits(const uint32_t* a, int pos, int width) {
    uint64_t lo = a[pos >> 5];
    uint64_t hi = a[(pos >> 5) + 1];
    uint64_t v = (lo | (hi << 32)) >> (pos & 31);
    return (uint32_t)(v & ((1ull << width) - 1));
}

struct Plane {
    std::vector<uint8_t> data, last;
    uint64_t n = 0, ptr = 0;
};
struct Tensor {
    std::vector<std::pair<uint32_t, uint32_t>> regs;
    uint64_t numel = 0;
    Plane planes[4];
};

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static const uint32_t REG_GROUP = 0x04;                       // hw/decoder.py Reg.GROUP
static inline double urand() {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static bool rd(FILE* f, void* p, size_t n) { return fread(p, 1, n, f) == n; }

int main(int argc, char** argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s JOB OUT [--idle P] [--backpressure P] [--seed S]\n", argv[0]); return 2; }
    double p_idle = 0, p_bp = 0;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--idle")) p_idle = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--backpressure")) p_bp = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) rng_state = strtoull(argv[i + 1], nullptr, 0) * 2654435761ull + 1;
    }
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    char magic[8]; uint32_t version, lanes, plane_bits[4], ntensors;
    if (!rd(f, magic, 8) || memcmp(magic, "CASSBULK", 8) || !rd(f, &version, 4) || version != 2 ||
        !rd(f, &lanes, 4) || !rd(f, plane_bits, 16) || !rd(f, &ntensors, 4)) {
        fprintf(stderr, "bad job file\n"); return 2;
    }
    uint32_t max_bits = 0;
    for (uint32_t b : plane_bits) max_bits = b > max_bits ? b : max_bits;
    const int in_words = max_bits / 32 + 2;                  // data + last bit + slack
    const int cb = 32 - __builtin_clz(lanes);                // bits_for(lanes)
    const int out_bits = 16 * lanes + cb + 2;
    const int out_words = out_bits / 32 + 2;
    FILE* out = fopen(argv[2], "wb");
    if (!out) { perror(argv[2]); return 2; }

    Verilated::commandArgs(1, argv);
#ifdef HARNESS_POWER_UP
    // power-up state: every flip-flop and memory word random (Verilog without initial values, --x-initial
    // unique), from this job's seed; the reset below then sets the registers that have a reset
    Verilated::randReset(2);
    Verilated::randSeed(static_cast<int>(rng_state % 2147483647u) + 1);
#endif
    Vdec* top = new Vdec;
    // Before any clock edge: does the output payload show state the Verilog never initialised? (With
    // HARNESS_POWER_UP the power-up tests require it for some seed, so a build that lost the random state fails.)
    int power_up_nonzero = 0;
    {
        std::vector<uint32_t> pre(out_words);
        top->eval();
        get_sig(top->HARNESS_PORT(out, payload), pre.data(), out_words);
        for (uint32_t w : pre) power_up_nonzero |= w != 0;
    }
    top->clk = 0; top->rst = 1;
    for (int i = 0; i < 4; i++) { top->clk = 0; top->eval(); top->clk = 1; top->eval(); }
    top->rst = 0;

    std::vector<uint32_t> inbuf(in_words), outbuf(out_words);
    uint64_t group = 128;                                     // GROUP (its reset value), as the decoder holds it
    std::vector<uint16_t> vals;
    uint64_t cycles = 0, beats = 0, total_values = 0, stall_cycles = 0;
    int status = 0;
    std::string why;
    auto t0 = std::chrono::steady_clock::now();

    for (uint32_t t = 0; t < ntensors && !status; t++) {
        Tensor T;
        uint32_t nregs;
        if (!rd(f, &nregs, 4)) { fprintf(stderr, "truncated job\n"); return 2; }
        T.regs.resize(nregs);
        for (auto& r : T.regs) if (!rd(f, &r.first, 4) || !rd(f, &r.second, 4)) return 2;
        for (auto& r : T.regs) if (r.first == REG_GROUP) group = r.second;   // the register keeps its value
        if (!rd(f, &T.numel, 8)) return 2;
        for (int p = 0; p < 4; p++) {
            Plane& P = T.planes[p];
            const uint64_t wb = plane_bits[p] / 8;
            if (!rd(f, &P.n, 8)) return 2;
            P.data.resize(P.n * wb); P.last.resize(P.n);
            if (!rd(f, P.data.data(), P.n * wb) || !rd(f, P.last.data(), P.n)) return 2;
        }
        vals.clear(); vals.reserve(T.numel);
        size_t reg_ptr = 0;
        uint64_t idle_run = 0;
        bool last_seen = false;
        while (!status) {
            // ---- drive inputs for this cycle
            bool cfg_v = reg_ptr < T.regs.size();
            top->HARNESS_PORT(cfg, valid) = cfg_v;
            if (cfg_v) top->HARNESS_PORT(cfg, payload) = (uint64_t)T.regs[reg_ptr].first | ((uint64_t)T.regs[reg_ptr].second << 8);
            bool v[4];
            for (int p = 0; p < 4; p++) {
                Plane& P = T.planes[p];
                v[p] = P.ptr < P.n && !(p_idle > 0 && urand() < p_idle);
            }
#define DRIVE(idx, name) \
    top->HARNESS_PORT(name, valid) = v[idx]; \
    if (v[idx]) set_sig(top->HARNESS_PORT(name, payload), inbuf.data(), in_words), (void)0;
            for (int p = 0; p < 4; p++) {
                Plane& P = T.planes[p];
                if (v[p]) {
                    const uint32_t bits = plane_bits[p], wb = bits / 8;
                    std::fill(inbuf.begin(), inbuf.end(), 0);
                    memcpy(inbuf.data(), &P.data[P.ptr * wb], wb);
                    if (P.last[P.ptr]) inbuf[bits >> 5] |= 1u << (bits & 31);
                }
                switch (p) {
                    case 0: DRIVE(0, SPEC0) break;
#ifndef HARNESS_C2
                    case 1: DRIVE(1, spec_signman) break;
#endif
                    case 2: DRIVE(2, verif_codes) break;
                    case 3: DRIVE(3, verif_rest) break;
                }
            }
            bool out_r = !(p_bp > 0 && urand() < p_bp);
            top->HARNESS_PORT(out, ready) = out_r;
            top->clk = 0;
            top->eval();
            // ---- sample handshakes (transfers happen at the coming rising edge)
            bool cfg_x = cfg_v && top->HARNESS_PORT(cfg, ready);
#ifdef HARNESS_C2
            bool x1 = false;
#else
            bool x1 = v[1] && top->PORT_READY(spec_signman);
#endif
            bool x[4] = {v[0] && top->PORT_READY(SPEC0), x1,
                         v[2] && top->HARNESS_PORT(verif_codes, ready), v[3] && top->HARNESS_PORT(verif_rest, ready)};
            bool progress = cfg_x || x[0] || x[1] || x[2] || x[3];
            if (top->HARNESS_PORT(out, valid) && out_r) {
                get_sig(top->HARNESS_PORT(out, payload), outbuf.data(), out_words);
                uint32_t count = getbits(outbuf.data(), 16 * lanes, cb);
                uint32_t sb_end = getbits(outbuf.data(), 16 * lanes + cb, 1);
                uint32_t last = getbits(outbuf.data(), 16 * lanes + cb + 1, 1);
                const uint64_t before = vals.size(), after = before + count;
                if (count < 1 || count > lanes) { status = 5; why = "beat count out of range"; }
                // a beat never crosses a superblock end, and sb_end marks the beats that reach one
                else if (group && before / group != (after - 1) / group) {
                    status = 5; why = "beat crosses a superblock end";
                } else if (group && sb_end != (after % group == 0 || after == T.numel)) {
                    status = 5; why = "sb_end flag wrong";
                }
                for (uint32_t i = 0; i < lanes && !status; i++) {
                    uint32_t lv = getbits(outbuf.data(), 16 * i, 16);
                    if (i < count) vals.push_back((uint16_t)lv);
                    else if (lv) { status = 5; why = "unused lane not zero"; }
                }
                if (vals.size() > T.numel) { status = 5; why = "more values than numel"; }
                if (last && vals.size() != T.numel) { status = 5; why = "last flag before numel values"; }
                if (!last && vals.size() == T.numel) { status = 5; why = "no last flag on the final beat"; }
                last_seen = last_seen || last;
                beats++;
                progress = true;
            }
            if (!progress) stall_cycles++;
            top->clk = 1;
            top->eval();
            cycles++;
            if (cfg_x) reg_ptr++;
            for (int p = 0; p < 4; p++) if (x[p]) T.planes[p].ptr++;
            if (top->error) { status = 3; why = "decoder error output, error_code=" + std::to_string((int)top->error_code); break; }
            idle_run = progress ? 0 : idle_run + 1;
            if (idle_run > 100000) { status = 4; why = "hang: no transfer for 100000 cycles"; break; }
            if (last_seen && !top->busy) break;
        }
        if (!status) {
            for (auto& P : T.planes) if (P.ptr != P.n) { status = 5; why = "plane words left over after the tensor"; }
        }
        fwrite(vals.data(), 2, vals.size(), out);
        total_values += vals.size();
        if (status) fprintf(stderr, "tensor %u: %s (after %zu of %llu values)\n", t, why.c_str(), vals.size(),
                            (unsigned long long)T.numel);
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fclose(out);
    fclose(f);
    printf("{\"values\": %llu, \"cycles\": %llu, \"beats\": %llu, \"idle_cycles\": %llu, \"seconds\": %.6f, "
           "\"status\": %d, \"why\": \"%s\", \"power_up_nonzero\": %d}\n",
           (unsigned long long)total_values, (unsigned long long)cycles, (unsigned long long)beats,
           (unsigned long long)stall_cycles, secs, status, why.c_str(), power_up_nonzero);
    top->final();
    delete top;
    return status;
}
