/* Block sparsity of a layer's im2col input, fused, without building the matrix: a few samples
   at a time are copied into a buffer with their padding (so that every receptive field lies
   inside it), every block's mean |value| comes from sums of windows along the buffer's rows, and
   the kept blocks' columns are multiplied with the weights reading the buffer in place, each
   panel of weights applied to all the samples' blocks while it stays in the cache.

   Conventions are those of model_explorer/sparsity/sparsifier.py: column k of a sample's
   matrix is (channel, kernel row, kernel column), row l the output position; a block is `bw`
   columns by `bh` rows, edge blocks averaged over the full block size; a block is dropped
   where its mean is below the threshold (a NaN mean keeps it). Each output is the sum over
   the kept columns in increasing order, from zero, then the bias. The x86-64 build holds one
   version per instruction level (AVX-512, AVX2 with FMA, the baseline), chosen when loaded:
   the products are fused multiply-adds where the processor has them, so outputs differ across
   processors in their last bits, as a BLAS library's do. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(NO_CLONES)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

typedef struct {
    int64_t channels, height, width;            /* one group's input as (C, H, W), unpadded */
    int64_t sn, sc, sh, sw;                     /* its strides, in elements */
    int64_t kh, kw, stride_y, stride_x, dil_y, dil_x, pad_y, pad_x;
    int64_t out_h, out_w, cout, groups;         /* cout: one group's output channels */
    int64_t bw, bh;
    int64_t on, oc, ol;                         /* the output's strides: sample, channel, row */
} geometry;

typedef float v16 __attribute__((vector_size(64), aligned(4)));

/* tile[r][0 .. 16V) (+)= sum over the columns k of the kept blocks (kept[i] * bw up to the
   next block or `columns`) of base[off[k] + r * step] * wt[k * cout + 0 .. 16V), r < R; from
   zero where `first`, else onto the tile. */
static inline __attribute__((always_inline)) void
micro(const int R, const int V, int first, float *restrict tile, const float *restrict base,
      int64_t step, const int64_t *restrict off, const float *restrict wt, int64_t cout,
      const int32_t *restrict kept, int64_t count, int64_t bw, int64_t columns)
{
    v16 a[4][2];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++)
            a[r][v] = first ? (v16){0} : *(const v16 *)(tile + r * 32 + 16 * v);
    for (int64_t i = 0; i < count; i++) {
        const int64_t k0 = kept[i] * bw, k1 = k0 + bw < columns ? k0 + bw : columns;
        for (int64_t k = k0; k < k1; k++) {
            const float *p = base + off[k];
            const float *w = wt + k * cout;
            v16 wv[2];
            for (int v = 0; v < V; v++) wv[v] = *(const v16 *)(w + 16 * v);
            for (int r = 0; r < R; r++)
                for (int v = 0; v < V; v++) a[r][v] += p[r * step] * wv[v];
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) *(v16 *)(tile + r * 32 + 16 * v) = a[r][v];
}

/* One run of rows' products for output channels 0 .. width (width <= 32) over the kept
   columns given, into tile (rows x 32). */
static inline __attribute__((always_inline)) void
run_product(int first, int64_t width, int64_t rows, float *tile, const float *base,
            int64_t step, const int64_t *off, const float *wt, int64_t cout,
            const int32_t *kept, int64_t count, int64_t bw, int64_t columns)
{
    const int V = width >= 32 ? 2 : width >= 16 ? 1 : 0;
    int64_t r = 0;
#define MICRO(R, V)                                                                        \
    micro(R, V, first, tile + r * 32, base + r * step, step, off, wt, cout, kept, count, bw, \
          columns)
    if (V == 2) {
        for (; r + 4 <= rows; r += 4) MICRO(4, 2);
        for (; r < rows; r++) MICRO(1, 2);
    } else if (V == 1) {
        for (; r + 4 <= rows; r += 4) MICRO(4, 1);
        for (; r < rows; r++) MICRO(1, 1);
    }
#undef MICRO
    for (int64_t j = 16 * V; j < width; j++)
        for (r = 0; r < rows; r++) {
            float a = first ? 0.0f : tile[r * 32 + j];
            for (int64_t i = 0; i < count; i++) {
                const int64_t k0 = kept[i] * bw, k1 = k0 + bw < columns ? k0 + bw : columns;
                for (int64_t k = k0; k < k1; k++) a += base[off[k] + r * step] * wt[k * cout + j];
            }
            tile[r * 32 + j] = a;
        }
}

typedef struct {
    int64_t columns, rows, wide, high, hp, wp, plane;
    const int64_t *off; /* column k's offset in a padded sample */
    /* the window sums, over `win` values: the length most runs have (bh where blocks of rows
       lie along rows of outputs, a row's length where rows are shorter than a block); none
       where no run has it (nx 0); where their nx distinct
       positions xs along a row of the buffer are a quarter of it or more (`dense`), at every
       position of the buffer (one vector pass per row of a window), column k of a run at
       base reading window base + off[k]; else only at xs, column k of run q reading window
       run_row[q] * nx + row_of[k] + slot[q * kw + kx_of[k]] */
    int64_t win, nx, dense;
    const int64_t *xs, *row_of, *kx_of, *slot;
    /* each block of rows' runs of outputs along one row: run_first[lb] .. run_first[lb + 1],
       each with its first row in the block, its receptive fields' origin, and its length */
    const int64_t *run_first, *run_r0, *run_row, *run_col, *run_len;
} layout;

/* A sample (one group's channels) into buf (channels x hp x wp) inside its zero margins. */
static inline __attribute__((always_inline)) void
pad_copy(const float *xs, const geometry *g, const layout *s, float *buf)
{
    for (int64_t c = 0; c < g->channels; c++)
        for (int64_t y = 0; y < g->height; y++) {
            const float *source = xs + c * g->sc + y * g->sh;
            float *row = buf + c * s->plane + (y + g->pad_y) * s->wp + g->pad_x;
            if (g->sw == 1)
                memcpy(row, source, sizeof(float) * g->width);
            else
                for (int64_t i = 0; i < g->width; i++) row[i] = source[i * g->sw];
        }
}

/* Sums of |value| (double) over `win` values `stride_x` apart along the rows of a padded
   sample, in the order r = 0 .. win - 1: a run of `win` outputs' values in one column of the
   matrix. Where `dense`, from every start, the sample taken as one array (the windows that
   cross a row's end are never read); else from the nx positions xs of every row. */
static inline __attribute__((always_inline)) void
window_sums(const float *restrict buf, const geometry *g, const layout *s,
            double *restrict wins)
{
    if (s->dense) {
        const int64_t starts = g->channels * s->plane - (s->win - 1) * g->stride_x;
        for (int64_t j = 0; j < starts; j++) wins[j] = fabs((double)buf[j]);
        for (int64_t r = 1; r < s->win; r++) {
            const float *restrict v = buf + r * g->stride_x;
            for (int64_t j = 0; j < starts; j++) wins[j] += fabs((double)v[j]);
        }
        return;
    }
    const int64_t rows = g->channels * s->hp, nx = s->nx, wp = s->wp, bh = s->win;
    const int64_t step = g->stride_x, *restrict xs = s->xs;
    for (int64_t y = 0; y < rows && nx; y++) {
        const float *restrict line = buf + y * wp;
        double *restrict w = wins + y * nx;
        for (int64_t i = 0; i < nx; i++) {
            const float *restrict v = line + xs[i];
            double sum = fabs((double)v[0]);
            for (int64_t r = 1; r < bh; r++) sum += fabs((double)v[r * step]);
            w[i] = sum;
        }
    }
}

/* A block's mean |value| from its sum, over the full block (edge blocks too): times 1 / size
   where size is a power of two (then exact), else divided by it. */
static inline __attribute__((always_inline)) float block_mean(double sum, int64_t size)
{
    return (float)((size & (size - 1)) == 0 ? sum * (1.0 / (double)size) : sum / (double)size);
}

/* blocks[kb] = the sum of sums[kb * bw .. (kb + 1) * bw), from 0 in increasing order (bw a
   constant where inlined, so that the loop runs across blocks in vectors). */
static inline __attribute__((always_inline)) void
block_sums(const double *restrict sums, int64_t wide, int64_t bw, double *restrict blocks)
{
    for (int64_t kb = 0; kb < wide; kb++) {
        double sum = 0.0;
        for (int64_t j = 0; j < bw; j++) sum += sums[kb * bw + j];
        blocks[kb] = sum;
    }
}

/* blocks[kb] = the sum of column sums single[off[k]], k in block kb, from 0 in increasing
   order: block_sums of the gathered columns (a column past the last adds nothing), without
   storing them (bw a constant where inlined). */
static inline __attribute__((always_inline)) void
gathered_sums(const double *restrict single, const int64_t *restrict off, int64_t columns,
              int64_t wide, int64_t bw, double *restrict blocks)
{
    const int64_t whole = columns / bw;
    for (int64_t kb = 0; kb < whole; kb++) {
        double sum = 0.0;
        for (int64_t j = 0; j < bw; j++) sum += single[off[kb * bw + j]];
        blocks[kb] = sum;
    }
    if (whole < wide) {
        double sum = 0.0;
        for (int64_t k = whole * bw; k < columns; k++) sum += single[off[k]];
        blocks[whole] = sum;
    }
}

/* Each block's mean from its sum into m (in order), and to tally the blocks that hold only
   zeros (a sum of magnitudes that is zero exactly; a NaN's is NaN) and the others whose mean
   is below the threshold: without a branch, so that the loop runs in vectors. */
static inline __attribute__((always_inline)) void
block_decisions(const double *restrict blocks, int64_t wide, int64_t size, float threshold,
                float *restrict m, int64_t *restrict tally)
{
    int64_t present = 0, created = 0;
    for (int64_t kb = 0; kb < wide; kb++) {
        const double sum = blocks[kb];
        const float mean = block_mean(sum, size);
        m[kb] = mean;
        present += sum == 0.0;
        created += (sum != 0.0) & (mean < threshold);
    }
    tally[0] += present, tally[1] += created;
}

/* Every block's mean |value| of one block of rows lb of a padded sample, and the kept blocks
   (not below the threshold; a NaN mean is kept) in kept;
   returns how many. A run of `win` outputs along a row takes its column's sum from the window
   sums, another (a block of rows across rows of outputs of other lengths) adds its values. Adds the
   blocks holding only zeros (whose sum of magnitudes is zero exactly) to tally[0], and the
   others that are dropped to tally[1]. */
CLONES static int64_t
block_means(const float *restrict buf, const double *restrict wins, const geometry *g,
            const layout *s, int64_t lb, float threshold, int32_t *restrict kept,
            double *restrict sums, int64_t *restrict tally)
{
    const int64_t first = s->run_first[lb], last = s->run_first[lb + 1], bw = g->bw;
    const int64_t columns = s->columns, wide = s->wide;
    const int64_t *restrict off = s->off;
    /* one run of the window's length, read from the sums at every position: each block's sum
       is taken straight from them, in the same order */
    const double *single = last - first == 1 && s->run_len[first] == s->win && s->dense
                               ? wins + s->run_row[first] * s->wp + s->run_col[first]
                               : NULL;
    for (int64_t k = 0; k < wide * bw && !single; k++) sums[k] = 0.0;
    for (int64_t q = first; q < last && !single; q++) { /* each column's sum over the run */
        const int64_t base = s->run_row[q] * s->wp + s->run_col[q], len = s->run_len[q];
        if (len == s->win && s->dense) {
            const double *restrict w = wins + base;
            for (int64_t k = 0; k < columns; k++) sums[k] += w[off[k]];
        } else if (len == s->win) {
            const double *restrict w = wins + s->run_row[q] * s->nx;
            const int64_t *restrict slot = s->slot + q * g->kw, *restrict row_of = s->row_of;
            const int64_t *restrict kx_of = s->kx_of;
            for (int64_t k = 0; k < columns; k++) sums[k] += w[row_of[k] + slot[kx_of[k]]];
        } else {
            for (int64_t k = 0; k < columns; k++)
                for (int64_t r = 0; r < len; r++)
                    sums[k] += fabs((double)buf[base + off[k] + r * g->stride_x]);
        }
    }
    double *restrict blocks = sums + wide * bw; /* each block's sum, its columns in order */
    if (single && bw == 4)
        gathered_sums(single, off, columns, wide, 4, blocks);
    else if (single && bw == 8)
        gathered_sums(single, off, columns, wide, 8, blocks);
    else if (single)
        gathered_sums(single, off, columns, wide, bw, blocks);
    else if (bw == 4)
        block_sums(sums, wide, 4, blocks);
    else if (bw == 8)
        block_sums(sums, wide, 8, blocks);
    else
        block_sums(sums, wide, bw, blocks);
    float *restrict means = (float *)(blocks + wide);
    block_decisions(blocks, wide, bw * g->bh, threshold, means, tally);
    int64_t count = 0;
    for (int64_t kb = 0; kb < wide; kb++) {
        kept[count] = (int32_t)kb; /* without a branch: counted where it is kept */
        count += !(means[kb] < threshold);
    }
    return count;
}

/* The largest number of floats the padded samples of one batch take, and a panel of weights. */
#define BATCH_FLOATS (1 << 16)
#define PANEL_FLOATS (1 << 15)

/* Offsets of columns, runs of rows and the window sums' positions (`layout`), in one
   allocation; NULL where memory ran out. */
static int64_t *tables(const geometry *g, layout *s)
{
    const int64_t taps = g->kh * g->kw, most_runs = s->rows + s->high;
    const int64_t size = s->columns + s->high + 1 + 4 * most_runs + 2 * s->columns + 2 * s->wp +
                         most_runs * g->kw;
    int64_t *t = malloc(sizeof(int64_t) * size);
    if (!t) return NULL;
    int64_t *off = t, *first = off + s->columns, *r0 = first + s->high + 1;
    int64_t *row = r0 + most_runs, *col = row + most_runs, *len = col + most_runs;
    int64_t *row_of = len + most_runs, *xs = row_of + s->columns, *index_of = xs + s->wp;
    int64_t *slot = index_of + s->wp, *kx_of = slot + most_runs * g->kw;
    for (int64_t k = 0; k < s->columns; k++) { /* row_of in rows of the buffer for now */
        const int64_t c = k / taps, ky = k % taps / g->kw, kx = k % g->kw;
        row_of[k] = c * s->hp + ky * g->dil_y, kx_of[k] = kx;
        off[k] = row_of[k] * s->wp + kx * g->dil_x;
    }
    int64_t q = 0;
    for (int64_t x = 0; x < s->wp; x++) index_of[x] = -1;
    for (int64_t lb = 0; lb < s->high; lb++) {
        first[lb] = q;
        const int64_t end = (lb + 1) * g->bh < s->rows ? (lb + 1) * g->bh : s->rows;
        for (int64_t l = lb * g->bh; l < end; q++) {
            const int64_t oy = l / g->out_w, ox = l % g->out_w;
            const int64_t n = end - l < g->out_w - ox ? end - l : g->out_w - ox;
            r0[q] = l - lb * g->bh, row[q] = oy * g->stride_y, col[q] = ox * g->stride_x;
            len[q] = n;
            l += n;
        }
    }
    first[s->high] = q;
    /* the window: the most common run length (runs are at most a block high) */
    int64_t best = 0;
    s->win = g->bh;
    for (int64_t n = g->bh; n >= 1; n--) {
        int64_t runs = 0;
        for (int64_t p = 0; p < q; p++) runs += len[p] == n;
        if (runs > best) best = runs, s->win = n;
    }
    for (int64_t p = 0; p < q; p++)
        if (len[p] == s->win) /* its receptive fields' windows are needed */
            for (int64_t kx = 0; kx < g->kw; kx++) index_of[col[p] + kx * g->dil_x] = 0;
    s->nx = 0;
    for (int64_t x = 0; x < s->wp; x++)
        if (index_of[x] == 0) xs[s->nx] = x, index_of[x] = s->nx++;
    s->dense = s->nx > 0 && 4 * s->nx >= s->wp;
    for (int64_t p = 0; p < q; p++)
        for (int64_t kx = 0; kx < g->kw; kx++)
            slot[p * g->kw + kx] = len[p] == s->win ? index_of[col[p] + kx * g->dil_x] : 0;
    for (int64_t k = 0; k < s->columns; k++) row_of[k] *= s->nx; /* in windows */
    s->off = off, s->xs = xs, s->row_of = row_of, s->kx_of = kx_of, s->slot = slot;
    s->run_first = first, s->run_r0 = r0, s->run_row = row, s->run_col = col, s->run_len = len;
    return t;
}

/* With a threshold of 0 or below nothing is dropped and only the blocks holding nothing but
   zeros are counted: a sample becomes a map of its padded values, 1 byte where a value is not
   zero (NaN included, -0.0 not), each row's positions ordered by their remainder modulo the
   stride across (all the even ones, then the odd ones at stride 2), so that a run of outputs
   reads consecutive bytes. Byte ORs over the most common run length give each window's "any"
   (window_any), and a block holds only zeros where none of its columns' windows is set (one
   byte a column and run; a run of another length ORs its own bytes). */
static const uint8_t LOW_BYTES[16] = {255, 255, 255, 255, 255, 255, 255, 255};

typedef struct {
    int64_t phase, row, plane; /* a remainder's positions, a row's bytes, a channel's */
    const int64_t *phases;     /* each remainder's first input column and its place */
    uint8_t *scratch;          /* a sample's bytes, unpadded */
    const int64_t *run_at;     /* each run's first byte */
} byte_map;

static inline __attribute__((always_inline)) void
nonzero_map(const float *restrict xs, const geometry *g, const byte_map *b, uint8_t *restrict map)
{
    const int64_t step = g->stride_x, sw = g->sw, width = g->width, values = g->height * width;
    if (step == 1 && sw == 1 && g->sh == width && g->sc == values && width <= 8) {
        /* short rows: the whole sample at once into the scratch, then 8 bytes a row, those past
           the row's end (its right margin, the next row's left one) zero */
        uint64_t v, mask;
        for (int64_t j = 0; j < g->channels * values; j++) b->scratch[j] = xs[j] != 0.0f;
        memcpy(&mask, LOW_BYTES + 8 - width, 8);
        for (int64_t c = 0; c < g->channels; c++)
            for (int64_t y = 0; y < g->height; y++) {
                memcpy(&v, b->scratch + c * values + y * width, 8), v &= mask;
                memcpy(map + c * b->plane + (y + g->pad_y) * b->row + g->pad_x, &v, 8);
            }
        return;
    }
    for (int64_t c = 0; c < g->channels; c++)
        for (int64_t y = 0; y < g->height; y++) {
            const float *restrict source = xs + c * g->sc + y * g->sh;
            uint8_t *restrict row = map + c * b->plane + (y + g->pad_y) * b->row;
            if (step == 1 && sw == 1) {
                for (int64_t i = 0; i < g->width; i++) row[g->pad_x + i] = source[i] != 0.0f;
                continue;
            }
            for (int64_t p = 0; p < step; p++) { /* input i at padded position i + pad_x */
                uint8_t *restrict part = row + b->phases[2 * p + 1];
                for (int64_t i = b->phases[2 * p], j = 0; i < g->width; i += step, j++)
                    part[j] = source[i * sw] != 0.0f;
            }
        }
}

/* w[j]: whether any of the `win` bytes from nz[j] on is nonzero (the windows that cross a
   row's end are never read). */
static inline __attribute__((always_inline)) void
window_any(const uint8_t *restrict nz, int64_t size, int64_t win, uint8_t *restrict w)
{
    const int64_t starts = size - (win - 1);
    for (int64_t j = 0; j < starts; j++) w[j] = nz[j];
    for (int64_t r = 1; r < win; r++)
        for (int64_t j = 0; j < starts; j++) w[j] |= nz[j + r];
}

/* The blocks of bw columns none of whose windows is set, column k's window of run q being
   w[starts[q] + off[k]] (bw, and one run, constants where inlined). */
static inline __attribute__((always_inline)) int64_t
zero_windows(const uint8_t *restrict w, const int64_t *restrict starts, int64_t runs,
             const int64_t *restrict off, int64_t columns, int64_t bw)
{
    const int64_t whole = columns / bw;
    int64_t zeros = 0;
    for (int64_t kb = 0; kb < whole; kb++) {
        unsigned any = 0;
        for (int64_t q = 0; q < runs; q++) {
            const uint8_t *restrict at = w + starts[q];
            for (int64_t j = 0; j < bw; j++) {
                any |= at[off[kb * bw + j]];
                __asm__("" : "+r"(any)); /* scalar loads: gathers were slower */
            }
        }
        zeros += any == 0;
    }
    if (whole * bw < columns) {
        unsigned any = 0;
        for (int64_t q = 0; q < runs; q++)
            for (int64_t k = whole * bw; k < columns; k++) any |= w[starts[q] + off[k]];
        zeros += any == 0;
    }
    return zeros;
}

/* The blocks of one block of rows lb of a sample's map nz (w: its windows) that hold only
   zeros: column k of a run reads from the run's first byte plus off[k]. */
static inline __attribute__((always_inline)) int64_t
zero_blocks(const uint8_t *restrict nz, const uint8_t *restrict w, const geometry *g,
            const layout *s, const byte_map *b, const int64_t *restrict off, int64_t lb)
{
    const int64_t columns = s->columns, first = s->run_first[lb], last = s->run_first[lb + 1];
    int64_t whole_runs = 1; /* every run of the window's length: their windows alone */
    for (int64_t q = first; q < last; q++) whole_runs &= s->run_len[q] == s->win;
    if (whole_runs) {
        const int64_t *starts = b->run_at + first, runs = last - first;
        if (runs == 1 && g->bw == 4) return zero_windows(w, starts, 1, off, columns, 4);
        if (runs == 1 && g->bw == 8) return zero_windows(w, starts, 1, off, columns, 8);
        if (g->bw == 4) return zero_windows(w, starts, runs, off, columns, 4);
        if (g->bw == 8) return zero_windows(w, starts, runs, off, columns, 8);
        return zero_windows(w, starts, runs, off, columns, g->bw);
    }
    int64_t zeros = 0;
    for (int64_t k0 = 0; k0 < columns; k0 += g->bw) {
        const int64_t k1 = k0 + g->bw < columns ? k0 + g->bw : columns;
        unsigned any = 0;
        for (int64_t q = first; q < last; q++) {
            const int64_t at = b->run_at[q], n = s->run_len[q];
            if (n == s->win)
                for (int64_t k = k0; k < k1; k++) {
                    any |= w[at + off[k]];
                    __asm__("" : "+r"(any)); /* scalar loads: gathers were slower */
                }
            else
                for (int64_t k = k0; k < k1; k++)
                    for (int64_t r = 0; r < n; r++) any |= nz[at + off[k] + r];
        }
        zeros += any == 0;
    }
    return zeros;
}

/* Samples [n0, n1) with nothing dropped: the blocks that hold only zeros into tally[0]. */
CLONES
static int zero_counts(const float *x, const geometry *g, layout *s, int64_t n0, int64_t n1,
                       int64_t *tally)
{
    byte_map b;
    b.phase = (s->wp + g->stride_x - 1) / g->stride_x;
    b.row = b.phase * g->stride_x, b.plane = s->hp * b.row;
    const int64_t taps = g->kh * g->kw, size = g->channels * b.plane;
    const int64_t runs = s->rows + s->high; /* at most */
    int64_t *t = tables(g, s);
    int64_t *off = malloc(sizeof(int64_t) * (s->columns + 2 * g->stride_x + runs));
    uint8_t *nz = calloc(3 * size + 16, 1); /* the map, its windows, the scratch */
    if (!t || !off || !nz) {
        free(t), free(off), free(nz);
        return -1;
    }
    int64_t *phases = off + s->columns;
    for (int64_t p = 0; p < g->stride_x; p++) { /* padded position p + step * j: input i0 */
        const int64_t i0 = ((p - g->pad_x) % g->stride_x + g->stride_x) % g->stride_x;
        phases[2 * p] = i0, phases[2 * p + 1] = p * b.phase + (i0 + g->pad_x) / g->stride_x;
    }
    int64_t *run_at = phases + 2 * g->stride_x;
    for (int64_t q = 0; q < s->run_first[s->high]; q++)
        run_at[q] = s->run_row[q] * b.row + s->run_col[q] / g->stride_x;
    b.phases = phases, b.scratch = nz + 2 * size + 8, b.run_at = run_at;
    for (int64_t k = 0; k < s->columns; k++) { /* kx's position ordered by its remainder */
        const int64_t c = k / taps, ky = k % taps / g->kw, x = k % g->kw * g->dil_x;
        off[k] = c * b.plane + ky * g->dil_y * b.row + x % g->stride_x * b.phase + x / g->stride_x;
    }
    uint8_t *w = s->win > 1 ? nz + size : nz;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t group = 0; group < g->groups; group++) {
            nonzero_map(x + n * g->sn + group * g->channels * g->sc, g, &b, nz);
            if (s->win > 1) window_any(nz, size, s->win, w);
            for (int64_t lb = 0; lb < s->high; lb++)
                tally[0] += zero_blocks(nz, w, g, s, &b, off, lb);
        }
    free(t), free(off), free(nz);
    return 0;
}

/* A row of features with the blocks whose mean is below the threshold zero, as bits: a kept
   block's values and-ed with ones, a dropped one's with zeros (bw a constant where inlined,
   so that the loop runs in vectors). */
typedef uint32_t __attribute__((may_alias)) float_bits;

static inline __attribute__((always_inline)) void
masked_row(const float *restrict xs, const float *restrict m, float threshold, int64_t columns,
           int64_t bw, float *restrict row)
{
    const float_bits *restrict from = (const float_bits *)xs;
    float_bits *restrict to = (float_bits *)row;
    const int64_t whole = columns / bw;
    for (int64_t kb = 0; kb < whole; kb++) {
        const uint32_t keep = -(uint32_t)!(m[kb] < threshold);
        for (int64_t j = 0; j < bw; j++) to[kb * bw + j] = from[kb * bw + j] & keep;
    }
    for (int64_t k = whole * bw; k < columns; k++) row[k] = m[whole] < threshold ? 0.0f : xs[k];
}

/* Samples [n0, n1) of one position each (a Linear layer's rows): a block is bw consecutive
   channels, its sum taken as block_means takes it (each value's magnitude, then block_sums;
   a block holds only zeros where that sum is zero, a NaN's being NaN). Tally as
   block_sparse's; where `masked` is given, the samples' values into it as
   (N, groups x channels), the dropped blocks' zero. Returns 0, or -1 where memory ran out. */
CLONES
static int one_position(const float *x, const geometry *g, const layout *s, float threshold,
                        int64_t n0, int64_t n1, float *masked, int64_t *tally)
{
    const int64_t bw = g->bw, wide = s->wide, columns = s->columns, sc = g->sc;
    double *magnitudes = calloc(wide * bw + wide, sizeof(double)); /* zeros past the last */
    float *values = malloc(sizeof(float) * (columns + wide)), *m = values + columns;
    if (!magnitudes || !values) {
        free(magnitudes), free(values);
        return -1;
    }
    double *blocks = magnitudes + wide * bw;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t group = 0; group < g->groups; group++) {
            const float *xs = x + n * g->sn + group * g->channels * sc;
            if (sc != 1) { /* the features gathered, to be read in order */
                for (int64_t k = 0; k < columns; k++) values[k] = xs[k * sc];
                xs = values;
            }
            for (int64_t k = 0; k < columns; k++) magnitudes[k] = fabs((double)xs[k]);
            if (bw == 4)
                block_sums(magnitudes, wide, 4, blocks);
            else if (bw == 8)
                block_sums(magnitudes, wide, 8, blocks);
            else
                block_sums(magnitudes, wide, bw, blocks);
            block_decisions(blocks, wide, bw * g->bh, threshold, m, tally);
            if (!masked) continue;
            float *row = masked + (n * g->groups + group) * g->channels;
            if (bw == 4)
                masked_row(xs, m, threshold, columns, 4, row);
            else if (bw == 8)
                masked_row(xs, m, threshold, columns, 8, row);
            else
                masked_row(xs, m, threshold, columns, bw, row);
        }
    free(magnitudes), free(values);
    return 0;
}

/* A Linear layer's sample (its positions' rows of features, into o) with the dropped blocks
   zero: each block of rows' kept list (kept, counts) says which blocks of features stay. */
static inline __attribute__((always_inline)) void
zeroed_rows(const float *restrict xs, const geometry *g, const layout *s,
            const int32_t *restrict kept, const int64_t *restrict counts, float *restrict o)
{
    const int64_t features = g->channels;
    for (int64_t lb = 0; lb < s->high; lb++) {
        const int32_t *k = kept + lb * (s->wide + 1);
        const int64_t end = (lb + 1) * g->bh < s->rows ? (lb + 1) * g->bh : s->rows;
        for (int64_t l = lb * g->bh; l < end; l++) {
            float *row = o + l * features;
            memset(row, 0, sizeof(float) * features);
            for (int64_t i = 0; i < counts[lb]; i++) {
                const int64_t k0 = k[i] * g->bw, k1 = k0 + g->bw < features ? k0 + g->bw : features;
                for (int64_t c = k0; c < k1; c++) row[c] = xs[c * g->sc + l * g->sw];
            }
        }
    }
}

/* The products of every kept block of a batch's samples, output channels co .. co + width,
   panel by panel of columns, into tiles (one per block of rows: bh x 32). */
static inline __attribute__((always_inline)) void
products(const geometry *g, const layout *s, const float *bufs, int64_t count,
         const int32_t *kept, const int64_t *counts, int64_t *cursors, const float *wt,
         int64_t width, int64_t panel, float *tiles)
{
    memset(cursors, 0, sizeof(int64_t) * count * s->high);
    for (int64_t k0 = 0; k0 < s->columns; k0 += panel)
        for (int64_t b = 0; b < count * s->high; b++) {
            const int64_t lb = b % s->high;
            const int32_t *k = kept + b * (s->wide + 1);
            const float *buf = bufs + b / s->high * g->channels * s->plane;
            int64_t i = cursors[b], j = k0 + panel >= s->columns ? counts[b] : i;
            while (j < counts[b] && k[j] * g->bw < k0 + panel) j++;
            for (int64_t q = s->run_first[lb]; q < s->run_first[lb + 1]; q++)
                run_product(k0 == 0, width, s->run_len[q], tiles + (b * g->bh + s->run_r0[q]) * 32,
                            buf + s->run_row[q] * s->wp + s->run_col[q], g->stride_x, s->off,
                            wt, g->cout, k + i, j - i, g->bw, s->columns);
            cursors[b] = j;
        }
}

/* Samples [n0, n1): tally (the blocks that hold only zeros, and the others that are dropped)
   always; with `multiply`, the layer's output from the kept blocks into out (by the
   geometry's output strides), wt being the weights as (groups, columns, cout); without it,
   where out is given (a Linear layer's), its input with the dropped blocks zeroed, as
   (N, positions, features). Returns 0, or -1 where memory ran out. */
CLONES
int block_sparse(const float *x, const geometry *g, const float *wt, const float *bias,
                 float threshold, int multiply, int64_t n0, int64_t n1, float *out,
                 int64_t *tally)
{
    layout s;
    tally[0] = tally[1] = 0;
    s.columns = g->channels * g->kh * g->kw, s.rows = g->out_h * g->out_w;
    s.wide = (s.columns + g->bw - 1) / g->bw, s.high = (s.rows + g->bh - 1) / g->bh;
    s.hp = g->height + 2 * g->pad_y, s.wp = g->width + 2 * g->pad_x, s.plane = s.hp * s.wp;
    if (!multiply && s.plane == 1 && s.columns == g->channels)
        return one_position(x, g, &s, threshold, n0, n1, out, tally);
    if (!multiply && !(threshold > 0.0f)) return zero_counts(x, g, &s, n0, n1, tally);
    const int64_t sample = g->channels * s.plane, span = s.wide * (g->bw + 2) + 1;
    int64_t batch = BATCH_FLOATS / sample;
    batch = batch < 1 ? 1 : batch > n1 - n0 ? n1 - n0 : batch;
    const int64_t blocks_per_panel = PANEL_FLOATS / 32 / g->bw;
    const int64_t panel = blocks_per_panel > 0 ? blocks_per_panel * g->bw : g->bw;

    int64_t *t = tables(g, &s);
    float *bufs = calloc(batch * sample + batch * s.high * g->bh * 32, sizeof(float));
    double *wins = malloc(sizeof(double) * (sample + span)), *column_sums = wins + sample;
    int32_t *kept = malloc(sizeof(int32_t) * batch * s.high * (s.wide + 1));
    int64_t *counts = malloc(sizeof(int64_t) * 2 * batch * s.high);
    if (!t || !bufs || !wins || !kept || !counts) {
        free(t), free(bufs), free(wins), free(kept), free(counts);
        return -1;
    }
    float *tiles = bufs + batch * sample;
    for (int64_t start = n0; start < n1; start += batch) {
        const int64_t count = n1 - start < batch ? n1 - start : batch;
        for (int64_t group = 0; group < g->groups; group++) {
            for (int64_t i = 0; i < count; i++) {
                const int64_t n = start + i;
                float *buf = bufs + i * sample;
                pad_copy(x + n * g->sn + group * g->channels * g->sc, g, &s, buf);
                window_sums(buf, g, &s, wins);
                for (int64_t lb = 0; lb < s.high; lb++) {
                    const int64_t b = i * s.high + lb;
                    counts[b] = block_means(buf, wins, g, &s, lb, threshold,
                                            kept + b * (s.wide + 1), column_sums, tally);
                }
                if (!multiply && out) /* a Linear layer's: its rows, the dropped blocks zero */
                    zeroed_rows(x + n * g->sn, g, &s, kept + i * s.high * (s.wide + 1),
                                counts + i * s.high, out + n * s.rows * g->channels);
            }
            if (!multiply) continue;
            const float *wg = wt + group * s.columns * g->cout;
            for (int64_t co = 0; co < g->cout; co += 32) {
                const int64_t width = g->cout - co < 32 ? g->cout - co : 32;
                products(g, &s, bufs, count, kept, counts, counts + batch * s.high, wg + co,
                         width, panel, tiles);
                for (int64_t b = 0; b < count * s.high; b++) {
                    const int64_t n = start + b / s.high, l0 = b % s.high * g->bh;
                    const int64_t rows = l0 + g->bh <= s.rows ? g->bh : s.rows - l0;
                    float *o = out + n * g->on + (group * g->cout + co) * g->oc + l0 * g->ol;
                    const float *tile = tiles + b * g->bh * 32;
                    const float *b0 = bias ? bias + group * g->cout + co : NULL;
                    for (int64_t j = 0; j < width; j++) {
                        const float add = b0 ? b0[j] : 0.0f;
                        if (b0)
                            for (int64_t r = 0; r < rows; r++)
                                o[j * g->oc + r * g->ol] = tile[r * 32 + j] + add;
                        else
                            for (int64_t r = 0; r < rows; r++)
                                o[j * g->oc + r * g->ol] = tile[r * 32 + j];
                    }
                }
            }
        }
    }
    free(t), free(bufs), free(wins), free(kept), free(counts);
    return 0;
}
