/* Status codes, dtype facts and the version string. */
#include "tessera/status.h"

#include <string.h>

const char *te_status_str(int status)
{
    switch (status) {
#define TE__STATUS_CASE(name, code, str)                                                           \
    case code:                                                                                     \
        return str;
        TE_STATUS_MAP(TE__STATUS_CASE)
#undef TE__STATUS_CASE
    default:
        return "unknown status";
    }
}

static const struct {
    const char *name, *ctype;
    size_t size;
} dtype_info[TE_DTYPE_COUNT] = {
#define TE__DTYPE_ROW(name, str, ctype, size) {str, ctype, size},
    TE_DTYPE_MAP(TE__DTYPE_ROW)
#undef TE__DTYPE_ROW
};

const char *te_dtype_str(te_dtype dtype)
{
    return (unsigned)dtype < TE_DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

const char *te_dtype_ctype(te_dtype dtype)
{
    return (unsigned)dtype < TE_DTYPE_COUNT ? dtype_info[dtype].ctype : NULL;
}

size_t te_dtype_size(te_dtype dtype)
{
    return (unsigned)dtype < TE_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

int te_dtype_parse(const char *name, te_dtype *out)
{
    for (int i = 0; name && i < TE_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_info[i].name) == 0) {
            *out = (te_dtype)i;
            return TE_OK;
        }
    }
    return TE_ERR_ARG;
}

int te_dtype_is_float(te_dtype dtype) { return dtype == TE_F32 || dtype == TE_F64; }

int te_dtype_is_int(te_dtype dtype)
{
    return (unsigned)dtype < TE_DTYPE_COUNT && !te_dtype_is_float(dtype);
}

const char *te_version(void) { return TE_VERSION; }
