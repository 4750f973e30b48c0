/*
 * store._native: two batch kernels that Python/Arrow cannot do without a call per message.
 *
 * 1. crc32_batch: the body CRCs of a whole batch in one call, without the GIL.
 * RocketMQ's BODYCRC is CRC-32 (IEEE, reflected polynomial 0xEDB88320, init and final xor
 * 0xFFFFFFFF: zlib's crc32) of the body, masked with 0x7FFFFFFF. Computing it with one Python
 * call per body costs ~100 ns of call overhead per message and holds the GIL throughout;
 * this function takes the batch's Arrow value buffer and offsets and fills an int32 array,
 * with the GIL released, so the encoder's background thread really runs beside the caller.
 *
 * Algorithm: carry-less-multiply folding (PCLMULQDQ) on x86-64 CPUs that have it (checked
 * at import), ~14 GB/s; a table-driven "slicing by 8" (eight 256-entry tables built at
 * import, ~2.2 GB/s) for the remaining < 16 bytes and on other CPUs. Without PCLMULQDQ
 * the Python side uses this only for bodies averaging under 1 KiB (ISA-L's per-call CRC
 * wins above that).
 *
 * 3. parse_properties: where the (name, value) pairs of RocketMQ properties strings are,
 *    with Java's string2messageProperties rules, in one pass over the bytes.
 *
 * 4. pack_records: a chunk of records (header, body, trailer per record) packed back to back
 *    into one buffer, with each body's CRC computed right before its copy (while in cache).
 *
 *    pack_plain: the same for a plain batch (one topic, bodies only), header and trailer
 *    included: the whole encoding of the usual small put in one call.
 *
 * 5. hexlify: uppercase hex of many fixed-width rows (msgIds, UNIQ_KEYs) in one call.
 *
 * 2. gather: many (start, length) slices of one buffer (a mapped segment) copied into one
 *    contiguous output, GIL released: a memcpy per slice, where Arrow's `take` over a view of
 *    the slices costs 25-50 ns per element in bookkeeping.
 *
 * 7. walk_records: a commitlog segment's record chain walked and checked (lengths, header
 *    fields) in one pass, for store.log.scan (dispatch, recovery, verify).
 *
 * 10. walk_batch: a batch send's body (MessageDecoder.encodeMessages) walked from byte 0,
 *    each message's lengths checked against each other (store/log/wire.py).
 *
 * 8. walk_chains: the timer log's bucket chains followed entry by entry, each link checked
 *    (the time wheel's reads, store/schedule/timer_wheel.py).
 *
 * 9. copy_properties: the properties of the scheduler's delivered copies (some names
 *    dropped, the rest rewritten as they were, the values of a few names found), in the
 *    same pass over the bytes as parse_properties (store/schedule/timeup.py).
 *
 * 6. ChunkWriter: a thread that pwrites chunks in submission order, never taking the GIL.
 *    The commitlog packs chunk k+1 while chunk k is written; handing each chunk to a Python
 *    thread pool costs ~17 us of GIL and future bookkeeping between two pwrites (~1 ms per
 *    64 MiB batch of 2 MiB chunks), here a mutex and a condition variable.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static uint32_t table[8][256];

static void build_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = table[0][i];
        for (int t = 1; t < 8; t++) {
            c = table[0][c & 0xFF] ^ (c >> 8);
            table[t][i] = c;
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_PATH 1
/* Carry-less multiplication folding (Intel's "Fast CRC Computation Using PCLMULQDQ"), for
 * the bit-reflected IEEE polynomial. Takes and returns the raw CRC register (no pre/post
 * inversion). len >= 64 and a multiple of 16. The constants are the reflected
 * x^(4*128+32) mod P ... x^64 mod P values and the Barrett pair (P, mu) of that paper. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(const unsigned char *buf, size_t len, uint32_t crc) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64;
    len -= 64;
    while (len >= 64) { /* fold four 128-bit lanes by 512 bits */
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    x0 = k3k4; /* fold the four lanes into one */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) { /* fold by 128 bits */
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10); /* 128 -> 64 bits */
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = poly; /* Barrett reduction to 32 bits */
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static int use_clmul = 0;

static uint32_t crc32_ieee(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
#ifdef HAVE_CLMUL_PATH
    if (use_clmul && n >= 64) {
        size_t chunk = n & ~(size_t)15;
        c = crc32_clmul(p, chunk, c);
        p += chunk;
        n -= chunk;
    }
#endif
    while (n && ((uintptr_t)p & 7)) {
        c = table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c; /* little-endian hosts only: checked at import */
        c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^
            table[4][lo >> 24] ^ table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^
            table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* crc32_batch(data, offsets, out): out[i] = crc32(data[offsets[i]:offsets[i+1]]) & 0x7FFFFFFF.
 * offsets: int32 or int64 (itemsize 4 or 8), len(out) + 1 entries, absolute into data. */
static PyObject *crc32_batch(PyObject *self, PyObject *args) {
    Py_buffer data, offs, out;
    if (!PyArg_ParseTuple(args, "y*y*w*", &data, &offs, &out)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = out.len / 4;
    Py_ssize_t width = offs.itemsize;
    if ((width != 4 && width != 8) || offs.len != (n + 1) * width) {
        PyErr_SetString(PyExc_ValueError, "offsets must be int32 or int64 with len(out) + 1 entries");
        goto done;
    }
    /* bounds first (with the GIL), so that the loop cannot read outside data */
    for (Py_ssize_t i = 0; i <= n; i++) {
        int64_t o = width == 4 ? ((const int32_t *)offs.buf)[i] : ((const int64_t *)offs.buf)[i];
        int64_t prev = i == 0 ? o : (width == 4 ? ((const int32_t *)offs.buf)[i - 1] : ((const int64_t *)offs.buf)[i - 1]);
        if (o < 0 || o > data.len || o < prev) {
            PyErr_SetString(PyExc_ValueError, "offsets out of range or decreasing");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    const unsigned char *base = (const unsigned char *)data.buf;
    int32_t *dst = (int32_t *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = width == 4 ? ((const int32_t *)offs.buf)[i] : ((const int64_t *)offs.buf)[i];
        int64_t b = width == 4 ? ((const int32_t *)offs.buf)[i + 1] : ((const int64_t *)offs.buf)[i + 1];
        dst[i] = b > a ? (int32_t)(crc32_ieee(base + a, (size_t)(b - a)) & 0x7FFFFFFFu) : 0;
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&out);
    return result;
}

#ifndef GATHER_PREFETCH
#define GATHER_PREFETCH 8
#endif

/* gather(src, starts, lengths, dst): dst[k] = src[starts[i] : starts[i] + lengths[i]] back to
 * back, i in order. starts, lengths: int64, n entries; dst: writable, sum(lengths) bytes. */
static PyObject *gather(PyObject *self, PyObject *args) {
    Py_buffer src, st, ln, dst;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &src, &st, &ln, &dst)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = st.len / 8;
    if (st.itemsize != 8 || ln.itemsize != 8 || ln.len != st.len) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths must be int64 arrays of one length");
        goto done;
    }
    const int64_t *s0 = (const int64_t *)st.buf, *l0 = (const int64_t *)ln.buf;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s0[i] < 0 || l0[i] < 0 || s0[i] > src.len || l0[i] > src.len - s0[i]) {
            PyErr_SetString(PyExc_ValueError, "a slice is outside the source buffer");
            goto done;
        }
        total += l0[i];
    }
    if (total != dst.len) {
        PyErr_SetString(PyExc_ValueError, "dst must be exactly sum(lengths) bytes");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    unsigned char *d = (unsigned char *)dst.buf;
    const unsigned char *base = (const unsigned char *)src.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + GATHER_PREFETCH < n) {
            const unsigned char *p = base + s0[i + GATHER_PREFETCH];
            int64_t len = l0[i + GATHER_PREFETCH];
            for (int64_t k = 0; k < len && k < 256; k += 64) __builtin_prefetch(p + k);
            if (len) __builtin_prefetch(p + len - 1);
        }
        memcpy(d, base + s0[i], (size_t)l0[i]);
        d += l0[i];
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&st);
    PyBuffer_Release(&ln);
    PyBuffer_Release(&dst);
    return result;
}

/* The next item of a properties string from `pos` (Java's string2messageProperties rules):
 * the item ends at the next \x02 or `end` (*item_end); it is a (name, value) pair when it
 * holds a non-empty name... value split by \x01 into exactly two tokens, trailing \x01s
 * aside: name [pos, *p1), value [*p1 + 1, *p2). Returns whether it is a pair. */
static inline int next_pair(const unsigned char *b, int64_t pos, int64_t end, int64_t *item_end, int64_t *p1, int64_t *p2) {
    int64_t e = pos;
    while (e < end && b[e] != 2) e++;
    *item_end = e;
    int64_t a = pos;
    while (a < e && b[a] != 1) a++;
    if (a >= e) return 0;
    int64_t c = a + 1;
    while (c < e && b[c] != 1) c++;
    int64_t rest = c;
    while (rest < e && b[rest] == 1) rest++;
    *p1 = a;
    *p2 = c;
    return c > a + 1 && rest == e;  /* value non-empty, nothing after */
}

/* parse_properties(data, offsets, key_start, key_len, val_start, val_len, row) -> m
 * offsets: int32, n + 1 entries (absolute into data). The five outputs are int64 arrays with
 * room for one entry per item (the caller sizes them: count of 0x02 bytes + n). Per row,
 * items are split on 0x02 and each item on every 0x01; like Java's String.split, trailing
 * empty tokens do not count, and an item is kept only if exactly (name, value) remain. */
static PyObject *parse_properties(PyObject *self, PyObject *args) {
    Py_buffer data, offs, ks, kl, vs, vl, rw;
    if (!PyArg_ParseTuple(args, "y*y*w*w*w*w*w*", &data, &offs, &ks, &kl, &vs, &vl, &rw)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = offs.len / 4 - 1;
    Py_ssize_t cap = ks.len / 8;
    const int32_t *o = (const int32_t *)offs.buf;
    if (offs.itemsize != 4 || n < 0 || kl.len / 8 != cap || vs.len / 8 != cap || vl.len / 8 != cap || rw.len / 8 != cap) {
        PyErr_SetString(PyExc_ValueError, "bad offsets or output sizes");
        goto done;
    }
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (o[i] < 0 || o[i] > data.len || (i && o[i] < o[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "offsets out of range or decreasing");
            goto done;
        }
    }
    Py_ssize_t m = 0;
    int overflow = 0;
    Py_BEGIN_ALLOW_THREADS
    const unsigned char *b = (const unsigned char *)data.buf;
    int64_t *KS = (int64_t *)ks.buf, *KL = (int64_t *)kl.buf, *VS = (int64_t *)vs.buf, *VL = (int64_t *)vl.buf, *RW = (int64_t *)rw.buf;
    for (Py_ssize_t r = 0; r < n && !overflow; r++) {
        int64_t pos = o[r], end = o[r + 1];
        while (pos < end) {
            int64_t item_end, p1, p2;
            if (next_pair(b, pos, end, &item_end, &p1, &p2)) { /* name [pos, p1), value [p1 + 1, p2) */
                if (m >= cap) { overflow = 1; break; }
                KS[m] = pos; KL[m] = p1 - pos; VS[m] = p1 + 1; VL[m] = p2 - p1 - 1; RW[m] = r;
                m++;
            }
            pos = item_end + 1;
        }
    }
    Py_END_ALLOW_THREADS
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "output arrays too small");
        goto done;
    }
    result = PyLong_FromSsize_t(m);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&ks);
    PyBuffer_Release(&kl);
    PyBuffer_Release(&vs);
    PyBuffer_Release(&vl);
    PyBuffer_Release(&rw);
    return result;
}

/* Names given as a tuple of bytes, for the loops below (copied before the GIL is released). */
typedef struct { Py_ssize_t n; const char *name[16]; Py_ssize_t len[16]; } name_set;

static int name_set_of(PyObject *tuple, name_set *out, const char *what) {
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) > 16) {
        PyErr_Format(PyExc_ValueError, "%s: a tuple of at most 16 bytes objects", what);
        return 0;
    }
    out->n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; i < out->n; i++) {
        PyObject *o = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(o)) {
            PyErr_Format(PyExc_ValueError, "%s: a tuple of at most 16 bytes objects", what);
            return 0;
        }
        out->name[i] = PyBytes_AS_STRING(o);  /* the tuple holds them while we run */
        out->len[i] = PyBytes_GET_SIZE(o);
    }
    return 1;
}

static int name_index(const name_set *set, const unsigned char *p, int64_t len, int prefix) {
    for (Py_ssize_t i = 0; i < set->n; i++) {
        if (prefix ? len >= set->len[i] : len == set->len[i])
            if (memcmp(p, set->name[i], (size_t)set->len[i]) == 0) return (int)i;
    }
    return -1;
}

/* copy_properties(data, offsets, drop, drop_prefixes, find, out, out_offsets, found_start, found_len) -> bytes out
 * Each row's properties (data[offsets[r]:offsets[r+1]], int32 offsets) parsed with the rules of
 * parse_properties; every (name, value) pair whose name is not in `drop` and starts with none
 * of `drop_prefixes` is written to out as name \x01 value \x02, in order; out_offsets (int64,
 * n + 1) gets each row's range of out (out needs data length + n bytes at most). For each
 * name k of `find`, found_start/found_len[k * n + r] get the value of its last pair in row r
 * (-1/0: none). With out and out_offsets None, only the values are found (one pass, no map
 * built: ParsedProperties.column). GIL released for the loop. */
static PyObject *copy_properties(PyObject *self, PyObject *args) {
    Py_buffer data, offs, out = {0}, oo = {0}, fs, fl;
    PyObject *drop_t, *prefix_t, *find_t, *out_o, *oo_o;
    if (!PyArg_ParseTuple(args, "y*y*OOOOOw*w*", &data, &offs, &drop_t, &prefix_t, &find_t, &out_o, &oo_o, &fs, &fl))
        return NULL;
    PyObject *result = NULL;
    name_set drop, prefixes, find;
    const int copy = out_o != Py_None;
    if (copy && (PyObject_GetBuffer(out_o, &out, PyBUF_WRITABLE) < 0 || PyObject_GetBuffer(oo_o, &oo, PyBUF_WRITABLE) < 0))
        goto done;
    Py_ssize_t n = offs.len / 4 - 1;
    const int32_t *o = (const int32_t *)offs.buf;
    if (!name_set_of(drop_t, &drop, "drop") || !name_set_of(prefix_t, &prefixes, "drop_prefixes") ||
        !name_set_of(find_t, &find, "find"))
        goto done;
    if (offs.itemsize != 4 || n < 0 || (copy && (oo.len != (n + 1) * 8 || out.len < data.len + n)) ||
        fs.len != find.n * n * 8 || fl.len != find.n * n * 8) {
        PyErr_SetString(PyExc_ValueError, "copy_properties: bad offsets or output sizes");
        goto done;
    }
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (o[i] < 0 || o[i] > data.len || (i && o[i] < o[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "copy_properties: offsets out of range or decreasing");
            goto done;
        }
    }
    int64_t at = 0;
    Py_BEGIN_ALLOW_THREADS
    const unsigned char *b = (const unsigned char *)data.buf;
    unsigned char *d = (unsigned char *)out.buf;  /* NULL (unused) without out */
    int64_t *OO = (int64_t *)oo.buf, *FS = (int64_t *)fs.buf, *FL = (int64_t *)fl.buf;
    for (Py_ssize_t k = 0; k < find.n * n; k++) { FS[k] = -1; FL[k] = 0; }
    for (Py_ssize_t r = 0; r < n; r++) {
        if (copy) OO[r] = at;
        int64_t pos = o[r], end = o[r + 1];
        while (pos < end) {
            int64_t item_end, p1, p2;
            if (next_pair(b, pos, end, &item_end, &p1, &p2)) {  /* name [pos, p1), value [p1 + 1, p2) */
                int64_t kl = p1 - pos, vl = p2 - p1 - 1;
                int f = name_index(&find, b + pos, kl, 0);
                if (f >= 0) { FS[f * n + r] = p1 + 1; FL[f * n + r] = vl; }
                if (copy && name_index(&drop, b + pos, kl, 0) < 0 && name_index(&prefixes, b + pos, kl, 1) < 0) {
                    memcpy(d + at, b + pos, (size_t)kl);
                    d[at + kl] = 1;
                    memcpy(d + at + kl + 1, b + p1 + 1, (size_t)vl);
                    d[at + kl + 1 + vl] = 2;
                    at += kl + vl + 2;
                }
            }
            pos = item_end + 1;
        }
    }
    if (copy) OO[n] = at;
    Py_END_ALLOW_THREADS
    result = PyLong_FromLongLong(at);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    if (out.obj) PyBuffer_Release(&out);
    if (oo.obj) PyBuffer_Release(&oo);
    PyBuffer_Release(&fs);
    PyBuffer_Release(&fl);
    return result;
}

/* Bounds check of an int64 offsets array (n + 1 entries, non-decreasing, within len). */
static int offsets_ok(const int64_t *o, Py_ssize_t n, Py_ssize_t len) {
    for (Py_ssize_t i = 0; i <= n; i++)
        if (o[i] < 0 || o[i] > len || (i && o[i] < o[i - 1])) return 0;
    return 1;
}

/* pack_records(header, width, crc, body, body_offsets, pieces, out) -> bytes
 * Record i = header[i*width : (i+1)*width] + body[bo[i]:bo[i+1]] + the trailer, which is
 * the concatenation of pieces: each (data, offsets), where offsets None means the same
 * bytes (all of data) on every record, else data[offsets[i]:offsets[i+1]] (int64, n + 1
 * entries, absolute into data). Records are written back to back into out, which must be
 * exactly their total size. With crc true, the body's BODYCRC (CRC-32 & 0x7FFFFFFF,
 * big-endian) is first stored at byte 8 of its header (RocketMQ's record layout:
 * TOTALSIZE, MAGICCODE, BODYCRC). GIL released for the loop. Record by record, the CRC reads
 * a body and the copy follows while it is still in the CPU cache: one pass over memory for
 * the two; the trailer pieces are copied in place, with no joined column in between. */
#define MAX_PIECES 16
static PyObject *pack_records(PyObject *self, PyObject *args) {
    Py_buffer hdr, body, bo, out;
    Py_buffer pd[MAX_PIECES], po[MAX_PIECES];
    int has_off[MAX_PIECES];
    int got = 0;
    Py_ssize_t width;
    int crc;
    PyObject *pieces, *seq = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "w*npy*y*Ow*", &hdr, &width, &crc, &body, &bo, &pieces, &out)) return NULL;
    Py_ssize_t n = width > 0 ? hdr.len / width : -1;
    const int64_t *bo0 = (const int64_t *)bo.buf;
    int64_t total = hdr.len;
    if (width < 12 || hdr.len != n * width || bo.itemsize != 8 || bo.len != (n + 1) * 8) {
        PyErr_SetString(PyExc_ValueError, "header must be n rows of width >= 12; offsets int64 with n + 1 entries");
        goto done;
    }
    if (!offsets_ok(bo0, n, body.len)) {
        PyErr_SetString(PyExc_ValueError, "offsets out of range or decreasing");
        goto done;
    }
    total += bo0[n] - bo0[0];
    seq = PySequence_Fast(pieces, "pieces must be a sequence of (data, offsets or None)");
    if (seq == NULL) goto done;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    if (m > MAX_PIECES) {
        PyErr_SetString(PyExc_ValueError, "at most 16 trailer pieces");
        goto done;
    }
    for (; got < m; got++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, got), *offs = NULL;
        if (!PyArg_ParseTuple(item, "y*O", &pd[got], &offs)) goto done;
        has_off[got] = offs != Py_None;
        if (has_off[got]) {
            if (PyObject_GetBuffer(offs, &po[got], PyBUF_SIMPLE) != 0) {
                PyBuffer_Release(&pd[got]);
                goto done;
            }
            const int64_t *o = (const int64_t *)po[got].buf;
            if (po[got].len != (n + 1) * 8 || !offsets_ok(o, n, pd[got].len)) {
                got++;
                PyErr_SetString(PyExc_ValueError, "piece offsets must be int64, n + 1 entries, in range and increasing");
                goto done;
            }
            total += o[n] - o[0];
        } else {
            total += pd[got].len * n;
        }
    }
    if (total != out.len) {
        PyErr_SetString(PyExc_ValueError, "out must be exactly the records' total size");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    unsigned char *d = (unsigned char *)out.buf, *h = (unsigned char *)hdr.buf;
    const unsigned char *b = (const unsigned char *)body.buf;
    for (Py_ssize_t i = 0; i < n; i++, h += width) {
        size_t bl = (size_t)(bo0[i + 1] - bo0[i]);
        if (crc) {
            uint32_t c = bl ? crc32_ieee(b + bo0[i], bl) & 0x7FFFFFFFu : 0;
            h[8] = (unsigned char)(c >> 24); h[9] = (unsigned char)(c >> 16);
            h[10] = (unsigned char)(c >> 8); h[11] = (unsigned char)c;
        }
        memcpy(d, h, (size_t)width);
        d += width;
        memcpy(d, b + bo0[i], bl);
        d += bl;
        for (Py_ssize_t k = 0; k < m; k++) {
            const unsigned char *src = (const unsigned char *)pd[k].buf;
            size_t len;
            if (has_off[k]) {
                const int64_t *o = (const int64_t *)po[k].buf;
                src += o[i];
                len = (size_t)(o[i + 1] - o[i]);
            } else {
                len = (size_t)pd[k].len;
            }
            memcpy(d, src, len);
            d += len;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(out.len);
done:
    for (int k = 0; k < got; k++) {
        PyBuffer_Release(&pd[k]);
        if (has_off[k]) PyBuffer_Release(&po[k]);
    }
    Py_XDECREF(seq);
    PyBuffer_Release(&hdr);
    PyBuffer_Release(&body);
    PyBuffer_Release(&bo);
    PyBuffer_Release(&out);
    return result;
}

/* patch_records(out, starts, fields, values): for each record i (starting at byte starts[i]
 * of out) and each field k, the big-endian int64 values[k][i] at out[starts[i] + fields[k]].
 * starts: int64, n entries; fields: a tuple of byte offsets within a record; values: one
 * int64 array of n entries per field. What a record gets under the append lock (QUEUEOFFSET,
 * PHYSICALOFFSET, STORETIMESTAMP) written into records packed before it, in one call. */
#define MAX_FIELDS 4
static PyObject *patch_records(PyObject *self, PyObject *args) {
    Py_buffer out, st, vals[MAX_FIELDS];
    Py_ssize_t at[MAX_FIELDS];
    PyObject *fields, *values, *result = NULL;
    int got = 0;
    if (!PyArg_ParseTuple(args, "w*y*O!O!", &out, &st, &PyTuple_Type, &fields, &PyTuple_Type, &values)) return NULL;
    Py_ssize_t n = st.len / 8, m = PyTuple_GET_SIZE(fields);
    if (st.itemsize != 8 || m > MAX_FIELDS || PyTuple_GET_SIZE(values) != m) {
        PyErr_SetString(PyExc_ValueError, "starts must be int64; at most 4 fields, one value array each");
        goto done;
    }
    for (; got < m; got++) {
        at[got] = PyLong_AsSsize_t(PyTuple_GET_ITEM(fields, got));
        if (at[got] == -1 && PyErr_Occurred()) goto done;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(values, got), &vals[got], PyBUF_SIMPLE) != 0) goto done;
        if (vals[got].len != n * 8 || at[got] < 0) {
            got++;
            PyErr_SetString(PyExc_ValueError, "each value array must be int64 with one entry per record; offsets >= 0");
            goto done;
        }
    }
    const int64_t *s = (const int64_t *)st.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        for (Py_ssize_t k = 0; k < m; k++)
            if (s[i] < 0 || s[i] + at[k] + 8 > out.len) {
                PyErr_SetString(PyExc_ValueError, "a field lies outside out");
                goto done;
            }
    unsigned char *d = (unsigned char *)out.buf;
    for (Py_ssize_t k = 0; k < m; k++) {
        const int64_t *v = (const int64_t *)vals[k].buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t x = __builtin_bswap64((uint64_t)v[i]);
            memcpy(d + s[i] + at[k], &x, 8);
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&vals[k]);
    PyBuffer_Release(&out);
    PyBuffer_Release(&st);
    return result;
}

static void put_be32(unsigned char *d, uint32_t x) {
    d[0] = (unsigned char)(x >> 24); d[1] = (unsigned char)(x >> 16);
    d[2] = (unsigned char)(x >> 8); d[3] = (unsigned char)x;
}

/* pack_plain(template, born_ms, body, body_offsets, first, n, trailer_head, seq, q_first,
 *            q_count, max_body, lengths, starts, queue_ids) -> bytearray or None
 * The whole encoding of a plain batch (one topic, bodies only, no queue ids, tags, keys or
 * properties) in one call: the records of n messages back to back, but for QUEUEOFFSET,
 * PHYSICALOFFSET and STORETIMESTAMP (patch_records, under the append lock).
 *   template: one header row (record.header_dtype, width bytes: MAGICCODE, SYSFLAG and the
 *     hosts set, the rest zero). Per record this sets TOTALSIZE (byte 0), BODYCRC (8),
 *     QUEUEID (12), BORNTIMESTAMP (40, born_ms) and BODYLENGTH (the last 4 bytes): the layout
 *     of RocketMQ's CommitLog record up to the body.
 *   body, body_offsets: an Arrow binary array's data and int32 offsets buffers; rows
 *     first .. first + n - 1 of it.
 *   trailer_head: TOPICLEN, TOPIC, PROPERTIESLENGTH and "UNIQ_KEY\x01" + the 20 hex of the
 *     id's fixed 10 bytes; each record's trailer is trailer_head, the 12 uppercase hex of
 *     the 48-bit sequence (seq + i) & 0xFFFFFFFFFFFF, then \x02.
 *   queue ids: (q_first + i) % q_count.
 *   lengths, starts (int64) and queue_ids (int32), n entries each, are filled: each record's
 *     size, its offset in the output, its queue id.
 * Returns None, writing nothing, when a body is longer than max_body (the caller's general
 * path names the row). Body offsets out of range or decreasing raise ValueError. */
static PyObject *pack_plain(PyObject *self, PyObject *args) {
    Py_buffer tpl, body, bo, th, len_out, st_out, q_out;
    long long born, seq;
    Py_ssize_t first, n, q_first, q_count, max_body;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*Ly*y*nny*Lnnnw*w*w*", &tpl, &born, &body, &bo, &first, &n, &th, &seq,
                          &q_first, &q_count, &max_body, &len_out, &st_out, &q_out))
        return NULL;
    const Py_ssize_t width = tpl.len, tail = th.len + 13;
    const int32_t *o = (const int32_t *)bo.buf + first;
    if (width < 48 || n < 0 || first < 0 || (first + n + 1) * 4 > bo.len || q_count <= 0 || q_first < 0 ||
        len_out.len != n * 8 || st_out.len != n * 8 || q_out.len != n * 4) {
        PyErr_SetString(PyExc_ValueError, "pack_plain: bad template, offsets, queue count or output sizes");
        goto done;
    }
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > body.len) {
            PyErr_SetString(PyExc_ValueError, "pack_plain: body offsets out of range or decreasing");
            goto done;
        }
        if (o[i + 1] - o[i] > max_body) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        total += width + (o[i + 1] - o[i]) + tail;
    }
    result = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (result == NULL) goto done;
    Py_BEGIN_ALLOW_THREADS
    static const char digits[] = "0123456789ABCDEF";
    unsigned char *d = (unsigned char *)PyByteArray_AS_STRING(result);
    const unsigned char *b = (const unsigned char *)body.buf;
    int64_t *lens = (int64_t *)len_out.buf, *starts = (int64_t *)st_out.buf;
    int32_t *qids = (int32_t *)q_out.buf;
    const uint64_t born_be = __builtin_bswap64((uint64_t)born);
    int64_t at = 0;
    Py_ssize_t q = q_first % q_count;
    for (Py_ssize_t i = 0; i < n; i++) {
        const size_t bl = (size_t)(o[i + 1] - o[i]);
        const int64_t size = width + (int64_t)bl + tail;
        lens[i] = size;
        starts[i] = at;
        qids[i] = (int32_t)q;
        unsigned char *h = d;
        memcpy(h, tpl.buf, (size_t)width);
        put_be32(h, (uint32_t)size);
        put_be32(h + 8, bl ? crc32_ieee(b + o[i], bl) & 0x7FFFFFFFu : 0);
        put_be32(h + 12, (uint32_t)q);
        memcpy(h + 40, &born_be, 8);
        put_be32(h + width - 4, (uint32_t)bl);
        d += width;
        memcpy(d, b + o[i], bl);
        d += bl;
        memcpy(d, th.buf, (size_t)th.len);
        d += th.len;
        const uint64_t s = ((uint64_t)seq + (uint64_t)i) & 0xFFFFFFFFFFFFull;
        for (int k = 0; k < 6; k++) {
            const unsigned x = (unsigned)(s >> (40 - 8 * k)) & 0xFF;
            d[2 * k] = (unsigned char)digits[x >> 4];
            d[2 * k + 1] = (unsigned char)digits[x & 15];
        }
        d[12] = 2;
        d += 13;
        at += size;
        if (++q == q_count) q = 0;
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&tpl);
    PyBuffer_Release(&body);
    PyBuffer_Release(&bo);
    PyBuffer_Release(&th);
    PyBuffer_Release(&len_out);
    PyBuffer_Release(&st_out);
    PyBuffer_Release(&q_out);
    return result;
}

/* all_same(offsets, first, n, data) -> bool
 * Whether rows first .. first + n - 1 of an Arrow binary/string array (int32 offsets buffer,
 * data buffer) all hold the same bytes; ValueError when offsets are out of range. The one-topic
 * check of every put: a memcmp per row, where numpy's compare of the shifted bytes costs
 * ~10 us of calls. */
static PyObject *all_same(PyObject *self, PyObject *args) {
    Py_buffer bo, data;
    Py_ssize_t first, n;
    if (!PyArg_ParseTuple(args, "y*nny*", &bo, &first, &n, &data)) return NULL;
    PyObject *result = NULL;
    const int32_t *o = (const int32_t *)bo.buf + first;
    const unsigned char *d = (const unsigned char *)data.buf;
    if (first < 0 || n < 0 || (first + n + 1) * 4 > bo.len) {
        PyErr_SetString(PyExc_ValueError, "all_same: rows past the offsets");
        goto done;
    }
    int same = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > data.len) {
            PyErr_SetString(PyExc_ValueError, "all_same: offsets out of range or decreasing");
            goto done;
        }
        if (same && i && (o[i + 1] - o[i] != o[1] - o[0] || memcmp(d + o[i], d + o[0], (size_t)(o[1] - o[0])) != 0))
            same = 0;
    }
    result = PyBool_FromLong(same);
done:
    PyBuffer_Release(&bo);
    PyBuffer_Release(&data);
    return result;
}

/* longest_value(offsets, first, n, data_len) -> int
 * The longest of rows first .. first + n - 1 of an Arrow binary array (int32 offsets buffer,
 * data of data_len bytes); ValueError when offsets are out of range or decreasing. The plain
 * path's size check, before anything (a round-robin position, ids) is taken for the batch. */
static PyObject *longest_value(PyObject *self, PyObject *args) {
    Py_buffer bo;
    Py_ssize_t first, n, data_len;
    if (!PyArg_ParseTuple(args, "y*nnn", &bo, &first, &n, &data_len)) return NULL;
    PyObject *result = NULL;
    const int32_t *o = (const int32_t *)bo.buf + first;
    int32_t longest = 0;
    if (first < 0 || n < 0 || (first + n + 1) * 4 > bo.len) {
        PyErr_SetString(PyExc_ValueError, "longest_value: rows past the offsets");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > data_len) {
            PyErr_SetString(PyExc_ValueError, "longest_value: offsets out of range or decreasing");
            goto done;
        }
        if (o[i + 1] - o[i] > longest) longest = o[i + 1] - o[i];
    }
    result = PyLong_FromLong(longest);
done:
    PyBuffer_Release(&bo);
    return result;
}

/* offset_msg_ids(head, offsets) -> bytearray
 * RocketMQ's offset msgId of each record: head (the store host's hex, the same on every row)
 * then the 16 uppercase hex of the big-endian int64 commitlog offset; offsets: int64, n
 * entries. The rows back to back (len(head) + 16 bytes each), for an Arrow string array. */
static PyObject *offset_msg_ids(PyObject *self, PyObject *args) {
    Py_buffer head, offs;
    if (!PyArg_ParseTuple(args, "y*y*", &head, &offs)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = offs.len / 8, width = head.len + 16;
    if (offs.len % 8) {
        PyErr_SetString(PyExc_ValueError, "offset_msg_ids: offsets must be int64");
        goto done;
    }
    result = PyByteArray_FromStringAndSize(NULL, n * width);
    if (result == NULL) goto done;
    static const char digits[] = "0123456789ABCDEF";
    unsigned char *d = (unsigned char *)PyByteArray_AS_STRING(result);
    const int64_t *o = (const int64_t *)offs.buf;
    for (Py_ssize_t i = 0; i < n; i++, d += width) {
        memcpy(d, head.buf, (size_t)head.len);
        const uint64_t x = (uint64_t)o[i];
        for (int k = 0; k < 16; k++) d[head.len + k] = (unsigned char)digits[(x >> (60 - 4 * k)) & 15];
    }
done:
    PyBuffer_Release(&head);
    PyBuffer_Release(&offs);
    return result;
}

/* hexlify(src, width, dst, dst_stride, dst_offset): row i of src (width bytes) as 2 * width
 * uppercase hex characters at dst[i * dst_stride + dst_offset]. n = len(src) / width rows;
 * dst must hold them all. GIL released. The msgIds and UNIQ_KEYs of a batch in one call. */
static PyObject *hexlify(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    Py_ssize_t width, stride, offset;
    if (!PyArg_ParseTuple(args, "y*nw*nn", &src, &width, &dst, &stride, &offset)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = width > 0 ? src.len / width : -1;
    if (width <= 0 || src.len != n * width || offset < 0 || stride < offset + 2 * width ||
        (n > 0 && (n - 1) * stride + offset + 2 * width > dst.len)) {
        PyErr_SetString(PyExc_ValueError, "src must be rows of width bytes and dst must hold their hex");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    static const char digits[] = "0123456789ABCDEF";
    const unsigned char *s = (const unsigned char *)src.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char *d = (unsigned char *)dst.buf + i * stride + offset;
        for (Py_ssize_t j = 0; j < width; j++, s++) {
            d[2 * j] = (unsigned char)digits[*s >> 4];
            d[2 * j + 1] = (unsigned char)digits[*s & 15];
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

/* ------------------------------------------------------------------ 6. ChunkWriter */

#define WRITER_RING 64

typedef struct {
    int fd;
    int64_t offset;
    const char *data;
    Py_ssize_t len;
} WriteItem;

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running;  /* the thread was started and not yet joined */
    int closing;
    int capacity; /* most items pending at once (submit waits below it) */
    uint64_t submitted, done;
    int error;    /* errno of the first failed write; later items are skipped */
    int64_t error_offset;
    WriteItem ring[WRITER_RING];
} ChunkWriter;

static int write_all(const WriteItem *it) {
    const char *p = it->data;
    Py_ssize_t left = it->len;
    int64_t off = it->offset;
    while (left > 0) {
        ssize_t n = pwrite(it->fd, p, (size_t)left, (off_t)off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EIO;
        p += n;
        left -= n;
        off += n;
    }
    return 0;
}

static void *writer_main(void *arg) {
    ChunkWriter *w = (ChunkWriter *)arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->done == w->submitted && !w->closing) pthread_cond_wait(&w->cv, &w->mu);
        if (w->done == w->submitted) break; /* closing, nothing left */
        WriteItem it = w->ring[w->done % WRITER_RING];
        int skip = w->error != 0;
        pthread_mutex_unlock(&w->mu);
        int err = skip ? 0 : write_all(&it);
        pthread_mutex_lock(&w->mu);
        if (err && !w->error) {
            w->error = err;
            w->error_offset = it.offset;
        }
        w->done++;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static PyObject *writer_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    int capacity;
    static char *names[] = {"capacity", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i", names, &capacity)) return NULL;
    if (capacity < 1 || capacity > WRITER_RING) {
        PyErr_Format(PyExc_ValueError, "capacity must be 1..%d", WRITER_RING);
        return NULL;
    }
    ChunkWriter *w = (ChunkWriter *)type->tp_alloc(type, 0);
    if (w == NULL) return NULL;
    w->capacity = capacity;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        Py_TYPE(w)->tp_free((PyObject *)w);
        return NULL;
    }
    w->running = 1;
    return (PyObject *)w;
}

/* Stop the thread once everything submitted is written (GIL released while waiting). */
static void writer_join(ChunkWriter *w) {
    if (!w->running) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&w->mu);
    w->closing = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    Py_END_ALLOW_THREADS
    w->running = 0;
}

static PyObject *writer_submit(ChunkWriter *w, PyObject *args) {
    int fd;
    long long offset, address;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "iLLn", &fd, &offset, &address, &len)) return NULL;
    if (!w->running || w->closing) {
        PyErr_SetString(PyExc_ValueError, "the writer is finished");
        return NULL;
    }
    if (offset < 0 || len < 0 || (address == 0 && len > 0)) {
        PyErr_SetString(PyExc_ValueError, "negative offset or length, or no buffer");
        return NULL;
    }
    WriteItem it = {fd, (int64_t)offset, (const char *)(intptr_t)address, len};
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&w->mu);
    while (w->submitted - w->done >= (uint64_t)w->capacity) pthread_cond_wait(&w->cv, &w->mu);
    w->ring[w->submitted % WRITER_RING] = it;
    w->submitted++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *writer_finish(ChunkWriter *w, PyObject *unused) {
    writer_join(w);
    if (w->error) {
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "is", w->error, strerror(w->error));
        if (exc != NULL) {
            PyObject *off = PyLong_FromLongLong(w->error_offset);
            if (off != NULL) PyObject_SetAttrString(exc, "offset", off);
            Py_XDECREF(off);
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        w->error = 0;
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *writer_done(ChunkWriter *w, void *closure) {
    pthread_mutex_lock(&w->mu);
    uint64_t d = w->done;
    pthread_mutex_unlock(&w->mu);
    return PyLong_FromUnsignedLongLong(d);
}

static void writer_dealloc(ChunkWriter *w) {
    writer_join(w); /* never free the ring under a running thread */
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef writer_methods[] = {
    {"submit", (PyCFunction)writer_submit, METH_VARARGS,
     "submit(fd, offset, address, length): queue a pwrite of length bytes at address (waits while capacity are pending, GIL released). The caller keeps the memory alive until finish()."},
    {"finish", (PyCFunction)writer_finish, METH_NOARGS,
     "finish(): wait until every submitted write is done and stop the thread; raises OSError (with .offset) for the first failed write."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef writer_getset[] = {
    {"done", (getter)writer_done, NULL, "how many submitted writes have finished", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ChunkWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "store._native.ChunkWriter",
    .tp_basicsize = sizeof(ChunkWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ChunkWriter(capacity): a thread writing submitted chunks in order, without the GIL.",
    .tp_new = writer_new,
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_methods = writer_methods,
    .tp_getset = writer_getset,
};

/* walk_records(seg, start, limit, base, header_size, trailer_fields, min_ts, max_ts, pos_out, size_out)
 *   -> (n, end, code, index_value)
 *
 * The record chain of one commitlog segment from `start`, checked as it is walked: the work of
 * store.log.scan's candidates + chain + _first_bad (lengths and header fields; not CRCs) in one
 * pass, where the numpy form gathers eleven big-endian fields through index matrices. Each
 * step reads TOTALSIZE and MAGICCODE at p; a record magic (v1 or v2) continues the chain.
 * Semantics mirror store.log.scan exactly (tests compare the two on damaged segments):
 * - a TOTALSIZE that does not move forward or runs past the segment: code 1 (the record at
 *   `end`; its TOTALSIZE in `index_value`);
 * - a record running past `limit` (not published yet): the walk stops before it, code 0;
 * - a TOTALSIZE below the smallest record: code 1 too;
 * - lengths that do not add up to TOTALSIZE: code 2;
 * - header values no store writes: 3 PHYSICALOFFSET != position (only with base >= 0),
 *   4 QUEUEID < 0, 5 QUEUEOFFSET < 0, 6 STORETIMESTAMP out of [0, max_ts],
 *   7 BORNTIMESTAMP out of [min_ts, max_ts]; the value in `index_value`;
 * - anything else that is not a record magic at p (an end blank, zeros, garbage): code 0.
 * The n good records' positions and sizes go to pos_out/size_out (int64, room for
 * (limit - start) / 8 + 1 entries). The GIL is released. */
static inline int64_t be_i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}
static inline int64_t be_i64(const unsigned char *p) {
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) v = (v << 8) | p[k];
    return (int64_t)v;
}

static PyObject *walk_records(PyObject *self, PyObject *args) {
    Py_buffer seg, po, so;
    long long start, limit, base, min_ts, max_ts;
    int header_size, trailer_fields;
    if (!PyArg_ParseTuple(args, "y*LLLiiLLw*w*", &seg, &start, &limit, &base, &header_size, &trailer_fields,
                          &min_ts, &max_ts, &po, &so)) return NULL;
    PyObject *result = NULL;
    const int64_t seg_len = seg.len;
    if (limit > seg_len) limit = seg_len;
    Py_ssize_t room = po.len / 8;
    if (start < 0 || po.itemsize != 8 || so.itemsize != 8 || so.len != po.len ||
        (limit > start && room < (limit - start) / 8 + 1)) {
        PyErr_SetString(PyExc_ValueError, "walk_records: bad start or output arrays");
        goto done;
    }
    const unsigned char *b = (const unsigned char *)seg.buf;
    int64_t *pos_out = (int64_t *)po.buf, *size_out = (int64_t *)so.buf;
    int64_t n = 0, p = start, value = 0;
    int code = 0;
    Py_BEGIN_ALLOW_THREADS
    while (p + 8 <= limit) {
        uint32_t magic = (uint32_t)be_i32(b + p + 4);
        if (magic != 0xDAA320A7u && magic != 0xDAA320ABu) break;
        int64_t size = be_i32(b + p);
        if (p + size <= p || p + size > seg_len) { code = 1; value = size; break; }
        if (p + size > limit) break;  /* not published yet */
        const unsigned char *r = b + p;
        if (size < header_size + trailer_fields) { code = 1; value = size; break; }
        int64_t sys_flag = be_i32(r + 36);
        int born_v6 = (sys_flag & 0x10) != 0;
        int64_t hsize = header_size + (born_v6 ? 12 : 0) + ((sys_flag & 0x20) ? 12 : 0);
        if (size < hsize + trailer_fields) { code = 2; break; }
        int64_t body_len = be_i32(r + hsize - 4);
        if (body_len < 0 || hsize + body_len + trailer_fields > size) { code = 2; break; }
        int64_t tl_at = hsize + body_len;
        int v2 = magic == 0xDAA320ABu;
        int64_t topic_len = v2 ? (int64_t)(((uint32_t)r[tl_at] << 8) | r[tl_at + 1]) : (int64_t)r[tl_at];
        int64_t pl_at = tl_at + (v2 ? 2 : 1) + topic_len;
        if (pl_at + 2 > size) { code = 2; break; }
        int64_t props_len = ((uint32_t)r[pl_at] << 8) | r[pl_at + 1];
        if (pl_at + 2 + props_len != size) { code = 2; break; }
        int64_t queue_id = be_i32(r + 12), queue_offset = be_i64(r + 20), physical = be_i64(r + 28);
        int64_t born_ts = be_i64(r + 40), store_ts = be_i64(r + (born_v6 ? 68 : 56));
        if (base >= 0 && physical != base + p) { code = 3; value = physical; break; }
        if (queue_id < 0) { code = 4; value = queue_id; break; }
        if (queue_offset < 0) { code = 5; value = queue_offset; break; }
        if (store_ts < 0 || store_ts > max_ts) { code = 6; value = store_ts; break; }
        if (born_ts < min_ts || born_ts > max_ts) { code = 7; value = born_ts; break; }
        pos_out[n] = p;
        size_out[n] = size;
        n++;
        p += size;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(LLiL)", (long long)n, (long long)p, code, (long long)value);
done:
    PyBuffer_Release(&seg);
    PyBuffer_Release(&po);
    PyBuffer_Release(&so);
    return result;
}

/* Whether the record at p in b (len bytes: a commitlog segment's) is the one its consume-queue
 * unit names: check_stored's checks (below) for one record, every read inside it. */
static inline int stored_record_ok(const unsigned char *b, int64_t len, int64_t p, int64_t size, int64_t offset,
                                   int64_t qoff, const unsigned char *t, int64_t tlen, int queue_id, int64_t min_ts,
                                   int64_t max_ts, int crc) {
    /* 88: the IPv4 header through BODYLENGTH; then TOPICLENGTH (1), the topic, PROPERTIESLENGTH (2) */
    if (p < 0 || p > len || size < 88 + 3 + tlen || size > len - p) return 0;
    const unsigned char *r = b + p;
    if (be_i32(r) != size || (uint32_t)be_i32(r + 4) != 0xDAA320A7u) return 0;
    if (be_i32(r + 36) & 0x30) return 0;  /* an IPv6 host: the general read */
    if (be_i32(r + 12) != queue_id || be_i64(r + 20) != qoff || be_i64(r + 28) != offset) return 0;
    if (queue_id < 0 || qoff < 0) return 0;
    const int64_t born_ts = be_i64(r + 40), store_ts = be_i64(r + 56);
    if (store_ts < 0 || store_ts > max_ts || born_ts < min_ts || born_ts > max_ts) return 0;
    const int64_t body_len = be_i32(r + 84);
    if (body_len < 0 || body_len > size - 88 - 3 - tlen) return 0;
    const unsigned char *tl = r + 88 + body_len;
    if (tl[0] != tlen || memcmp(tl + 1, t, (size_t)tlen) != 0) return 0;
    const unsigned char *pl = tl + 1 + tlen;
    if ((int64_t)(((uint32_t)pl[0] << 8) | pl[1]) != size - (pl + 2 - r)) return 0;
    if (crc && (int64_t)(int32_t)(crc32_ieee(r + 88, (size_t)body_len) & 0x7FFFFFFFu) != be_i32(r + 8)) return 0;
    return 1;
}

/* check_copy(data, base, offsets, sizes, first, count, queue_offset, topic, queue_id, min_ts, max_ts, crc, dst, at)
 *   -> whether all pass
 * Records first..first+count-1 of offsets/sizes (int64: commitlog offsets and each unit's size), which
 * lie in data (a commitlog segment's bytes starting at commitlog offset `base`), checked as
 * check_stored checks them (record k's queue offset: queue_offset + k) and, only when every one
 * passes, copied back to back into dst from byte `at`: a small window's records of one segment
 * (store/access/small_window.py). GIL released. */
static PyObject *check_copy(PyObject *self, PyObject *args) {
    Py_buffer data, off, sz, topic, dst;
    long long base, first, count, qoff0, min_ts, max_ts, at;
    int queue_id, crc;
    if (!PyArg_ParseTuple(args, "y*Ly*y*LLLy*iLLpw*L", &data, &base, &off, &sz, &first, &count, &qoff0, &topic,
                          &queue_id, &min_ts, &max_ts, &crc, &dst, &at)) return NULL;
    PyObject *result = NULL;
    if (off.itemsize != 8 || sz.itemsize != 8 || off.len != sz.len || first < 0 || count < 0 ||
        first + count > off.len / 8 || at < 0 || at > dst.len) {
        PyErr_SetString(PyExc_ValueError, "check_copy: offsets and sizes must be int64 arrays of one length holding the records");
        goto done;
    }
    const int64_t *offs = (const int64_t *)off.buf + first, *sizes = (const int64_t *)sz.buf + first;
    const unsigned char *b = (const unsigned char *)data.buf, *t = (const unsigned char *)topic.buf;
    unsigned char *d = (unsigned char *)dst.buf;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    int64_t total = 0;
    for (int64_t i = 0; i < count && ok; i++) {
        ok = stored_record_ok(b, data.len, offs[i] - base, sizes[i], offs[i], qoff0 + i, t, topic.len, queue_id,
                              min_ts, max_ts, crc);
        total += sizes[i];
    }
    if (ok && total > dst.len - at) ok = 0;
    if (ok)
        for (int64_t i = 0; i < count; i++) {
            memcpy(d + at, b + (offs[i] - base), (size_t)sizes[i]);
            at += sizes[i];
        }
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(ok);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&off);
    PyBuffer_Release(&sz);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&dst);
    return result;
}

/* check_stored(data, starts, sizes, offsets, queue_offsets, topic, queue_id, min_ts, max_ts, crc) -> n_ok
 * The records at `starts` in `data` (a commitlog segment's bytes; record i: sizes[i] bytes
 * at starts[i], from commitlog offset offsets[i]; int64 arrays) checked as the records their
 * consume-queue units name (store/log/raw_check.py, the numpy twin, has the table): a V1
 * record with IPv4 hosts, TOTALSIZE = sizes[i], QUEUEID = queue_id, QUEUEOFFSET =
 * queue_offsets[i], PHYSICALOFFSET = offsets[i], queue id/offset >= 0, STORETIMESTAMP in
 * [0, max_ts], BORNTIMESTAMP in [min_ts, max_ts], BODYLENGTH fitting, TOPICLENGTH and the
 * topic = `topic`, PROPERTIESLENGTH = the rest of the record and, with crc, BODYCRC = the
 * body's CRC. Returns the count of records before the first that fails (n when all pass).
 * Every read stays inside its own record, and each record inside data. GIL released. */
static PyObject *check_stored(PyObject *self, PyObject *args) {
    Py_buffer data, st, sz, off, qo, topic;
    int queue_id, crc;
    long long min_ts, max_ts;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*iLLp", &data, &st, &sz, &off, &qo, &topic, &queue_id, &min_ts, &max_ts, &crc))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = sz.len / 8;
    if (st.itemsize != 8 || sz.itemsize != 8 || off.itemsize != 8 || qo.itemsize != 8 || st.len != sz.len ||
        off.len != sz.len || qo.len != sz.len) {
        PyErr_SetString(PyExc_ValueError, "check_stored: starts, sizes, offsets and queue offsets must be int64 arrays of one length");
        goto done;
    }
    const int64_t *starts = (const int64_t *)st.buf, *sizes = (const int64_t *)sz.buf;
    const int64_t *offsets = (const int64_t *)off.buf, *qoffs = (const int64_t *)qo.buf;
    const unsigned char *b = (const unsigned char *)data.buf, *t = (const unsigned char *)topic.buf;
    const int64_t tlen = topic.len, len = data.len;
    Py_ssize_t i = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; i < n; i++)
        if (!stored_record_ok(b, len, starts[i], sizes[i], offsets[i], qoffs[i], t, tlen, queue_id, min_ts, max_ts, crc)) break;
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(i);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&st);
    PyBuffer_Release(&sz);
    PyBuffer_Release(&off);
    PyBuffer_Release(&qo);
    PyBuffer_Release(&topic);
    return result;
}

/* window_units(units, floor, tail, seg_size, max_count, max_bytes, disk_memory, disk_count, disk_bytes,
 *              min_size, offs_out, sizes_out) -> n
 * A small window's consume-queue units (20 bytes each, big-endian: commitLogOffset i64, size i32,
 * tagsCode i64) walked as store/access/small_window.py describes: before each unit RocketMQ's
 * isTheBatchFull (once one is taken, full at max_count taken or when the unit's size carries the
 * bytes taken past max_bytes; a unit whose record lies more than disk_memory bytes behind `tail`,
 * tail - offset as int64, is judged by disk_count/disk_bytes instead, when disk_memory >= 0;
 * max_bytes < 0: no byte limit), then for the unit taken the bounds of
 * store/queue/checked_read.py's read_unit_stored (floor <= offset < tail, min_size <= size <=
 * tail - offset, the record inside one seg_size segment). Returns how many are taken (their
 * offsets and sizes written to offs_out/sizes_out, int64, room for every unit), -1 when a unit
 * before the batch is full is a filler (size 0x7FFFFFFF), -2 when a unit taken fails a bound:
 * the general read answers those. Tests pin it to the general read (tests/test_small_window.py). */
static PyObject *window_units(PyObject *self, PyObject *args) {
    Py_buffer un, oo, so;
    long long floor_, tail, seg_size, max_count, max_bytes, disk_memory, disk_count, disk_bytes, min_size;
    if (!PyArg_ParseTuple(args, "y*LLLLLLLLLw*w*", &un, &floor_, &tail, &seg_size, &max_count, &max_bytes,
                          &disk_memory, &disk_count, &disk_bytes, &min_size, &oo, &so)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = un.len / 20;
    if (un.len % 20 || oo.itemsize != 8 || so.itemsize != 8 || oo.len < n * 8 || so.len < n * 8 || seg_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "window_units: units must be whole 20-byte units, the outputs int64 with room for each");
        goto done;
    }
    const unsigned char *u = (const unsigned char *)un.buf;
    int64_t *offs = (int64_t *)oo.buf, *sizes = (int64_t *)so.buf;
    int64_t taken = 0, nbytes = 0;
    for (Py_ssize_t i = 0; i < n; i++, u += 20) {
        const int64_t off = be_i64(u), size = be_i32(u + 8);
        if (size == 0x7FFFFFFF) { taken = -1; break; }
        int64_t count_limit = max_count, bytes_limit = max_bytes;
        if (disk_memory >= 0 && (int64_t)((uint64_t)tail - (uint64_t)off) > disk_memory) {
            count_limit = disk_count;
            bytes_limit = disk_bytes;
        }
        if (taken >= count_limit || (taken && bytes_limit >= 0 && nbytes + size > bytes_limit)) break;
        if (!(floor_ <= off && off < tail && size >= min_size && size <= tail - off &&
              off / seg_size == (off + size - 1) / seg_size)) { taken = -2; break; }
        offs[taken] = off;
        sizes[taken] = size;
        taken++;
        nbytes += size;
    }
    result = PyLong_FromLongLong(taken);
done:
    PyBuffer_Release(&un);
    PyBuffer_Release(&oo);
    PyBuffer_Release(&so);
    return result;
}

/* walk_chains(log, entry_size, heads, counts, out) -> n or -1 - h
 * The timer log's bucket chains (store/schedule/timer_wheel.py): from each head entry index,
 * follow each entry's `prev` (little-endian int64 at the entry's start), exactly counts[h]
 * entries, writing every index into `out` (int64), chain after chain. A sound chain only goes
 * back (each `prev` below its entry: no cycle can form) and ends with -1 after exactly its
 * count; the first chain that does not (a link out of the log, forward, to itself, early or
 * late end, a count the output cannot hold) stops the walk: -1 - h is returned, h its place
 * in `heads`. At most sum(counts) steps whatever the log holds. GIL released. */
static PyObject *walk_chains(PyObject *self, PyObject *args) {
    Py_buffer log, hd, ct, out;
    Py_ssize_t entry_size;
    if (!PyArg_ParseTuple(args, "y*ny*y*w*", &log, &entry_size, &hd, &ct, &out)) return NULL;
    PyObject *result = NULL;
    if (entry_size < 8 || hd.itemsize != 8 || ct.itemsize != 8 || out.itemsize != 8 || hd.len != ct.len) {
        PyErr_SetString(PyExc_ValueError, "walk_chains: entry_size >= 8, int64 heads, counts (as many) and out");
        goto done;
    }
    const unsigned char *b = (const unsigned char *)log.buf;
    const int64_t entries = log.len / entry_size;
    const int64_t *heads = (const int64_t *)hd.buf, *counts = (const int64_t *)ct.buf;
    int64_t *o = (int64_t *)out.buf;
    const Py_ssize_t nh = hd.len / 8, cap = out.len / 8;
    Py_ssize_t n = 0, bad = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t h = 0; h < nh && bad < 0; h++) {
        int64_t i = heads[h], c = counts[h];
        if (c <= 0 || c > cap - n) { bad = h; break; }
        for (int64_t k = 0; k < c; k++) {
            if (i < 0 || i >= entries) { bad = h; break; }
            o[n++] = i;
            int64_t prev;
            memcpy(&prev, b + i * entry_size, 8);
            if (k == c - 1 ? prev != -1 : (prev < 0 || prev >= i)) { bad = h; break; }
            i = prev;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(bad >= 0 ? -1 - bad : n);
done:
    PyBuffer_Release(&log);
    PyBuffer_Release(&hd);
    PyBuffer_Release(&ct);
    PyBuffer_Release(&out);
    return result;
}

/* walk_batch(body, pos_out, total_out, body_len_out, flag_out) -> (n, end)
 * A batch send's body (MessageDecoder.encodeMessages, store/log/wire.py): from byte 0, each
 * message's TOTALSIZE says where the next starts. A message is taken while its lengths agree:
 * at least 22 bytes left, TOTALSIZE in [22, bytes left], BODYLENGTH in [0, TOTALSIZE - 22],
 * and the (signed) int16 PROPERTIESLENGTH after the body equal to TOTALSIZE - 22 - BODYLENGTH.
 * The walk stops at the first position where they do not (end == len(body) when whole).
 * Outputs: each message's position, TOTALSIZE, BODYLENGTH and FLAG, int64 arrays with room
 * for len(body) / 22 + 1 entries. GIL released. */
static PyObject *walk_batch(PyObject *self, PyObject *args) {
    Py_buffer buf, po, to, bo, fo;
    if (!PyArg_ParseTuple(args, "y*w*w*w*w*", &buf, &po, &to, &bo, &fo)) return NULL;
    PyObject *result = NULL;
    const int64_t size = buf.len;
    if (po.itemsize != 8 || to.itemsize != 8 || bo.itemsize != 8 || fo.itemsize != 8 || to.len != po.len ||
        bo.len != po.len || fo.len != po.len || po.len / 8 < size / 22 + 1) {
        PyErr_SetString(PyExc_ValueError, "walk_batch: int64 outputs of len(body) // 22 + 1 entries");
        goto done;
    }
    const unsigned char *b = (const unsigned char *)buf.buf;
    int64_t *pos_out = (int64_t *)po.buf, *total_out = (int64_t *)to.buf, *body_out = (int64_t *)bo.buf;
    int64_t *flag_out = (int64_t *)fo.buf;
    int64_t n = 0, p = 0;
    Py_BEGIN_ALLOW_THREADS
    while (size - p >= 22) {
        int64_t total = be_i32(b + p);
        if (total < 22 || total > size - p) break;
        int64_t body_len = be_i32(b + p + 16);
        if (body_len < 0 || body_len > total - 22) break;
        const unsigned char *q = b + p + 20 + body_len;
        int64_t props_len = (int16_t)(((uint16_t)q[0] << 8) | q[1]);
        if (props_len != total - 22 - body_len) break;
        pos_out[n] = p;
        total_out[n] = total;
        body_out[n] = body_len;
        flag_out[n] = be_i32(b + p + 12);
        n++;
        p += total;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(LL)", (long long)n, (long long)p);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&po);
    PyBuffer_Release(&to);
    PyBuffer_Release(&bo);
    PyBuffer_Release(&fo);
    return result;
}

static PyMethodDef methods[] = {
    {"hexlify", hexlify, METH_VARARGS,
     "hexlify(src, width, dst, dst_stride, dst_offset): uppercase hex of each row into dst, GIL released."},
    {"pack_records", pack_records, METH_VARARGS,
     "pack_records(header, width, crc, body, body_offsets, pieces, out): records back to back into out, GIL released."},
    {"pack_plain", pack_plain, METH_VARARGS,
     "pack_plain(template, born_ms, body, body_offsets, first, n, trailer_head, seq, q_first, q_count, max_body, lengths, starts, queue_ids): a plain batch's records, or None."},
    {"all_same", all_same, METH_VARARGS,
     "all_same(offsets, first, n, data) -> whether n values of an Arrow binary/string array are equal."},
    {"offset_msg_ids", offset_msg_ids, METH_VARARGS,
     "offset_msg_ids(head, offsets) -> the msgIds of records at these int64 commitlog offsets, back to back."},
    {"longest_value", longest_value, METH_VARARGS,
     "longest_value(offsets, first, n, data_len) -> the longest of n values of an Arrow binary array."},
    {"patch_records", patch_records, METH_VARARGS,
     "patch_records(out, starts, fields, values): big-endian int64 fields written into packed records."},
    {"parse_properties", parse_properties, METH_VARARGS,
     "parse_properties(data, offsets, key_start, key_len, val_start, val_len, row) -> pairs found."},
    {"copy_properties", copy_properties, METH_VARARGS,
     "copy_properties(data, offsets, drop, drop_prefixes, find, out, out_offsets, found_start, found_len) -> bytes written."},
    {"walk_chains", walk_chains, METH_VARARGS,
     "walk_chains(log, entry_size, heads, counts, out) -> n, or -1 - h for the first damaged chain h: the timer log's bucket chains, entry indices into out."},
    {"walk_batch", walk_batch, METH_VARARGS,
     "walk_batch(body, pos_out, total_out, body_len_out, flag_out) -> (n, end): a batch send's messages from byte 0."},
    {"walk_records", walk_records, METH_VARARGS,
     "walk_records(seg, start, limit, base, header_size, trailer_fields, min_ts, max_ts, pos_out, size_out) -> (n, end, code, value)."},
    {"window_units", window_units, METH_VARARGS,
     "window_units(units, floor, tail, seg_size, max_count, max_bytes, disk_memory, disk_count, disk_bytes, min_size, offs_out, sizes_out) -> units taken, -1 (a filler), -2 (out of bounds)."},
    {"check_copy", check_copy, METH_VARARGS,
     "check_copy(data, base, offsets, sizes, first, count, queue_offset, topic, queue_id, min_ts, max_ts, crc, dst, at) -> whether the records pass check_stored's checks (then copied into dst at `at`), GIL released."},
    {"check_stored", check_stored, METH_VARARGS,
     "check_stored(data, starts, sizes, offsets, queue_offsets, topic, queue_id, min_ts, max_ts, crc) -> records before the first that is not its unit's, GIL released."},
    {"gather", gather, METH_VARARGS,
     "gather(src, starts, lengths, dst): copy the slices back to back into dst, GIL released."},
    {"crc32_batch", crc32_batch, METH_VARARGS,
     "crc32_batch(data, offsets, out): BODYCRC (CRC-32 & 0x7FFFFFFF) of each slice, GIL released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    const uint16_t one = 1;
    if (*(const unsigned char *)&one != 1) {
        PyErr_SetString(PyExc_ImportError, "store._native supports little-endian hosts only");
        return NULL;
    }
    build_tables();
#ifdef HAVE_CLMUL_PATH
    __builtin_cpu_init();
    use_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    if (PyType_Ready(&ChunkWriterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&ChunkWriterType);
    if (PyModule_AddIntConstant(m, "CLMUL", use_clmul) < 0 ||
        PyModule_AddObject(m, "ChunkWriter", (PyObject *)&ChunkWriterType) < 0) {
        Py_DECREF(&ChunkWriterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
