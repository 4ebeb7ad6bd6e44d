// Bulk co-simulation harness for the online KV encoders (docs/HARDWARE.md section 3, C1: four planes
// spec_codes, spec_signman, verif_codes, verif_rest; compiled with -DHARNESS_C2, section 3a: three planes
// spec_mx, verif_codes, verif_rest), compiled with Verilator together with the exported Verilog. It streams
// batches of K/V vectors through the encoder without any per-cycle Python: register writes and input vectors
// come from a job file, every plane word the encoder emits goes to an output file, a one-line JSON summary
// to stdout. The model of tb/bulk/harness.cpp (the decoders' harness), mirrored for the encoder.
//
// Job file (little-endian), written by tb/bulk_encoder/__init__.py:
//   "CASSENC1" u32 version=1, u32 lanes, u32 word_bits, u32 nplanes, u32 nbatches
//   per batch: u32 nregs, nregs x (u32 addr, u32 data), u32 group_size G, u64 nvectors,
//              nvectors x G x u16 bf16 bits (vector-major)
// A batch = vectors sharing one register program (config + books). Per batch the harness writes every
// register first (inp idle: the encoder has no START, HARDWARE.md section 3 "Required order"), then offers
// the batch's beats (L values each, `last` on beat G/L - 1 of a vector). The next batch's writes wait for
// cfg.ready, which the encoder raises only when no vector is in flight.
// Output file: per plane (port order above): u64 nwords, nwords x word_bytes data, nwords x u8 last.
// Usage: Vharness_enc JOB OUT [--idle P] [--backpressure P] [--seed S]
//   --idle P: probability that inp idles in a cycle (a beat once offered stays offered until taken);
//   --backpressure P: probability that a plane's ready is low in a cycle (independently per plane).
// Exit status: 0 = every plane emitted one chunk per vector with a clean protocol; 3 = encoder error output;
// 4 = hang (no transfer for 100000 cycles); 5 = protocol violation (valid dropped or payload changed while
// not ready, more chunks than vectors, busy still high or cfg.ready low when idle, stray words); 2 = usage.
#include "Venc.h"
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
#ifdef HARNESS_C2
#define NPLANES 3
#else
#define NPLANES 4
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

struct Batch {
    std::vector<std::pair<uint32_t, uint32_t>> regs;
    uint32_t group = 0;
    uint64_t nvec = 0;
    std::vector<uint16_t> vals;
};

struct PlaneOut {
    std::vector<uint8_t> data, last;
    uint64_t chunks = 0;
    bool held = false;                  // valid && !ready in the previous cycle: must hold valid + payload
    std::vector<uint32_t> held_payload;
};

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline double urand() {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static bool rd(FILE* f, void* p, size_t n) { return n == 0 || fread(p, 1, n, f) == n; }

int main(int argc, char** argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s JOB OUT [--idle P] [--backpressure P] [--seed S]\n", argv[0]); return 2; }
    double p_idle = 0, p_bp = 0;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--idle")) p_idle = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--backpressure")) p_bp = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) rng_state = strtoull(argv[i + 1], nullptr, 0) * 2654435761ull + 1;
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    char magic[8]; uint32_t version, lanes, word_bits, nplanes, nbatches;
    if (!rd(f, magic, 8) || memcmp(magic, "CASSENC1", 8) || !rd(f, &version, 4) || version != 1 ||
        !rd(f, &lanes, 4) || !rd(f, &word_bits, 4) || !rd(f, &nplanes, 4) || !rd(f, &nbatches, 4) ||
        nplanes != NPLANES || lanes == 0 || word_bits % 32) {
        fprintf(stderr, "bad job file (or built for the other scheme: %d planes)\n", NPLANES); return 2;
    }
    std::vector<Batch> batches(nbatches);
    uint64_t total_vectors = 0;
    for (auto& B : batches) {
        uint32_t nregs;
        if (!rd(f, &nregs, 4)) { fprintf(stderr, "truncated job\n"); return 2; }
        B.regs.resize(nregs);
        for (auto& r : B.regs) if (!rd(f, &r.first, 4) || !rd(f, &r.second, 4)) { fprintf(stderr, "truncated job\n"); return 2; }
        if (!rd(f, &B.group, 4) || !rd(f, &B.nvec, 8) || B.group == 0 || B.group % lanes) {
            fprintf(stderr, "bad batch header (G must be a multiple of the lanes)\n"); return 2;
        }
        B.vals.resize(B.nvec * B.group);
        if (!rd(f, B.vals.data(), B.vals.size() * 2)) { fprintf(stderr, "truncated job\n"); return 2; }
        total_vectors += B.nvec;
    }
    fclose(f);

    const int wb = word_bits / 8;
    const int in_words = (16 * lanes + 1) / 32 + 2;
    const int out_words = word_bits / 32 + 2;               // data + last bit + slack

    Verilated::commandArgs(1, argv);
#ifdef HARNESS_POWER_UP
    // power-up state: every flip-flop and memory word random (Verilog without initial values, --x-initial
    // unique), from this job's seed; the reset below then sets the registers that have a reset
    Verilated::randReset(2);
    Verilated::randSeed(static_cast<int>(rng_state % 2147483647u) + 1);
#endif
    Venc* top = new Venc;
    // Before any clock edge: do the plane outputs show state the Verilog never initialised? (tb/bulk/harness.cpp)
    int power_up_nonzero = 0;
    {
        std::vector<uint32_t> pre(out_words);
        top->eval();
#ifdef HARNESS_C2
        get_sig(top->HARNESS_PORT(spec_mx, payload), pre.data(), out_words);
#else
        get_sig(top->HARNESS_PORT(spec_codes, payload), pre.data(), out_words);
#endif
        for (uint32_t w : pre) power_up_nonzero |= w != 0;
        get_sig(top->HARNESS_PORT(verif_rest, payload), pre.data(), out_words);
        for (uint32_t w : pre) power_up_nonzero |= w != 0;
    }
    top->clk = 0; top->rst = 1;
    top->HARNESS_PORT(inp, valid) = 0; top->HARNESS_PORT(cfg, valid) = 0;
    for (int i = 0; i < 4; i++) { top->clk = 0; top->eval(); top->clk = 1; top->eval(); }
    top->rst = 0;

    std::vector<uint32_t> inbuf(in_words), outbuf(out_words);
    PlaneOut planes[NPLANES];
    for (auto& P : planes) P.held_payload.resize(out_words);
    uint64_t cycles = 0, beats = 0, cfg_writes = 0, stall_cycles = 0, values = 0;
    int status = 0;
    std::string why;
    auto t0 = std::chrono::steady_clock::now();

    // host state: batch b, phase 0 = register writes, 1 = beats; reg_ptr / beat_ptr inside the batch
    uint32_t b = 0;
    int phase = 0;
    size_t reg_ptr = 0;
    uint64_t beat_ptr = 0, idle_run = 0, vectors_in = 0;
    bool inp_offered = false;
    while (!status) {
        while (b < nbatches && ((phase == 0 && reg_ptr == batches[b].regs.size()) ||
                                (phase == 1 && beat_ptr == batches[b].nvec * (batches[b].group / lanes)))) {
            if (phase == 0) { phase = 1; beat_ptr = 0; }
            else { b++; phase = 0; reg_ptr = 0; }
        }
        bool host_done = b >= nbatches;
        // ---- drive inputs for this cycle
        bool cfg_v = !host_done && phase == 0;
        top->HARNESS_PORT(cfg, valid) = cfg_v;
        if (cfg_v) top->HARNESS_PORT(cfg, payload) = (uint64_t)batches[b].regs[reg_ptr].first |
                                                     ((uint64_t)batches[b].regs[reg_ptr].second << 8);
        bool in_v = !host_done && phase == 1 && (inp_offered || !(p_idle > 0 && urand() < p_idle));
        top->HARNESS_PORT(inp, valid) = in_v;
        uint32_t G = host_done ? 0 : batches[b].group;
        if (in_v) {
            const Batch& B = batches[b];
            uint32_t bpv = G / lanes;
            std::fill(inbuf.begin(), inbuf.end(), 0);
            const uint16_t* src = &B.vals[beat_ptr * lanes];
            for (uint32_t i = 0; i < lanes; i++) inbuf[i >> 1] |= (uint32_t)src[i] << (16 * (i & 1));
            if (beat_ptr % bpv == bpv - 1) inbuf[(16 * lanes) >> 5] |= 1u << ((16 * lanes) & 31);
            set_sig(top->HARNESS_PORT(inp, payload), inbuf.data(), in_words);
        }
        inp_offered = in_v;
        bool rdy[NPLANES];
        for (int p = 0; p < NPLANES; p++) rdy[p] = !(p_bp > 0 && urand() < p_bp);
#ifdef HARNESS_C2
        top->HARNESS_PORT(spec_mx, ready) = rdy[0];
        top->HARNESS_PORT(verif_codes, ready) = rdy[1];
        top->HARNESS_PORT(verif_rest, ready) = rdy[2];
#else
        top->HARNESS_PORT(spec_codes, ready) = rdy[0];
        top->HARNESS_PORT(spec_signman, ready) = rdy[1];
        top->HARNESS_PORT(verif_codes, ready) = rdy[2];
        top->HARNESS_PORT(verif_rest, ready) = rdy[3];
#endif
        top->clk = 0;
        top->eval();
        // ---- sample handshakes (transfers happen at the coming rising edge)
        bool cfg_x = cfg_v && top->HARNESS_PORT(cfg, ready);
        bool in_x = in_v && top->HARNESS_PORT(inp, ready);
        bool progress = cfg_x || in_x;
        bool ov[NPLANES];
#define SAMPLE(idx, name) \
    ov[idx] = top->HARNESS_PORT(name, valid); \
    if (ov[idx]) get_sig(top->HARNESS_PORT(name, payload), outbuf.data(), out_words); \
    if (ov[idx] || planes[idx].held) { \
        PlaneOut& P = planes[idx]; \
        if (P.held && !ov[idx]) { status = 5; why = std::string(#name) + ": valid dropped before ready"; } \
        else if (P.held && memcmp(P.held_payload.data(), outbuf.data(), 4 * out_words)) { \
            status = 5; why = std::string(#name) + ": payload changed while not ready"; } \
        if (ov[idx] && rdy[idx]) { \
            bool lst = (outbuf[word_bits >> 5] >> (word_bits & 31)) & 1; \
            P.data.insert(P.data.end(), (uint8_t*)outbuf.data(), (uint8_t*)outbuf.data() + wb); \
            P.last.push_back(lst); \
            if (lst && ++P.chunks > vectors_in) { status = 5; why = std::string(#name) + ": a chunk closed before its vector was in"; } \
            progress = true; P.held = false; \
        } else if (ov[idx]) { P.held = true; P.held_payload = outbuf; } \
        else P.held = false; \
    }
#ifdef HARNESS_C2
        SAMPLE(0, spec_mx) SAMPLE(1, verif_codes) SAMPLE(2, verif_rest)
#else
        SAMPLE(0, spec_codes) SAMPLE(1, spec_signman) SAMPLE(2, verif_codes) SAMPLE(3, verif_rest)
#endif
        if (!progress) stall_cycles++;
        top->clk = 1;
        top->eval();
        cycles++;
        if (cfg_x) { reg_ptr++; cfg_writes++; }
        if (in_x) {
            beat_ptr++; beats++; values += lanes; inp_offered = false;
            if (beat_ptr % (G / lanes) == 0) vectors_in++;
        }
        if (top->error) { status = 3; why = "encoder error output, error_code=" + std::to_string((int)top->error_code); break; }
        idle_run = progress ? 0 : idle_run + 1;
        if (idle_run > 100000) { status = 4; why = "hang: no transfer for 100000 cycles"; break; }
        bool all_out = true;
        for (auto& P : planes) all_out = all_out && P.chunks == total_vectors;
        if (host_done && all_out) {
            // settle: a few idle cycles, then busy must be low, cfg.ready high and no plane may offer a word
            for (int i = 0; i < 8 && !status; i++) {
                top->clk = 0; top->eval();
#ifdef HARNESS_C2
                bool stray = top->HARNESS_PORT(spec_mx, valid) || top->HARNESS_PORT(verif_codes, valid) ||
                             top->HARNESS_PORT(verif_rest, valid);
#else
                bool stray = top->HARNESS_PORT(spec_codes, valid) || top->HARNESS_PORT(spec_signman, valid) ||
                             top->HARNESS_PORT(verif_codes, valid) || top->HARNESS_PORT(verif_rest, valid);
#endif
                if (stray) { status = 5; why = "a plane offers a word after every vector's chunk"; }
                top->clk = 1; top->eval(); cycles++;
            }
            if (!status && top->busy) { status = 5; why = "busy still high after every chunk is out"; }
            if (!status) { top->clk = 0; top->eval(); if (!top->HARNESS_PORT(cfg, ready)) { status = 5; why = "cfg.ready low while idle"; } }
            break;
        }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    FILE* out = fopen(argv[2], "wb");
    if (!out) { perror(argv[2]); return 2; }
    uint64_t words = 0;
    for (auto& P : planes) {
        uint64_t n = P.last.size();
        words += n;
        fwrite(&n, 8, 1, out);
        fwrite(P.data.data(), 1, P.data.size(), out);
        fwrite(P.last.data(), 1, P.last.size(), out);
    }
    fclose(out);
    if (status) fprintf(stderr, "batch %u: %s (after %llu of %llu vectors in)\n", b, why.c_str(),
                        (unsigned long long)vectors_in, (unsigned long long)total_vectors);
    printf("{\"vectors\": %llu, \"values\": %llu, \"cycles\": %llu, \"beats\": %llu, \"cfg_writes\": %llu, "
           "\"words\": %llu, \"idle_cycles\": %llu, \"seconds\": %.6f, \"status\": %d, \"why\": \"%s\", "
           "\"power_up_nonzero\": %d}\n",
           (unsigned long long)vectors_in, (unsigned long long)values, (unsigned long long)cycles,
           (unsigned long long)beats, (unsigned long long)cfg_writes, (unsigned long long)words,
           (unsigned long long)stall_cycles, secs, status, why.c_str(), power_up_nonzero);
    top->final();
    delete top;
    return status;
}
