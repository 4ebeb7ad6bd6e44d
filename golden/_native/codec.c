/* Compiled twin of the golden codec (golden/codec.py, golden/escfield.py, docs/FORMAT.md): formats 2.0 and
 * 3.0, one pass per chunk.
 *
 * Format 2.0 (v1.0 is its case A = 1, no pairs): every plane is a sequence of byte-aligned chunks of A
 * superblocks whose fields lie back to back; codebooks have groups of one or two symbols (code of group q:
 * q zeros then a one; the second symbol of a pair is told by a suffix bit t, the FIRST bit of the value's
 * companion field: C1 spec.signman, C1 verif.rest of a pruned value, C2 verif.rest of a draft-zero value;
 * escape: Q zeros, a one, 8 raw bits). Codebooks are built in Python (codebook.build_codebook) and come
 * here as small tables (native.py):
 *   encoder, per symbol 0..256: q | pair << 8 | t << 9   (q = Q: not in the book, escape)
 *   decoder, per group q < Q:   S[b_q] | S[b_q + pair] << 9 | pair << 18
 * Every plane's chunk offsets (nchunks + 1 byte offsets, stored index or computed) come in as arrays.
 *
 * Format 3.0 (argument l3 = 1; golden/escfield.py, FORMAT.md section 3.4): an escape is Q zeros and a one in
 * the code plane, its 8 raw bits the first bits of the value's companion field; C2's spec.mx holds per MX
 * block [X][the block's keep bits, if the config prunes][its kept values' fields]. A C1 field plane whose
 * book has no pair has no index in either format; in 3.0 its chunk sizes depend on the escapes, so the
 * decoders take its offsets as NULL and find each chunk where the one before it ends (sequential reading).
 *
 * The numpy code in codec.py is the normative implementation; this file must produce the same bytes and
 * the same decoded arrays (tests/test_golden_native.py checks it). It is built on first use by
 * golden/native.py (cc -O3 -shared) and called through ctypes; every function is plain C on caller-owned
 * buffers and holds no global state, so threads may call it concurrently.
 *
 * Error policy: the decoders return a non-zero code on any malformed input (impossible code, overrun,
 * trailing bytes, non-zero padding, wrong keep count, bad delta, bad offsets) and native.py then re-runs
 * the numpy decoder, which raises the precise FormatError. So this file only needs to be *strict*, never
 * to explain.
 *
 * Host: little-endian (native.py checks), 64-bit. Bit order: stream bit i = (byte[i/8] >> (i%8)) & 1,
 * fields LSB first (FORMAT.md §5).
 */
#include <stdint.h>
#include <string.h>

#define PRUNED 256
#define MX_BLOCK 32
#define ESC_BITS 8
#define DEC_ESC3 (1 << 19)      /* get_codes' entry for a format 3.0 escape (payload in the companion field) */

/* ------------------------------------------------------------------------------------------ bit I/O */

/* Decoders read planes through unchecked 8-byte loads: the caller (native.py) hands every plane in a
 * buffer followed by `slack` zero bytes, and the decoders refuse to run unless slack >= MIN_SLACK(A, G).
 * That bound holds for any input, malformed or not: every read of a chunk starts at or before the plane's
 * end (offsets are checked to lie in [0, len]) plus at most 24 bits per value of the chunk (the longest
 * code; fields are <= 9 bits, a C2 superblock's header < 24 bits per value), and reads 8 bytes. Bits past
 * the end read as zero, as they would in a bounds-checked reader; a chunk whose fields run past its end
 * is an error anyway (chunk_ok). */
#define MIN_SLACK(A, G) (3 * (A) * (G) + 16)

static inline uint64_t load64(const uint8_t *p, int64_t byte) {
    uint64_t v;
    memcpy(&v, p + byte, 8);
    return v;
}

/* 57 valid bits starting at stream bit pos */
static inline uint64_t peek(const uint8_t *p, int64_t pos) {
    return load64(p, pos >> 3) >> (pos & 7);
}

/* Bit writer: bits below `cnt` of `acc` are pending; every put stores 8 bytes and advances by whole
 * bytes (no data-dependent branch). Buffers carry 8 bytes of slack. */
typedef struct { uint8_t *p; int64_t byte; uint64_t acc; int cnt; } wr_t;

static inline void put(wr_t *w, uint64_t v, int n) {          /* n <= 24, v < 2^n (v = 0 if n = 0) */
    w->acc |= v << w->cnt;
    w->cnt += n;
    memcpy(w->p + w->byte, &w->acc, 8);
    int adv = w->cnt >> 3;
    w->byte += adv;
    w->acc >>= 8 * adv;                                        /* adv <= 3 */
    w->cnt &= 7;
}

static inline void flush_chunk(wr_t *w) {                     /* zero-pad to the byte boundary */
    if (w->cnt) {
        memcpy(w->p + w->byte, &w->acc, 8);
        w->byte++;
    }
    w->acc = 0;
    w->cnt = 0;
}

#define ENC_Q(ce) ((ce) & 0xFF)
#define ENC_PAIR(ce) (((ce) >> 8) & 1)
#define ENC_T(ce) (((ce) >> 9) & 1)
#define DEC_PAIR(d) (((d) >> 18) & 1)
#define DEC_SYM(d, t) ((((uint32_t)(d)) >> (9 * (t))) & 0x1FF)     /* t = 0: S[b_q]; t = 1: S[b_q + 1] */

/* Unary group code of a symbol (encoder table entry ce = q | pair << 8 | t << 9): group q -> 1 << q
 * (q+1 bits); escape (q = Q) -> Q zeros, 1 and, in format 2.0 (l3 = 0), the 8 raw bits. The suffix bit
 * (and in 3.0 an escape's raw bits) go to the companion field. */
static inline void put_code(wr_t *w, int32_t ce, int Q, int sym, int l3) {
    int q = ENC_Q(ce), esc = q >= Q && !l3;                      /* q <= Q: the table's escape is Q */
    uint64_t v = esc ? ((1ull << Q) | ((uint64_t)(sym & 0xFF) << (Q + 1))) : (1ull << q);
    put(w, v, esc ? Q + 1 + ESC_BITS : q + 1);
}

/* A companion field: the value's body after its prefix, the suffix bit t of a pair group (pair = 1) or, in
 * format 3.0, an escaped symbol's 8 raw bits (esc3 = 1). Returns the field; *w += the prefix width. */
static inline uint32_t with_prefix(uint32_t body, int32_t ce, int esc3, int sym, int *w) {
    int pw = ENC_PAIR(ce) + ESC_BITS * esc3;
    *w += pw;
    return (body << pw) | (esc3 ? (uint32_t)(sym & 0xFF) : (uint32_t)ENC_T(ce));
}

static const uint32_t WMASK[33] = {                                   /* WMASK[w] = 2^w - 1 */
    0x0, 0x1, 0x3, 0x7, 0xF, 0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF, 0x3FFF, 0x7FFF,
    0xFFFF, 0x1FFFF, 0x3FFFF, 0x7FFFF, 0xFFFFF, 0x1FFFFF, 0x3FFFFF, 0x7FFFFF, 0xFFFFFF, 0x1FFFFFF,
    0x3FFFFFF, 0x7FFFFFF, 0xFFFFFFF, 0x1FFFFFFF, 0x3FFFFFFF, 0x7FFFFFFF, 0xFFFFFFFF};

/* Byte table of the code parse: for the 8 bits b at a code boundary, the codes that end inside them:
 * count (bits 0-3), bits they take (4-7), their largest group (8-10), their groups, 3 bits each (16+).
 * A byte whose codes all have groups < Q, within the codes still due, is parsed in one step. */
typedef uint64_t code_lut_t[256];

static void build_code_lut(code_lut_t lut) {
    for (int b = 0; b < 256; b++) {
        uint64_t e = 0, qs = 0;
        int cnt = 0, z = 0, len = 0, mq = 0;
        for (int i = 0; i < 8; i++) {
            if ((b >> i) & 1) {
                qs |= (uint64_t)z << (3 * cnt);
                mq = z > mq ? z : mq;
                cnt++;
                len = i + 1;
                z = 0;
            } else {
                z++;
            }
        }
        e = (uint64_t)cnt | ((uint64_t)len << 4) | ((uint64_t)mq << 8) | (qs << 16);
        lut[b] = e;
    }
}

/* Decode `count` codes starting at stream bit `start` of a chunk ending at bit `end`; returns the bits
 * used, or -1. out[i] = the group's decoder entry (escape: raw | raw << 9, no pair); out must have 8
 * entries of slack (a byte step stores 8). The codes are taken from a 64-bit register refilled when fewer
 * than 24 bits (the longest code) remain: a byte of short codes per table step, else one code (ctz). */
static void build_pair_table(const int32_t *table, int K, uint64_t *t64) {   /* entries of groups q0, q1 < 8 */
    for (int q = 0; q < 64; q++) {
        int q0 = q & 7, q1 = q >> 3;
        t64[q] = (uint64_t)(uint32_t)(q0 < K ? table[q0] : 0) | ((uint64_t)(uint32_t)(q1 < K ? table[q1] : 0) << 32);
    }
}

static int64_t get_codes(const uint8_t *p, int64_t start, int64_t end, int64_t count,
                         const int32_t *table, int K, const uint64_t *lut, const uint64_t *t64, int32_t *out,
                         int l3) {
    int64_t pos = start;
    uint64_t buf = peek(p, pos);
    int avail = 64 - (int)(pos & 7);
    const uint64_t guard = 1ull << (K + 1);    /* a run of more than K zeros stops at the guard bit */
    int64_t i = 0;
    while (i < count) {
        if (avail < 24) {
            buf = peek(p, pos);
            avail = 64 - (int)(pos & 7);
        }
        uint64_t e = lut[buf & 0xFF];
        int cnt = (int)(e & 15);
        if (cnt && (int)((e >> 8) & 7) < K && cnt <= count - i) {
            uint64_t qs = e >> 16;
            for (int j = 0; j < 4; j++) memcpy(out + i + 2 * j, &t64[(qs >> (6 * j)) & 63], 8);
            int n = (int)((e >> 4) & 15);
            i += cnt;
            buf >>= n;
            avail -= n;
            pos += n;
            continue;
        }
        int r = __builtin_ctzll(buf | guard), n;
        if (r < K) {
            out[i] = table[r];
            n = r + 1;
        } else if (r == K && l3) {
            out[i] = DEC_ESC3;                 /* the raw bits are in the companion field */
            n = K + 1;
        } else if (r == K) {
            int32_t raw = (int32_t)((buf >> (K + 1)) & 0xFF);
            out[i] = raw | (raw << 9);
            n = K + 1 + ESC_BITS;
        } else {
            return -1;                         /* impossible code */
        }
        i++;
        buf >>= n;
        avail -= n;
        pos += n;
    }
    if (pos > end) return -1;                  /* overrun (bits past the plane read as zero: caught here) */
    return pos - start;
}

/* The chunk [start_byte*8, end_byte*8) used `used` bits: it must be exactly ceil(used/8) bytes with zero padding. */
static inline int chunk_ok(const uint8_t *p, int64_t start_byte, int64_t end_byte, int64_t used) {
    if (((used + 7) >> 3) != end_byte - start_byte) return 0;
    int pad = (int)((8 - (used & 7)) & 7);
    if (pad && ((peek(p, start_byte * 8 + used) & ((1ull << pad) - 1)) != 0)) return 0;
    return 1;
}

static int offsets_ok(const int64_t *off, int64_t nch, int64_t len) {
    if (!off) return 1;                        /* computed while reading (format 3.0 field planes) */
    if (off[0] != 0 || off[nch] != len) return 0;
    for (int64_t c = 0; c < nch; c++)
        if (off[c + 1] < off[c]) return 0;
    return 1;
}

static int has_pairs(const int32_t *dec, int Q) {
    for (int q = 0; q < Q; q++)
        if (DEC_PAIR(dec[q])) return 1;
    return 0;
}

static inline int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Start bit of chunk c of a plane: from its offsets, or (off = NULL) where the chunk before it ended,
 * *seq bytes in (-1 if that lies past the plane: the caller refuses the input). */
static inline int64_t chunk_start(const int64_t *off, int64_t c, int64_t seq, int64_t len) {
    if (off) return off[c] * 8;
    return seq <= len ? seq * 8 : -1;
}

/* End of chunk c that used the bits up to `pos`: checks its length and padding; *seq = the next chunk's
 * start byte for a plane read without offsets. 1 if the chunk is well formed. */
static inline int chunk_end(const uint8_t *p, const int64_t *off, int64_t c, int64_t pos, int64_t *seq,
                            int64_t len) {
    int64_t start = off ? off[c] : *seq, used = pos - start * 8;
    int64_t end = off ? off[c + 1] : start + ((used + 7) >> 3);
    if (!off && end > len) return 0;
    *seq = end;
    return chunk_ok(p, start, end, used);
}

/* ----------------------------------------------------------------------------------------- selection */

/* Keep the top k of n values by the magnitude key bits & 0x7FFF, ties to the lower index (FORMAT.md §2):
 * the threshold T = the largest key with count(key >= T) >= k, found by a binary search over the 15-bit
 * key whose counting loop the compiler vectorises; then keep every key > T and the first (lowest-index)
 * keys == T up to k. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))         /* 16 lanes where the CPU has AVX2; picked at load */
#endif
static int count_ge(const int16_t *key, int n, int t) {
    int c = 0;
    for (int i = 0; i < n; i++) c += key[i] >= t;
    return c;
}

static void keep_magnitude(const uint16_t *b, int n, int k, uint8_t *kept) {
    if (k >= n) {
        memset(kept, 1, (size_t)n);
        return;
    }
    int16_t key[256];
    for (int i = 0; i < n; i++) key[i] = (int16_t)(b[i] & 0x7FFF);
    int lo = 0, hi = 0x7FFF;                 /* count(>= lo) >= k always; find the largest such lo */
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (count_ge(key, n, mid) >= k) lo = mid;
        else hi = mid - 1;
    }
    int T = lo, ties = k;
    for (int i = 0; i < n; i++) {
        kept[i] = (uint8_t)(key[i] > T);
        ties -= key[i] > T;
    }
    for (int i = 0; i < n && ties > 0; i++)
        if (key[i] == T) {
            kept[i] = 1;
            ties--;
        }
}

static inline int64_t kept_in(int64_t k, int64_t n, int64_t G) { return (k * n + G - 1) / G; }

static inline int imax(int a, int b) { return a > b ? a : b; }

/* C2 element (FORMAT.md §4): mantissa bits the draft keeps (c) and the element field */
static inline int c2_elem(int e, int mant, int X, int m) {
    int c = m - (imax(X, 1) - imax(e, 1));
    int neg = c >> 31;                          /* all ones if c < 0: branch-free (c < 0 is data-dependent) */
    int sig = ((e > 0) << 7) | mant;
    return (sig >> (7 - (c & ~neg))) & ~neg;
}

/* ---------------------------------------------------------------------------------------- C1 encode */

/* Pass 1: keep flags (unless given) and the symbol histograms the golden codebooks are built from. */
void c1_prepare(const uint16_t *bits, int64_t N, int64_t G, int64_t k, int given, uint8_t *kept,
                int64_t *hist_spec, int64_t *hist_verif) {
    int64_t hist[512] = {0};                  /* [kept exponents | pruned exponents] */
    for (int64_t s0 = 0; s0 < N; s0 += G) {
        int64_t n = (N - s0 < G) ? N - s0 : G;
        if (!given) keep_magnitude(bits + s0, (int)n, (int)kept_in(k, n, G), kept + s0);
        for (int64_t i = s0; i < s0 + n; i++) {
            hist[((bits[i] >> 7) & 0xFF) | ((kept[i] ^ 1) << 8)]++;   /* one counter per value, no branch */
        }
    }
    for (int e = 0; e < 256; e++) {
        hist_spec[e] += hist[e];
        hist_spec[PRUNED] += hist[256 + e];
        hist_verif[e] += hist[256 + e];
    }
}

/* Pass 2: the four planes, chunks of A superblocks. off = 4 arrays of nchunks + 1 byte offsets (codes,
 * signman, vcodes, rest); out_len = the four plane lengths. */
void c1_pack(const uint16_t *bits, const uint8_t *kept, int64_t N, int64_t G, int m, int64_t A,
             const int32_t *spec_enc, int spec_Q, const int32_t *verif_enc, int verif_Q,
             uint8_t *codes, uint8_t *signman, uint8_t *vcodes, uint8_t *rest,
             int64_t *off, int64_t *out_len, int l3) {
    wr_t wc = {codes, 0, 0, 0}, ws = {signman, 0, 0, 0}, wv = {vcodes, 0, 0, 0}, wr = {rest, 0, 0, 0};
    const int lowmask = (1 << (7 - m)) - 1;
    int64_t nsb = (N + G - 1) / G, nch = (nsb + A - 1) / A, st = nch + 1;
    int sym[256], sm[256], smw[256], pe[256], rv[256], rw[256];
    int64_t s = 0;
    for (int64_t s0 = 0; s0 < N; s0 += G, s++) {
        int n = (int)((N - s0 < G) ? N - s0 : G), nk = 0, np_ = 0;
        if (s % A == 0) {
            int64_t c = s / A;
            off[c] = wc.byte; off[st + c] = ws.byte; off[2 * st + c] = wv.byte; off[3 * st + c] = wr.byte;
        }
        /* fields of the superblock first (kept / pruned ones compacted, by mask arithmetic), then one
         * plane at a time: one live bit writer per loop keeps its state in registers */
        for (int i = 0; i < n; i++) {
            int b = bits[s0 + i], sign = b >> 15, e = (b >> 7) & 0xFF, f = b & 0x7F, kp = kept[s0 + i];
            int km = -kp;
            int ce = spec_enc[e], cv = verif_enc[e];       /* prefixes: spec (kept), verif (pruned) */
            int xs = l3 & (ENC_Q(ce) >= spec_Q), xv = l3 & (ENC_Q(cv) >= verif_Q);   /* 3.0 escapes */
            sym[i] = (e & km) | (PRUNED & ~km);
            smw[nk] = 1 + m;
            sm[nk] = (int)with_prefix((uint32_t)((sign << m) | (f >> (7 - m))), ce, xs, e, &smw[nk]);
            nk += kp;
            pe[np_] = e;
            np_ += !kp;
            int wp = 8;
            int vp = (int)with_prefix((uint32_t)((sign << 7) | f), cv, xv, e, &wp);
            rv[i] = ((f & lowmask) & km) | (vp & ~km);
            rw[i] = ((7 - m) & km) | (wp & ~km);
        }
        for (int i = 0; i < n; i++) put_code(&wc, spec_enc[sym[i]], spec_Q, sym[i], l3);
        for (int i = 0; i < nk; i++) put(&ws, (uint64_t)sm[i], smw[i]);
        for (int i = 0; i < np_; i++) put_code(&wv, verif_enc[pe[i]], verif_Q, pe[i], l3);
        for (int i = 0; i < n; i++) put(&wr, (uint64_t)rv[i], rw[i]);
        if ((s + 1) % A == 0 || s + 1 == nsb) {
            flush_chunk(&wc); flush_chunk(&ws); flush_chunk(&wv); flush_chunk(&wr);
        }
    }
    off[nch] = wc.byte; off[st + nch] = ws.byte; off[2 * st + nch] = wv.byte; off[3 * st + nch] = wr.byte;
    out_len[0] = wc.byte; out_len[1] = ws.byte; out_len[2] = wv.byte; out_len[3] = wr.byte;
}

/* ---------------------------------------------------------------------------------------- C2 encode */

static void put_flags(wr_t *w, const uint8_t *flags, int64_t n) {   /* n flags, 16 per put */
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t v = 0;
        for (int j = 0; j < 16; j++) v |= (uint64_t)flags[i + j] << j;
        put(w, v, 16);
    }
    for (; i < n; i++) put(w, flags[i], 1);
}

void c2_prepare(const uint16_t *bits, int64_t N, int64_t G, int64_t k, int m, int given, uint8_t *kept,
                uint8_t *X, int64_t *hist_delta) {
    for (int64_t s0 = 0; s0 < N; s0 += G) {
        int64_t n = (N - s0 < G) ? N - s0 : G;
        if (!given) keep_magnitude(bits + s0, (int)n, (int)kept_in(k, n, G), kept + s0);
        for (int64_t b0 = s0; b0 < s0 + n; b0 += MX_BLOCK) {
            int64_t b1 = (b0 + MX_BLOCK < s0 + n) ? b0 + MX_BLOCK : s0 + n;
            int x = 0;
            for (int64_t i = b0; i < b1; i++) x = imax(x, (bits[i] >> 7) & 0xFF);
            X[b0 / MX_BLOCK] = (uint8_t)x;
            for (int64_t i = b0; i < b1; i++) {
                int e = (bits[i] >> 7) & 0xFF;
                hist_delta[x - e] += !kept[i] | (c2_elem(e, bits[i] & 0x7F, x, m) == 0);
            }
        }
    }
}

/* off = 3 arrays of nchunks + 1 byte offsets (mx, vcodes, rest) */
void c2_pack(const uint16_t *bits, const uint8_t *kept, const uint8_t *X, int64_t N, int64_t G, int m, int64_t A,
             int prunes, const int32_t *verif_enc, int verif_Q, uint8_t *mx, uint8_t *vcodes, uint8_t *rest,
             int64_t *off, int64_t *out_len, int l3) {
    wr_t wm = {mx, 0, 0, 0}, wv = {vcodes, 0, 0, 0}, wr = {rest, 0, 0, 0};
    int fv[256], ds[256], rv[256], rw[256];
    int64_t nsb = (N + G - 1) / G, nch = (nsb + A - 1) / A, st = nch + 1;
    int64_t s = 0;
    for (int64_t s0 = 0; s0 < N; s0 += G, s++) {
        int64_t n = (N - s0 < G) ? N - s0 : G;
        if (s % A == 0) {
            int64_t c = s / A;
            off[c] = wm.byte; off[st + c] = wv.byte; off[2 * st + c] = wr.byte;
        }
        if (prunes && !l3) put_flags(&wm, kept + s0, n);          /* 2.0: the superblock's keep bitmap, */
        if (!l3)                                                  /* its blocks' X, then the fields */
            for (int64_t b0 = s0; b0 < s0 + n; b0 += MX_BLOCK) put(&wm, X[b0 / MX_BLOCK], 8);
        /* fields first (kept elements and draft-zero deltas compacted, by mask arithmetic), then one
         * plane at a time with one live bit writer per loop */
        int nk = 0, nd = 0;
        for (int i = 0; i < (int)n; i++) {
            int b = bits[s0 + i], sign = b >> 15, e = (b >> 7) & 0xFF, f = b & 0x7F;
            int x = X[(s0 + i) / MX_BLOCK];
            int c = m - (imax(x, 1) - imax(e, 1));
            int elem = c2_elem(e, f, x, m);
            int kp = kept[s0 + i], dz = !kp | (elem == 0), dm = -dz;
            int cv = verif_enc[x - e], xv = l3 & (ENC_Q(cv) >= verif_Q);
            fv[nk] = (sign << (m + 1)) | elem;
            nk += kp;
            ds[nd] = x - e;
            nd += dz;
            int cc = c & ~(c >> 31);                                    /* max(c, 0) */
            int wp = 8;
            int vp = (int)with_prefix((uint32_t)((sign << 7) | f), cv, xv, x - e, &wp);
            rv[i] = (vp & dm) | ((f & ((1 << (7 - cc)) - 1)) & ~dm);
            rw[i] = (wp & dm) | ((7 - cc) & ~dm);
        }
        if (l3) {                                  /* 3.0: per MX block [X][keep bits][kept fields] */
            int j = 0;
            for (int64_t b0 = 0; b0 < n; b0 += MX_BLOCK) {
                int64_t nb = imin64(MX_BLOCK, n - b0);
                put(&wm, X[(s0 + b0) / MX_BLOCK], 8);
                if (prunes) put_flags(&wm, kept + s0 + b0, nb);
                for (int64_t i = b0; i < b0 + nb; i++)
                    if (kept[s0 + i]) put(&wm, (uint64_t)fv[j++], m + 2);
            }
        } else {
            for (int i = 0; i < nk; i++) put(&wm, (uint64_t)fv[i], m + 2);
        }
        for (int i = 0; i < nd; i++) put_code(&wv, verif_enc[ds[i]], verif_Q, ds[i], l3);
        for (int i = 0; i < (int)n; i++) put(&wr, (uint64_t)rv[i], rw[i]);
        if ((s + 1) % A == 0 || s + 1 == nsb) {
            flush_chunk(&wm); flush_chunk(&wv); flush_chunk(&wr);
        }
    }
    off[nch] = wm.byte; off[st + nch] = wv.byte; off[2 * st + nch] = wr.byte;
    out_len[0] = wm.byte; out_len[1] = wv.byte; out_len[2] = wr.byte;
}

/* ---------------------------------------------------------------------------------------- C1 decode */

/* The value loops of one superblock (C1): its n codes' entries in sym (pe: the pruned values'), the fields at
 * *spos / *rpos. E3: a format 3.0 superblock holding an escape (its raw bits lead the companion field); a 3.0
 * superblock without one has the 2.0 layout's fields and takes the E3 = 0 loops. */
static inline __attribute__((always_inline)) void c1_values(
        int64_t n, int m, int full, const int HS, const int HV, const int E3, const int32_t *sym, const int32_t *pe,
        const uint8_t *signman, int64_t *spos, const uint8_t *rest, int64_t *rpos, const uint32_t *smtab,
        uint16_t *out, int64_t s0) {
    /* value loops without a kept/pruned branch (it would mispredict at keep < 1): both candidates
     * are formed, positions advance by flag-selected widths (+ the suffix bit of a pair group).
     * Measured fastest: one loop for the draft and the rest fields without pairs; with pairs, the
     * draft (spec.signman) first, then the verification fields (two shorter loops). */
    uint8_t kf[256];
    const int merged = full && !HS && !HV && !E3;
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t d = sym[i];
        int kp = (d & 0x1FF) != PRUNED;
        uint32_t km = 0u - (uint32_t)kp;                    /* mask arithmetic: kp is data-dependent */
        int ps = HS ? DEC_PAIR(d) : 0;
        int xs = E3 ? (d & DEC_ESC3) != 0 : 0;             /* 3.0 escape: raw bits lead the field */
        int pw = ps + ESC_BITS * xs;
        int ws = (int)((uint32_t)(1 + m + pw) & km);
        uint32_t fs = (uint32_t)peek(signman, (*spos)) & WMASK[ws];
        (*spos) += ws;
        int t = HS ? (int)(fs & (uint32_t)ps) : 0;
        uint32_t e = E3 && xs ? (fs & 0xFF) : (DEC_SYM(d, t) & 0xFF);
        uint32_t vk = smtab[fs >> pw] | (e << 7);
        if (merged) {
            int32_t dv = pe[j];
            int w = (int)(((uint32_t)(7 - m) & km) | (8u & ~km));
            uint32_t r = (uint32_t)peek(rest, (*rpos)) & WMASK[w];
            (*rpos) += w;
            uint32_t vp = ((r >> 7) << 15) | ((uint32_t)dv << 7) | (r & 0x7F);
            j += !kp;
            out[s0 + i] = (uint16_t)(((vk | r) & km) | (vp & ~km));
        } else {
            out[s0 + i] = (uint16_t)(vk & km);
            kf[i] = (uint8_t)kp;
        }
    }
    if (!full || merged) return;
    j = 0;
    for (int64_t i = 0; i < n; i++) {
        int kp = kf[i];
        uint32_t km = 0u - (uint32_t)kp;
        int32_t dv = pe[j];
        int pv = HV ? (DEC_PAIR(dv) & !kp) : 0;
        int xv = E3 ? ((dv & DEC_ESC3) != 0) & !kp : 0;
        int pw = pv + ESC_BITS * xv;
        int w = (int)(((uint32_t)(7 - m) & km) | ((uint32_t)(8 + pw) & ~km));
        uint32_t r = (uint32_t)peek(rest, (*rpos)) & ((1u << w) - 1);
        (*rpos) += w;
        int tv = HV ? (int)(r & (uint32_t)pv) : 0;
        uint32_t rp = r >> pw;
        uint32_t ev = E3 && xv ? (r & 0xFF) : DEC_SYM(dv, tv);
        uint32_t vp = ((rp >> 7) << 15) | (ev << 7) | (rp & 0x7F);
        j += !kp;
        out[s0 + i] = (uint16_t)(((out[s0 + i] | r) & km) | (vp & ~km));
    }
}

/* One body, instantiated for HS / HV = the spec / verification book has a pair group (0, 0: the v1 loops)
 * and E3 = format 3.0 (escapes' raw bits in the companion fields; field planes without a pair group have
 * NULL offsets and are read sequentially). */
static inline __attribute__((always_inline)) int c1_decode_body(
        int64_t N, int64_t G, int m, int64_t k, int64_t A, int full, const int HS, const int HV, const int E3,
        const uint8_t *codes, int64_t codes_len, const int64_t *codes_off,
        const uint8_t *signman, int64_t signman_len, const int64_t *signman_off,
        const uint8_t *vcodes, int64_t vcodes_len, const int64_t *vcodes_off,
        const uint8_t *rest, int64_t rest_len, const int64_t *rest_off,
        const int32_t *spec_dec, int spec_Q, const int32_t *verif_dec, int verif_Q, uint16_t *out) {
    (void)codes_len; (void)vcodes_len;                                           /* checked by the caller */
    int64_t nsb = (N + G - 1) / G, nch = (nsb + A - 1) / A;
    int64_t sseq = 0, rseq = 0;                         /* next chunk's byte, planes read without offsets */
    int32_t sym[256 + 8], pe[257 + 8];                  /* + 8: get_codes' byte steps store 8 entries */
    code_lut_t lut;
    uint64_t spec_t64[64], verif_t64[64];
    build_code_lut(lut);
    build_pair_table(spec_dec, spec_Q, spec_t64);
    build_pair_table(verif_dec, verif_Q, verif_t64);
    uint32_t smtab[256];                /* signman field (s << m) | top m mantissa bits -> draft bits but e */
    for (uint32_t f = 0; f < (2u << m); f++) smtab[f] = ((f >> m) << 15) | ((f & ((1u << m) - 1)) << (7 - m));
    for (int64_t c = 0; c < nch; c++) {
        int64_t s_hi = imin64(nsb, (c + 1) * A);
        int64_t cpos = codes_off[c] * 8, cend = codes_off[c + 1] * 8;
        int64_t spos = chunk_start(signman_off, c, sseq, signman_len);
        int64_t vpos = vcodes_off ? vcodes_off[c] * 8 : 0, vend = vcodes_off ? vcodes_off[c + 1] * 8 : 0;
        int64_t rpos = full ? chunk_start(rest_off, c, rseq, rest_len) : 0;
        if (spos < 0 || rpos < 0) return 1;
        for (int64_t s = c * A; s < s_hi; s++) {
            int64_t s0 = s * G, n = imin64(G, N - s0), ks = kept_in(k, n, G);
            int64_t u = get_codes(codes, cpos, cend, n, spec_dec, spec_Q, lut, spec_t64, sym, E3);
            if (u < 0) return 2;
            cpos += u;
            int64_t nk = 0;
            for (int64_t i = 0; i < n; i++) nk += (sym[i] & 0x1FF) != PRUNED;
            if (nk != ks) return 3;
            int64_t np_ = n - ks;
            if (full && np_) {
                u = get_codes(vcodes, vpos, vend, np_, verif_dec, verif_Q, lut, verif_t64, pe, E3);
                if (u < 0) return 5;
                vpos += u;
            }
            pe[np_] = 0;
            int esc = 0;                 /* 3.0: the loops that handle escapes only where there is one */
            if (E3) {
                int32_t any = 0;
                for (int64_t i = 0; i < n; i++) any |= sym[i];
                for (int64_t i = 0; full && i < np_; i++) any |= pe[i];
                esc = (any & DEC_ESC3) != 0;
            }
            if (esc)
                c1_values(n, m, full, HS, HV, 1, sym, pe, signman, &spos, rest, &rpos, smtab, out, s0);
            else
                c1_values(n, m, full, HS, HV, 0, sym, pe, signman, &spos, rest, &rpos, smtab, out, s0);
        }
        if (!chunk_ok(codes, codes_off[c], codes_off[c + 1], cpos - codes_off[c] * 8)) return 2;
        if (!chunk_end(signman, signman_off, c, spos, &sseq, signman_len)) return 4;
        if (full) {
            if (vcodes_off && !chunk_ok(vcodes, vcodes_off[c], vcodes_off[c + 1], vpos - vcodes_off[c] * 8))
                return 5;
            if (!chunk_end(rest, rest_off, c, rpos, &rseq, rest_len)) return 6;
        }
    }
    if (!signman_off && sseq != signman_len) return 4;              /* bytes after the last chunk */
    if (full && !rest_off && rseq != rest_len) return 6;
    return 0;
}

/* full = 0: draft (speculation planes only); full = 1: the original bits. Returns 0, or an error code.
 * Every plane comes with its nchunks + 1 chunk offsets; vcodes_off = NULL: nothing is pruned (the plane
 * must be empty). Every plane buffer is followed by `slack` zero bytes (see MIN_SLACK). */
int c1_decode(int64_t N, int64_t G, int m, int64_t k, int64_t A, int full,
              const uint8_t *codes, int64_t codes_len, const int64_t *codes_off,
              const uint8_t *signman, int64_t signman_len, const int64_t *signman_off,
              const uint8_t *vcodes, int64_t vcodes_len, const int64_t *vcodes_off,
              const uint8_t *rest, int64_t rest_len, const int64_t *rest_off,
              const int32_t *spec_dec, int spec_Q, const int32_t *verif_dec, int verif_Q, int64_t slack,
              uint16_t *out, int l3) {
    int64_t nsb = (N + G - 1) / G, nch = (nsb + A - 1) / A;
    if (A < 1 || slack < MIN_SLACK(A, G)) return 1;
    if (!l3 && (!signman_off || (full && !rest_off))) return 1;
    if (!offsets_ok(codes_off, nch, codes_len) || !offsets_ok(signman_off, nch, signman_len)) return 1;
    if (full && (vcodes_off ? !offsets_ok(vcodes_off, nch, vcodes_len) : vcodes_len != 0)) return 1;
    if (full && !offsets_ok(rest_off, nch, rest_len)) return 1;
    if (!full) vcodes_off = NULL;
#define C1_BODY(HS, HV) (l3 ? C1_BODY3(HS, HV, 1) : C1_BODY3(HS, HV, 0))
#define C1_BODY3(HS, HV, E3) c1_decode_body(N, G, m, k, A, full, HS, HV, E3, codes, codes_len, codes_off, signman, signman_len, \
        signman_off, vcodes, vcodes_len, vcodes_off, rest, rest_len, rest_off, spec_dec, spec_Q, verif_dec, verif_Q, out)
    int hs = has_pairs(spec_dec, spec_Q), hv = full && has_pairs(verif_dec, verif_Q);
    if (hs) return hv ? C1_BODY(1, 1) : C1_BODY(1, 0);
    return hv ? C1_BODY(0, 1) : C1_BODY(0, 0);
#undef C1_BODY
#undef C1_BODY3
}

/* ---------------------------------------------------------------------------------------- C2 decode */

/* verif.rest of one C2 superblock: a draft-zero value's exact bits from its delta code (delta[], in order) and
 * rest field, any other value's low mantissa bits; returns 1 if a delta exceeds its block's X. E3: a format 3.0
 * superblock holding an escape (its raw delta leads the field); without one, 3.0's fields are 2.0's. */
static inline __attribute__((always_inline)) int c2_rest(
        int64_t n, const int HP, const int E3, const uint8_t *dzf, const uint8_t *rw, const int *Xs,
        const int32_t *delta, const uint8_t *rest, int64_t *rpos, uint16_t *out) {
    int64_t j = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int dz = dzf[i], x = Xs[i / MX_BLOCK];
        uint32_t dzm = 0u - (uint32_t)dz;                       /* mask arithmetic: dz is data-dependent */
        int32_t dd = delta[j];
        j += dz;
        int pv = HP ? (DEC_PAIR(dd) & dz) : 0;
        int xv = E3 ? ((dd & DEC_ESC3) != 0) & dz : 0;         /* 3.0 escape: raw delta first */
        int pw = pv + ESC_BITS * xv;
        int w = rw[i] + pw;                       /* + the suffix bit of a pair group / raw bits */
        uint32_t rr = (uint32_t)peek(rest, *rpos) & ((1u << w) - 1);
        *rpos += w;
        int tv = HP ? (int)(rr & (uint32_t)pv) : 0;
        int e = x - (int)(E3 && xv ? (rr & 0xFF) : DEC_SYM(dd, tv));
        rr >>= pw;
        bad |= dz & (e < 0);
        uint32_t vdz = ((rr >> 7) << 15) | ((uint32_t)(e & 0xFF) << 7) | (rr & 0x7F);
        out[i] = (uint16_t)((vdz & dzm) | ((out[i] | rr) & ~dzm));
    }
    return bad;
}

/* HP: the verification book has a pair group; E3: format 3.0 (spec.mx per MX block, escapes' raw bits in
 * verif.rest). */
static inline __attribute__((always_inline)) int c2_decode_body(
        int64_t N, int64_t G, int m, int64_t k, int64_t A, int full, const int HP, const int E3,
        const uint8_t *mx, int64_t mx_len, const int64_t *mx_off,
        const uint8_t *vcodes, int64_t vcodes_len, const int64_t *vcodes_off,
        const uint8_t *rest, int64_t rest_len, const int64_t *rest_off,
        const int32_t *verif_dec, int verif_Q, uint16_t *out) {
    (void)mx_len; (void)vcodes_len; (void)rest_len;                          /* checked by the caller */
    int64_t nsb = (N + G - 1) / G, nch = (nsb + A - 1) / A;
    int prunes = k < G;
    uint8_t kept[256];
    uint16_t t_draft[256];
    uint8_t t_w[256];
    int t_xeff = -1;                            /* the tables below hold this xeff's entries */
    int Xs[256 / MX_BLOCK];
    int64_t fst[256 / MX_BLOCK];                    /* 3.0: bit where each MX block's fields start */
    const uint32_t fmask = (1u << (m + 2)) - 1, emask = (1u << (m + 1)) - 1, mmask = (1u << m) - 1;
    uint8_t dzf[256], rw[256];                      /* per value: draft-zero, verif.rest width (no suffix) */
    int32_t delta[256 + 8];                         /* + 8: get_codes' byte steps store 8 entries */
    code_lut_t lut;
    uint64_t t64[64];
    if (full) {
        build_code_lut(lut);
        build_pair_table(verif_dec, verif_Q, t64);
    }
    for (int64_t c = 0; c < nch; c++) {
        int64_t s_hi = imin64(nsb, (c + 1) * A);
        int64_t pos = mx_off[c] * 8;
        int64_t cpos = full ? vcodes_off[c] * 8 : 0, cend = full ? vcodes_off[c + 1] * 8 : 0;
        int64_t rpos = full ? rest_off[c] * 8 : 0;
        int bad = 0;
        for (int64_t s = c * A; s < s_hi; s++) {
            int64_t s0 = s * G, n = imin64(G, N - s0), ks = kept_in(k, n, G);
            int64_t nmx = (n + MX_BLOCK - 1) / MX_BLOCK;
            int64_t pend = 0;                        /* 3.0: the bit after the superblock's last block */
            if (E3) {                                /* per block [X][keep bits][fields]: headers first */
                int64_t nk = 0;
                for (int64_t b = 0; b < nmx; b++) {
                    int64_t nb = imin64(MX_BLOCK, n - b * MX_BLOCK);
                    uint64_t w = peek(mx, pos);
                    Xs[b] = (int)(w & 0xFF);
                    uint32_t kb = prunes ? (uint32_t)(w >> 8) & WMASK[nb] : WMASK[nb];
                    for (int64_t j = 0; j < nb; j++) kept[b * MX_BLOCK + j] = (uint8_t)((kb >> j) & 1);
                    int c = __builtin_popcount(kb);
                    nk += c;
                    fst[b] = pos + 8 + (prunes ? nb : 0);
                    pos = fst[b] + (int64_t)c * (m + 2);
                }
                if (nk != ks) return 3;
                pend = pos;
                pos = fst[0];
            } else if (prunes) {                 /* keep bitmap: n bits from the superblock's first bit */
                int64_t nk = 0;
                for (int64_t i = 0; i < n; i += 32) {
                    uint64_t w = peek(mx, pos + i);
                    int64_t e = imin64(32, n - i);
                    for (int64_t j = 0; j < e; j++) {
                        kept[i + j] = (uint8_t)((w >> j) & 1);
                        nk += kept[i + j];
                    }
                }
                if (nk != ks) return 3;
                pos += n;
            } else {
                memset(kept, 1, (size_t)n);
            }
            if (!E3) {
                for (int64_t b = 0; b < nmx; b++) Xs[b] = (int)(peek(mx, pos + 8 * b) & 0xFF);
                pos += 8 * nmx;
            }
            if (full) {
                /* Full decode: the draft of each value through a per-X table (element -> draft bits, rest
                 * width), the draft-zero values' verif.codes (get_codes: a byte of short codes per step),
                 * then every value's verif.rest field (a pair group's suffix bit first). Measured faster
                 * than one pass taking each code inline (2.0 pairs: +9..16 %). */
                int64_t ndz = 0;
                for (int64_t b = 0; b < nmx; b++) {
                    int x = Xs[b], xeff = imax(x, 1);
                    if (xeff != t_xeff) {           /* element -> (draft bits without sign, rest width), per X */
                        int sh = 6 - m + xeff;
                        sh = sh < 16 ? sh : 16;
                        for (uint32_t el = 1; el <= emask; el++) {
                            int lz = (m + 1) - (32 - __builtin_clz(el));
                            int E = xeff - lz;
                            uint32_t vn = ((uint32_t)(E & 0xFF) << 7) | (((el << lz) & mmask) << (7 - m));
                            t_draft[el] = (uint16_t)(E >= 1 ? vn : (el << sh));
                            int mn = lz < xeff - 1 ? lz : xeff - 1;
                            t_w[el] = (uint8_t)(7 - (m - mn));          /* 7 - c, c = m - min(lz, xeff - 1) */
                        }
                        t_draft[0] = 0;
                        t_w[0] = 8;
                        t_xeff = xeff;
                    }
                    int64_t i1 = (b + 1) * MX_BLOCK < n ? (b + 1) * MX_BLOCK : n;
                    if (E3) pos = fst[b];
                    for (int64_t i = b * MX_BLOCK; i < i1; i++) {
                        uint32_t km = 0u - (uint32_t)kept[i];
                        uint32_t f = (uint32_t)peek(mx, pos) & fmask & km;
                        pos += (m + 2) & km;
                        uint32_t sign = f >> (m + 1), el = f & emask;
                        out[s0 + i] = (uint16_t)((sign << 15) | t_draft[el]);   /* draft (el > 0) */
                        dzf[i] = (uint8_t)(el == 0);
                        rw[i] = t_w[el];                                       /* 8 for el = 0 */
                        ndz += el == 0;
                    }
                }
                if (E3) pos = pend;
                int64_t u = get_codes(vcodes, cpos, cend, ndz, verif_dec, verif_Q, lut, t64, delta, E3);
                if (u < 0) return 5;
                cpos += u;
                delta[ndz] = 0;                      /* read (masked off) by values after the last draft-zero one */
                int32_t any = 0;                     /* 3.0: the loop that handles escapes only where there is one */
                for (int64_t i = 0; E3 && i < ndz; i++) any |= delta[i];
                if (E3 && (any & DEC_ESC3))
                    bad |= c2_rest(n, HP, 1, dzf, rw, Xs, delta, rest, &rpos, out + s0);
                else
                    bad |= c2_rest(n, HP, 0, dzf, rw, Xs, delta, rest, &rpos, out + s0);
                continue;
            }
            /* draft of every value without value-dependent branches (kept / zero / normal / subnormal are
             * all data-dependent at keep < 1): candidates are formed and selected */
            for (int64_t i = 0; i < n; i++) {
                if (E3 && (i & (MX_BLOCK - 1)) == 0) pos = fst[i / MX_BLOCK];
                int x = Xs[i / MX_BLOCK], xeff = imax(x, 1), kp = kept[i];
                uint32_t km = 0u - (uint32_t)kp;                        /* mask arithmetic, not branches */
                uint32_t f = (uint32_t)peek(mx, pos) & fmask & km;
                pos += (m + 2) & km;
                uint32_t sign = f >> (m + 1);
                uint32_t el = f & emask;
                int lz = (m + 1) - (32 - __builtin_clz(el | 1u));        /* el = 0: lz unused */
                int E = xeff - lz;
                int sh = 6 - m + xeff;
                uint32_t vn = (sign << 15) | ((uint32_t)(E & 0xFF) << 7) | (((el << lz) & mmask) << (7 - m));
                uint32_t vs = (sign << 15) | (el << (sh < 16 ? sh : 16));
                uint32_t nzm = 0u - (uint32_t)(el != 0), nm = 0u - (uint32_t)(E >= 1);
                out[s0 + i] = (uint16_t)((((vn & nm) | (vs & ~nm)) & nzm) | ((sign << 15) & ~nzm));
            }
            if (E3) pos = pend;
        }
        if (!chunk_ok(mx, mx_off[c], mx_off[c + 1], pos - mx_off[c] * 8)) return 2;
        if (full) {
            if (bad) return 7;
            if (cpos > cend || !chunk_ok(vcodes, vcodes_off[c], vcodes_off[c + 1], cpos - vcodes_off[c] * 8))
                return 5;
            if (!chunk_ok(rest, rest_off[c], rest_off[c + 1], rpos - rest_off[c] * 8)) return 6;
        }
    }
    return 0;
}

int c2_decode(int64_t N, int64_t G, int m, int64_t k, int64_t A, int full,
              const uint8_t *mx, int64_t mx_len, const int64_t *mx_off,
              const uint8_t *vcodes, int64_t vcodes_len, const int64_t *vcodes_off,
              const uint8_t *rest, int64_t rest_len, const int64_t *rest_off,
              const int32_t *verif_dec, int verif_Q, int64_t slack, uint16_t *out, int l3) {
    int64_t nsb = (N + G - 1) / G, nch = (nsb + A - 1) / A;
    if (A < 1 || slack < MIN_SLACK(A, G) || !mx_off || !offsets_ok(mx_off, nch, mx_len)) return 1;
    if (full && (!vcodes_off || !rest_off || !offsets_ok(vcodes_off, nch, vcodes_len)
                 || !offsets_ok(rest_off, nch, rest_len))) return 1;
#define C2_BODY(HP, E3) c2_decode_body(N, G, m, k, A, full, HP, E3, mx, mx_len, mx_off, vcodes, vcodes_len, \
        vcodes_off, rest, rest_len, rest_off, verif_dec, verif_Q, out)
    int hp = full && has_pairs(verif_dec, verif_Q);
    if (l3) return hp ? C2_BODY(1, 1) : C2_BODY(0, 1);
    return hp ? C2_BODY(1, 0) : C2_BODY(0, 0);
#undef C2_BODY
}
