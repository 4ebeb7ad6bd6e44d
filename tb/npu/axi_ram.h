// axi_ram.h — cycle-level AXI4 memory slave for the Verilated NPU tile's read and write masters.
//
// What it models
//   * A flat byte-addressed memory (mem()/size()) behind one AXI4 slave port of data_bytes (W) bytes per beat:
//     INCR bursts of full-width beats, a single ID, responses in order.
//   * Bandwidth as a token bucket of bytes, refilled by bw_bytes_per_cycle every cycle (capped at
//     BUDGET_CAP_BEATS beats, or two cycles' worth if that is more) and SHARED by reads and writes. An R beat and
//     a W beat each cost W bytes whatever the strobes. At most one R and one W beat move per cycle; when both
//     want to move and the budget holds only one, they alternate.
//   * A fixed read latency: the first beat of a burst appears no earlier than read_latency cycles after its AR
//     handshake. Accepted bursts return in order, back to back when the budget allows, so the latency of later
//     bursts overlaps the data of earlier ones (a pipelined memory).
//   * Writes: AW and W are accepted independently, W beats only for an already accepted AW (in order, from
//     the cycle after its AW handshake; a W that comes first simply waits); the B response appears
//     write_latency cycles after the burst's last W beat. wready is raised only when the budget holds a beat
//     (the beat is reserved, and refunded if the master does not send it).
//   * Back-pressure: arready is low while max_outstanding_reads bursts are in flight (accepted, last beat not yet
//     taken), awready is low while max_outstanding_writes bursts are unanswered (B not yet taken).
//   * Protocol checks; the first violation is recorded (error()) and the model then does nothing (all outputs
//     low): burst != INCR, size != log2(W), a burst crossing a 4 KiB boundary, len+1 > max_burst_beats, an
//     address outside the memory or not aligned to W, wlast on the wrong beat (early or missing), and the AXI
//     stability rule on AR, AW and W (a valid dropped before its handshake, or its payload changed while
//     valid & !ready).
//
// What it does not model
//   DRAM banks, rows, row-buffer hits, refresh, read/write turnaround, multiple IDs or reordering, FIXED/WRAP
//   bursts, narrow transfers, error responses (rresp/bresp are always OKAY), exclusive access, variable latency.
//   Latency is fixed and the bandwidth is a single average rate.
//
// Timing convention (one call pair per clock cycle c):
//     ram.drive(pins);   // slave outputs of cycle c, from registered state only (never from this cycle's valids)
//     ... master outputs of cycle c settle (Verilated eval) ...
//     ram.edge(pins);    // before the rising edge: completes cycle c's handshakes, advances to cycle c+1
//   A read accepted in cycle t shows its first beat in cycle t + read_latency (read_latency >= 1); a write whose
//   last W beat moves in cycle t shows bvalid in cycle t + write_latency (write_latency >= 1). Data lanes are
//   little-endian bytes: rdata[i] / wdata[i] is byte i of the beat (address addr + i), wstrb bit i enables
//   wdata[i].
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

// The flat AXI4 pins of one master port (m_axi_*), copied to and from the Verilated model by the harness.
struct AxiPins {
    // read address (master -> slave, except arready)
    uint64_t araddr = 0;
    uint8_t arlen = 0, arsize = 0, arburst = 0, arvalid = 0;
    uint8_t arready = 0;  // slave
    // read data (slave -> master, except rready)
    uint8_t rdata[64] = {};
    uint8_t rresp = 0, rlast = 0, rvalid = 0;
    uint8_t rready = 0;  // master
    // write address
    uint64_t awaddr = 0;
    uint8_t awlen = 0, awsize = 0, awburst = 0, awvalid = 0;
    uint8_t awready = 0;  // slave
    // write data
    uint8_t wdata[64] = {};
    uint64_t wstrb = 0;
    uint8_t wlast = 0, wvalid = 0;
    uint8_t wready = 0;  // slave
    // write response
    uint8_t bresp = 0, bvalid = 0;
    uint8_t bready = 0;  // master
};

struct AxiRamStats {
    uint64_t cycles = 0;                 // edge() calls
    uint64_t read_beats = 0;             // R handshakes
    uint64_t write_beats = 0;            // W handshakes
    uint64_t read_bytes = 0;             // read_beats * data_bytes
    uint64_t write_bytes = 0;            // write_beats * data_bytes (what the budget was charged)
    uint64_t write_bytes_strobed = 0;    // bytes actually written (strobe bits set)
    uint64_t read_bursts = 0;            // AR handshakes
    uint64_t write_bursts = 0;           // AW handshakes
    uint64_t r_cycles = 0;               // cycles with an R beat
    uint64_t w_cycles = 0;               // cycles with a W beat
    // cycles where an R or W beat was ready to move next cycle but the budget had no room (or lost the
    // alternation); a W beat counts as ready once its AW is accepted (wvalid of the next cycle is not known yet)
    uint64_t budget_limited_cycles = 0;
    uint64_t max_outstanding_reads = 0;  // most read bursts in flight at once
    uint64_t max_outstanding_writes = 0; // most write bursts unanswered at once
};

class AxiRam {
public:
    static constexpr unsigned BUDGET_CAP_BEATS = 4;  // token bucket depth, in beats
    static constexpr uint8_t BURST_INCR = 1;

    AxiRam(size_t mem_bytes, unsigned data_bytes, double bw_bytes_per_cycle, unsigned read_latency,
           unsigned write_latency, unsigned max_burst_beats = 256, unsigned max_outstanding_reads = 16,
           unsigned max_outstanding_writes = 8)
        : mem_(mem_bytes, 0), W_(data_bytes), bw_(bw_bytes_per_cycle), rl_(read_latency), wl_(write_latency),
          max_beats_(max_burst_beats), max_rd_(max_outstanding_reads), max_wr_(max_outstanding_writes) {
        if (W_ == 0 || W_ > 64 || (W_ & (W_ - 1)) != 0)
            throw std::invalid_argument("AxiRam: data_bytes must be a power of two in 1..64");
        if (!(bw_ > 0.0)) throw std::invalid_argument("AxiRam: bw_bytes_per_cycle must be > 0");
        if (rl_ < 1 || wl_ < 1) throw std::invalid_argument("AxiRam: latencies must be >= 1 (outputs are registered)");
        if (max_beats_ < 1 || max_beats_ > 256) throw std::invalid_argument("AxiRam: max_burst_beats must be 1..256");
        if (max_rd_ < 1 || max_wr_ < 1) throw std::invalid_argument("AxiRam: outstanding limits must be >= 1");
        size_log2_ = 0;
        while ((1u << size_log2_) < W_) ++size_log2_;
        cap_ = std::max(double(BUDGET_CAP_BEATS) * W_, 2.0 * bw_);
        reset();
    }

    uint8_t* mem() { return mem_.data(); }
    const uint8_t* mem() const { return mem_.data(); }
    size_t size() const { return mem_.size(); }
    unsigned data_bytes() const { return W_; }
    double budget() const { return budget_; }
    double budget_cap() const { return cap_; }
    uint64_t cycle() const { return cyc_; }
    unsigned outstanding_reads() const { return rd_out_; }
    unsigned outstanding_writes() const { return wr_out_; }
    bool idle() const { return rd_out_ == 0 && wr_out_ == 0 && !rvalid_q_; }
    const AxiRamStats& stats() const { return st_; }
    const char* error() const { return err_.empty() ? nullptr : err_.c_str(); }

    // Back to the power-up state (empty queues, empty budget, statistics and error cleared); memory is kept.
    void reset() {
        cyc_ = 0;
        budget_ = 0.0;
        st_ = AxiRamStats{};
        err_.clear();
        rpend_.clear();
        wq_.clear();
        bq_.clear();
        rd_out_ = wr_out_ = 0;
        rvalid_q_ = rlast_q_ = false;
        std::memset(rdata_q_, 0, sizeof rdata_q_);
        bvalid_q_ = false;
        wready_q_ = false;
        arready_q_ = awready_q_ = true;
        w_prefer_ = false;
        ar_wait_ = aw_wait_ = w_wait_ = false;
    }

    // Slave outputs for the current cycle, from registered state only.
    void drive(AxiPins& p) const {
        const bool on = err_.empty();
        p.arready = on && arready_q_;
        p.rvalid = on && rvalid_q_;
        p.rlast = on && rvalid_q_ && rlast_q_;
        p.rresp = 0;
        std::memcpy(p.rdata, rdata_q_, sizeof p.rdata);
        p.awready = on && awready_q_;
        p.wready = on && wready_q_;
        p.bvalid = on && bvalid_q_;
        p.bresp = 0;
    }

    // The master's outputs of the current cycle have settled: complete this cycle's handshakes, advance a cycle.
    void edge(const AxiPins& p) {
        if (!err_.empty()) return;
        const uint64_t c = cyc_;

        // --- AXI stability rule: a valid that saw !ready last cycle must still be there, payload unchanged ---
        if (ar_wait_ && (!p.arvalid || p.araddr != ar_prev_.araddr || p.arlen != ar_prev_.arlen ||
                         p.arsize != ar_prev_.arsize || p.arburst != ar_prev_.arburst))
            return fail(!p.arvalid ? "AR: arvalid dropped before its handshake"
                                   : "AR: payload changed while arvalid & !arready");
        if (aw_wait_ && (!p.awvalid || p.awaddr != aw_prev_.awaddr || p.awlen != aw_prev_.awlen ||
                         p.awsize != aw_prev_.awsize || p.awburst != aw_prev_.awburst))
            return fail(!p.awvalid ? "AW: awvalid dropped before its handshake"
                                   : "AW: payload changed while awvalid & !awready");
        if (w_wait_ && (!p.wvalid || p.wlast != w_prev_.wlast || (p.wstrb & lane_mask()) != w_prev_.wstrb ||
                        std::memcmp(p.wdata, w_prev_.wdata, W_) != 0))
            return fail(!p.wvalid ? "W: wvalid dropped before its handshake"
                                  : "W: payload changed while wvalid & !wready");

        // --- handshakes of this cycle (ready as driven from registered state) ---
        const bool ar_hs = p.arvalid && arready_q_;
        const bool aw_hs = p.awvalid && awready_q_;
        const bool w_hs = p.wvalid && wready_q_;
        const bool r_hs = rvalid_q_ && p.rready;
        const bool b_hs = bvalid_q_ && p.bready;

        if (r_hs) {
            ++st_.read_beats;
            ++st_.r_cycles;
            st_.read_bytes += W_;
            if (rlast_q_) --rd_out_;
            rvalid_q_ = false;
        }
        if (b_hs) {
            bq_.pop_front();
            --wr_out_;
            bvalid_q_ = false;
        }
        if (w_hs) {
            // wready is only raised for an accepted AW, so the beat belongs to wq_.front()
            WBurst& b = wq_.front();
            const bool last = b.next + 1 == b.beats;
            if (bool(p.wlast) != last) {
                char m[128];
                std::snprintf(m, sizeof m, "W: wlast %s on beat %u of a %u-beat burst at 0x%llx",
                              p.wlast ? "set" : "missing", b.next + 1, b.beats, (unsigned long long)b.addr);
                return fail(m);
            }
            const uint64_t a = b.addr + uint64_t(b.next) * W_;
            for (unsigned i = 0; i < W_; ++i)
                if ((p.wstrb >> i) & 1) {
                    mem_[a + i] = p.wdata[i];
                    ++st_.write_bytes_strobed;
                }
            ++st_.write_beats;
            ++st_.w_cycles;
            st_.write_bytes += W_;
            if (++b.next == b.beats) {
                wq_.pop_front();
                bq_.push_back(c + wl_);
            }
        } else if (wready_q_) {
            budget_ += W_;  // the beat reserved for this cycle did not come: refund it
        }
        if (ar_hs) {
            if (!check_burst("AR", p.araddr, p.arlen, p.arsize, p.arburst)) return;
            rpend_.push_back(RBurst{p.araddr, unsigned(p.arlen) + 1, 0, c + rl_});
            ++rd_out_;
            ++st_.read_bursts;
            st_.max_outstanding_reads = std::max<uint64_t>(st_.max_outstanding_reads, rd_out_);
        }
        if (aw_hs) {
            if (!check_burst("AW", p.awaddr, p.awlen, p.awsize, p.awburst)) return;
            wq_.push_back(WBurst{p.awaddr, unsigned(p.awlen) + 1, 0});
            ++wr_out_;
            ++st_.write_bursts;
            st_.max_outstanding_writes = std::max<uint64_t>(st_.max_outstanding_writes, wr_out_);
        }

        // remember what must stay stable into the next cycle
        ar_wait_ = p.arvalid && !arready_q_;
        aw_wait_ = p.awvalid && !awready_q_;
        w_wait_ = p.wvalid && !wready_q_;
        if (ar_wait_) ar_prev_ = p;
        if (aw_wait_) aw_prev_ = p;
        if (w_wait_) {
            std::memcpy(w_prev_.wdata, p.wdata, W_);
            w_prev_.wstrb = p.wstrb & lane_mask();
            w_prev_.wlast = p.wlast;
        }

        // --- budget and next cycle's beats ---
        budget_ = std::min(cap_, budget_ + bw_);
        const uint64_t next = c + 1;
        const bool r_want = !rvalid_q_ && !rpend_.empty() &&
                            (rpend_.front().next > 0 || rpend_.front().first_cycle <= next);
        const bool w_want = !wq_.empty();
        bool r_go = false, w_go = false;
        if (r_want && w_want) {
            if (budget_ >= 2.0 * W_) {
                r_go = w_go = true;
            } else if (budget_ >= W_) {
                (w_prefer_ ? w_go : r_go) = true;
                w_prefer_ = !w_prefer_;
            }
        } else if (r_want) {
            r_go = budget_ >= W_;
        } else if (w_want) {
            w_go = budget_ >= W_;
        }
        if ((r_want && !r_go) || (w_want && !w_go)) ++st_.budget_limited_cycles;
        if (r_go) {
            budget_ -= W_;
            RBurst& b = rpend_.front();
            std::memcpy(rdata_q_, &mem_[b.addr + uint64_t(b.next) * W_], W_);
            rvalid_q_ = true;
            rlast_q_ = ++b.next == b.beats;
            if (rlast_q_) rpend_.pop_front();
        }
        if (w_go) budget_ -= W_;  // reserved; refunded next cycle if no W beat comes
        wready_q_ = w_go;
        arready_q_ = rd_out_ < max_rd_;
        awready_q_ = wr_out_ < max_wr_;
        bvalid_q_ = !bq_.empty() && bq_.front() <= next;

        ++st_.cycles;
        cyc_ = next;
    }

private:
    struct RBurst {
        uint64_t addr;
        unsigned beats, next;
        uint64_t first_cycle;  // earliest cycle its first beat may be presented
    };
    struct WBurst {
        uint64_t addr;
        unsigned beats, next;
    };
    struct WPrev {
        uint8_t wdata[64] = {};
        uint64_t wstrb = 0;
        uint8_t wlast = 0;
    };

    uint64_t lane_mask() const { return W_ >= 64 ? ~uint64_t(0) : ((uint64_t(1) << W_) - 1); }

    void fail(const std::string& m) {
        if (err_.empty()) {
            char pre[48];
            std::snprintf(pre, sizeof pre, "cycle %llu: ", (unsigned long long)cyc_);
            err_ = pre + m;
        }
    }

    bool check_burst(const char* ch, uint64_t addr, uint8_t len, uint8_t size, uint8_t burst) {
        const uint64_t beats = uint64_t(len) + 1, bytes = beats * W_;
        char m[160];
        const unsigned long long a = (unsigned long long)addr;
        if (burst != BURST_INCR)
            std::snprintf(m, sizeof m, "%s: burst type %u is not INCR (1)", ch, unsigned(burst));
        else if (size != size_log2_)
            std::snprintf(m, sizeof m, "%s: size %u is not log2(data_bytes) = %u", ch, unsigned(size), size_log2_);
        else if (beats > max_beats_)
            std::snprintf(m, sizeof m, "%s: len+1 = %llu beats exceeds max_burst_beats %u", ch,
                          (unsigned long long)beats, max_beats_);
        else if (addr % W_ != 0)
            std::snprintf(m, sizeof m, "%s: address 0x%llx not aligned to %u bytes", ch, a, W_);
        else if (addr >= mem_.size() || bytes > mem_.size() - addr)
            std::snprintf(m, sizeof m, "%s: burst 0x%llx + %llu bytes outside memory of %zu bytes", ch, a,
                          (unsigned long long)bytes, mem_.size());
        else if ((addr & 0xFFF) + bytes > 0x1000)
            std::snprintf(m, sizeof m, "%s: burst 0x%llx + %llu bytes crosses a 4 KiB boundary", ch, a,
                          (unsigned long long)bytes);
        else
            return true;
        fail(m);
        return false;
    }

    std::vector<uint8_t> mem_;
    unsigned W_;
    double bw_;
    unsigned rl_, wl_, max_beats_, max_rd_, max_wr_;
    unsigned size_log2_ = 0;
    double cap_ = 0.0;

    uint64_t cyc_ = 0;
    double budget_ = 0.0;
    AxiRamStats st_;
    std::string err_;

    std::deque<RBurst> rpend_;  // accepted reads with beats still to present (front first)
    std::deque<WBurst> wq_;     // accepted writes with W beats still to come (front first)
    std::deque<uint64_t> bq_;   // completed writes: cycle from which their B may be presented
    unsigned rd_out_ = 0, wr_out_ = 0;

    // registered outputs
    bool arready_q_ = true, awready_q_ = true, wready_q_ = false, bvalid_q_ = false;
    bool rvalid_q_ = false, rlast_q_ = false;
    uint8_t rdata_q_[64] = {};
    bool w_prefer_ = false;  // who wins the next read/write conflict for a one-beat budget

    // stability tracking
    bool ar_wait_ = false, aw_wait_ = false, w_wait_ = false;
    AxiPins ar_prev_, aw_prev_;
    WPrev w_prev_;
};
