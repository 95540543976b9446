/* NumPy .npy read and write (tessera/npy.h): the header's dict literal is parsed by a small
 * recursive-descent reader that accepts exactly the three keys numpy writes. */
#include "tessera/npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAX_HEADER (1u << 20) /* numpy itself refuses headers above 10 KB by default */

static const struct {
    const char *descr;
    te_dtype dtype;
} k_types[] = {{"<f4", TE_F32},  {"<f8", TE_F64}, {"<i8", TE_I64}, {"<i4", TE_I32},
               {"|b1", TE_BOOL}, {"|u1", TE_U8},  {"|i1", TE_I8}};

static int fail(char *err, size_t n, int code, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int fail(char *err, size_t n, int code, const char *label, const char *fmt, ...)
{
    if (err && n) {
        int k = snprintf(err, n, "%s: ", label ? label : "<buffer>");
        if (k >= 0 && (size_t)k < n) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + k, n - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return code;
}

const char *te_npy_descr(te_dtype dtype)
{
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].dtype == dtype)
            return k_types[i].descr;
    return NULL;
}

void te_npy_array_free(te_npy_array *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---- The header dict --------------------------------------------------------------------- */

typedef struct hparse {
    const char *s, *end;
} hparse;

static void skip_ws(hparse *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static int eat(hparse *p, char c)
{
    skip_ws(p);
    if (p->s < p->end && *p->s == c) {
        p->s++;
        return 1;
    }
    return 0;
}

/* A quoted string into out (at most n - 1 characters); 0 when there is none. */
static int read_str(hparse *p, char *out, size_t n)
{
    skip_ws(p);
    if (p->s >= p->end || (*p->s != '\'' && *p->s != '"'))
        return 0;
    char q = *p->s++;
    size_t k = 0;
    while (p->s < p->end && *p->s != q) {
        if (k + 1 >= n)
            return 0;
        out[k++] = *p->s++;
    }
    if (p->s >= p->end)
        return 0;
    p->s++;
    out[k] = 0;
    return 1;
}

static int read_word(hparse *p, const char *w)
{
    skip_ws(p);
    size_t n = strlen(w);
    if ((size_t)(p->end - p->s) >= n && !memcmp(p->s, w, n)) {
        p->s += n;
        return 1;
    }
    return 0;
}

typedef struct npy_header {
    char descr[32];
    int fortran;
    int ndim;
    int64_t shape[TE_MAX_DIMS];
    int have_descr, have_fortran, have_shape;
} npy_header;

/* The shape tuple: "()", "(5,)", "(2, 3)"; -1 and a message on error. */
static int read_shape(hparse *p, npy_header *h, char *why, size_t nwhy)
{
    if (!eat(p, '('))
        return snprintf(why, nwhy, "'shape' is not a tuple"), -1;
    h->ndim = 0;
    for (;;) {
        if (eat(p, ')'))
            return 0;
        skip_ws(p);
        if (p->s >= p->end || *p->s < '0' || *p->s > '9')
            return snprintf(why, nwhy, "'shape' holds something other than non-negative integers"),
                   -1;
        int64_t v = 0;
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return snprintf(why, nwhy, "an extent of 'shape' is too large"), -1;
            v = v * 10 + (*p->s++ - '0');
        }
        if (p->s < p->end && *p->s == 'L') /* Python 2's long literals */
            p->s++;
        if (h->ndim == TE_MAX_DIMS)
            return snprintf(why, nwhy, "'shape' has more than %d dimensions", TE_MAX_DIMS), -1;
        h->shape[h->ndim++] = v;
        if (eat(p, ')'))
            return 0;
        if (!eat(p, ','))
            return snprintf(why, nwhy, "'shape' is not a tuple of integers"), -1;
    }
}

static int parse_dict(const char *text, size_t n, npy_header *h, char *why, size_t nwhy)
{
    hparse p = {text, text + n};
    memset(h, 0, sizeof *h);
    if (!eat(&p, '{'))
        return snprintf(why, nwhy, "the header is not a dict literal"), -1;
    for (;;) {
        if (eat(&p, '}'))
            break;
        char key[32];
        if (!read_str(&p, key, sizeof key) || !eat(&p, ':'))
            return snprintf(why, nwhy, "the header is not a dict of quoted keys"), -1;
        if (!strcmp(key, "descr")) {
            skip_ws(&p);
            if (p.s < p.end && (*p.s == '[' || *p.s == '('))
                return snprintf(why, nwhy, "structured dtypes are not supported"), -1;
            if (!read_str(&p, h->descr, sizeof h->descr))
                return snprintf(why, nwhy, "'descr' is not a string"), -1;
            h->have_descr = 1;
        } else if (!strcmp(key, "fortran_order")) {
            if (read_word(&p, "True"))
                h->fortran = 1;
            else if (read_word(&p, "False"))
                h->fortran = 0;
            else
                return snprintf(why, nwhy, "'fortran_order' is not True or False"), -1;
            h->have_fortran = 1;
        } else if (!strcmp(key, "shape")) {
            if (read_shape(&p, h, why, nwhy))
                return -1;
            h->have_shape = 1;
        } else {
            return snprintf(why, nwhy, "unexpected key '%s' in the header", key), -1;
        }
        if (eat(&p, '}'))
            break;
        if (!eat(&p, ','))
            return snprintf(why, nwhy, "the header dict is malformed"), -1;
    }
    skip_ws(&p);
    if (p.s != p.end)
        return snprintf(why, nwhy, "text after the header dict"), -1;
    if (!h->have_descr || !h->have_fortran || !h->have_shape)
        return snprintf(why, nwhy, "the header lacks '%s'",
                        !h->have_descr     ? "descr"
                        : !h->have_fortran ? "fortran_order"
                                           : "shape"),
               -1;
    return 0;
}

/* Checks the preamble of buf (n bytes available): on success *hlen receives the header's
 * length and *hoff the header's offset. */
static int parse_preamble(const unsigned char *buf, size_t n, const char *label, size_t *hoff,
                          size_t *hlen, char *err, size_t errsize)
{
    static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (n < 6 || memcmp(buf, magic, 6))
        return fail(err, errsize, TE_ERR_CORRUPT, label,
                    "not a .npy file (no \\x93NUMPY magic at the start)");
    if (n < 8)
        return fail(err, errsize, TE_ERR_CORRUPT, label, "truncated before the version");
    int major = buf[6], minor = buf[7];
    if (major < 1 || major > 3 || minor != 0)
        return fail(err, errsize, TE_ERR_UNSUPPORTED, label,
                    ".npy format version %d.%d is not supported (1.0, 2.0, 3.0 are)", major, minor);
    size_t lenbytes = major == 1 ? 2 : 4;
    if (n < 6 + 2 + lenbytes)
        return fail(err, errsize, TE_ERR_CORRUPT, label, "truncated in the header length");
    size_t len = (size_t)buf[8] | (size_t)buf[9] << 8;
    if (lenbytes == 4)
        len |= (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    if (len > NPY_MAX_HEADER)
        return fail(err, errsize, TE_ERR_CORRUPT, label,
                    "the header claims %zu bytes (more than the %u allowed)", len, NPY_MAX_HEADER);
    *hoff = 8 + lenbytes;
    *hlen = len;
    return TE_OK;
}

/* Parses the header text and fills *out's dtype and shape; *out->data stays NULL. data_bytes
 * is what the file holds after the header. */
static int parse_header(const char *text, size_t len, size_t data_bytes, const char *label,
                        te_npy_array *out, char *err, size_t errsize)
{
    npy_header h;
    char why[160];
    if (parse_dict(text, len, &h, why, sizeof why))
        return fail(err, errsize, TE_ERR_CORRUPT, label, "bad header: %s", why);
    if (h.fortran)
        return fail(err, errsize, TE_ERR_UNSUPPORTED, label,
                    "Fortran-order arrays are not supported (save with np.ascontiguousarray)");
    int found = -1;
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        const char *d = k_types[i].descr;
        /* One-byte types are byte-order free: numpy writes '|', accept '<' and '=' too. */
        if (!strcmp(h.descr, d) || (d[0] == '|' && (h.descr[0] == '<' || h.descr[0] == '=') &&
                                    !strcmp(h.descr + 1, d + 1)))
            found = (int)i;
    }
    if (found < 0) {
        if (h.descr[0] == '>' || (h.descr[0] == '!'))
            return fail(err, errsize, TE_ERR_UNSUPPORTED, label,
                        "big-endian data ('%s') is not supported (save with "
                        "arr.astype(arr.dtype.newbyteorder('<')))",
                        h.descr);
        return fail(err, errsize, TE_ERR_UNSUPPORTED, label,
                    "dtype '%s' is not supported (<f4, <f8, <i8, <i4, |b1, |u1, |i1 are)", h.descr);
    }
    out->dtype = k_types[found].dtype;
    out->ndim = h.ndim;
    int64_t numel = 1;
    size_t esize = te_dtype_size(out->dtype);
    int over = 0;
    for (int d = 0; d < h.ndim; d++) {
        out->shape[d] = h.shape[d];
        if (h.shape[d] && numel > INT64_MAX / h.shape[d])
            over = 1;
        else
            numel *= h.shape[d];
    }
    if (over || (uint64_t)numel > SIZE_MAX / esize)
        return fail(err, errsize, TE_ERR_CORRUPT, label,
                    "the header's shape claims more elements than any file can hold");
    out->numel = numel;
    out->nbytes = (size_t)numel * esize;
    if (out->nbytes != data_bytes)
        return fail(err, errsize, TE_ERR_CORRUPT, label,
                    "the header's shape claims %zu bytes of data but the file holds %zu",
                    out->nbytes, data_bytes);
    return TE_OK;
}

int te_npy_read_buffer(const void *buf, size_t size, const char *label, te_npy_array *out,
                       char *err, size_t errsize)
{
    if (!out || (!buf && size))
        return fail(err, errsize, TE_ERR_ARG, label, "bad arguments");
    memset(out, 0, sizeof *out);
    if (err && errsize)
        err[0] = 0;
    const unsigned char *b = buf;
    size_t hoff, hlen;
    int rc = parse_preamble(b, size, label, &hoff, &hlen, err, errsize);
    if (rc)
        return rc;
    if (size - hoff < hlen)
        return fail(err, errsize, TE_ERR_CORRUPT, label,
                    "truncated: the header claims %zu bytes, %zu follow", hlen, size - hoff);
    rc = parse_header((const char *)b + hoff, hlen, size - hoff - hlen, label, out, err, errsize);
    if (rc) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->data = malloc(out->nbytes ? out->nbytes : 1);
    if (!out->data) {
        memset(out, 0, sizeof *out);
        return fail(err, errsize, TE_ERR_NOMEM, label, "out of memory");
    }
    memcpy(out->data, b + hoff + hlen, out->nbytes);
    return TE_OK;
}

int te_npy_read(const char *path, te_npy_array *out, char *err, size_t errsize)
{
    if (!path || !out)
        return fail(err, errsize, TE_ERR_ARG, path, "bad arguments");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(err, errsize, TE_ERR_IO, path, "cannot open: %s", strerror(errno));
    long fsize = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        fsize = ftell(f);
    if (fsize < 0 || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        return fail(err, errsize, TE_ERR_IO, path, "cannot read: not a regular file");
    }
    unsigned char pre[12];
    size_t got = fread(pre, 1, sizeof pre, f);
    size_t hoff, hlen;
    int rc = parse_preamble(pre, got, path, &hoff, &hlen, err, errsize);
    if (rc) {
        fclose(f);
        return rc;
    }
    if ((size_t)fsize - hoff < hlen) {
        fclose(f);
        return fail(err, errsize, TE_ERR_CORRUPT, path,
                    "truncated: the header claims %zu bytes, %zu follow", hlen,
                    (size_t)fsize - hoff);
    }
    char *text = malloc(hlen + 1);
    if (!text || fseek(f, (long)hoff, SEEK_SET) || fread(text, 1, hlen, f) != hlen) {
        rc = text ? fail(err, errsize, TE_ERR_IO, path, "cannot read the header")
                  : fail(err, errsize, TE_ERR_NOMEM, path, "out of memory");
        free(text);
        fclose(f);
        return rc;
    }
    rc = parse_header(text, hlen, (size_t)fsize - hoff - hlen, path, out, err, errsize);
    free(text);
    if (!rc) {
        out->data = malloc(out->nbytes ? out->nbytes : 1);
        if (!out->data)
            rc = fail(err, errsize, TE_ERR_NOMEM, path, "out of memory");
        else if (fread(out->data, 1, out->nbytes, f) != out->nbytes)
            rc = fail(err, errsize, TE_ERR_IO, path, "cannot read the data");
    }
    fclose(f);
    if (rc)
        te_npy_array_free(out);
    return rc;
}

int te_npy_write(const char *path, te_dtype dtype, int ndim, const int64_t *shape, const void *data,
                 char *err, size_t errsize)
{
    const char *descr = te_npy_descr(dtype);
    if (!path || ndim < 0 || ndim > TE_MAX_DIMS || (ndim && !shape))
        return fail(err, errsize, TE_ERR_ARG, path, "bad arguments");
    if (!descr)
        return fail(err, errsize, TE_ERR_ARG, path, "dtype %s has no .npy type here",
                    te_dtype_str(dtype));
    int64_t numel = 1;
    char dict[512];
    int k =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return fail(err, errsize, TE_ERR_ARG, path, "extent %d is negative", d);
        numel *= shape[d];
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%s%lld", d ? ", " : "",
                      (long long)shape[d]);
    }
    k += snprintf(dict + k, sizeof dict - (size_t)k, "%s), }", ndim == 1 ? "," : "");
    size_t nbytes = (size_t)numel * te_dtype_size(dtype);
    if (nbytes && !data)
        return fail(err, errsize, TE_ERR_ARG, path, "no data");
    /* Version 1.0: 10-byte preamble; header padded with spaces to a multiple of 64, then '\n'. */
    size_t total = 10 + (size_t)k + 1;
    total = (total + 63) / 64 * 64;
    size_t hlen = total - 10;
    unsigned char pre[10] = {0x93,
                             'N',
                             'U',
                             'M',
                             'P',
                             'Y',
                             1,
                             0,
                             (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    char pad[512 + 64];
    memcpy(pad, dict, (size_t)k);
    memset(pad + k, ' ', hlen - (size_t)k - 1);
    pad[hlen - 1] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f)
        return fail(err, errsize, TE_ERR_IO, path, "cannot create: %s", strerror(errno));
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(pad, 1, hlen, f) == hlen &&
             (!nbytes || fwrite(data, 1, nbytes, f) == nbytes);
    if (fclose(f))
        ok = 0;
    if (!ok) {
        remove(path);
        return fail(err, errsize, TE_ERR_IO, path, "write failed: %s", strerror(errno));
    }
    return TE_OK;
}
