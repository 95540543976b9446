/*
 * backends/c/emit_intrin.c: tensor intrinsic calls (TE_S_INTRIN, te_tensorize) in C.
 *
 * A call passes each operand's address at the tile's origin and the strides of its free
 * dimensions; the intrinsic's function is defined once per file, after the prelude, as
 *     static __attribute__((noinline)) __attribute__((target("amx-tile,amx-bf16"))) void NAME(...)
 * { body } (the target attribute comes from the intrinsic's features, so the file compiles whatever
 * -march says; the target check at emission refuses a target that lacks them). AMX intrinsics
 * get the AMX runtime: te_amx_permit() (the Linux permission request, ARCH_REQ_XCOMP_PERM for
 * XTILEDATA, once per process), which every kernel using them calls at entry, returning -4 when
 * the kernel refuses; and te_amx_ready() (palette 1, eight tiles of 16 rows x 64 bytes: loaded
 * when the configuration in force differs, as after other code released the tiles), which the
 * intrinsics call before their first tile instruction.
 */
#include <stdio.h>
#include <string.h>

#include "backends/c/emit_impl.h"
#include "schedule/tensorize_impl.h"

/* The gcc target attribute spelling of an ISA feature ("amx_tile" -> "amx-tile",
 * "avx512_bf16" -> "avx512bf16"). */
static void gcc_feature(const char *f, size_t len, char *out, size_t n)
{
    size_t k = 0;
    bool amx = len > 4 && !strncmp(f, "amx_", 4);
    for (size_t i = 0; i < len && k + 1 < n; i++) {
        if (f[i] == '_' && !amx)
            continue;
        out[k++] = f[i] == '_' ? '-' : f[i];
    }
    out[k] = 0;
}

const char *te__c_intrin_features(const te_tensor_intrin *in) { return in->features; }

static bool needs_amx(const te_tensor_intrin *in) { return strstr(in->features, "amx_tile"); }

bool te__c_unit_uses_amx(const emitter *em)
{
    for (int i = 0; i < em->n_intrins; i++)
        if (needs_amx(em->intrins[i]))
            return true;
    return false;
}

void te__c_gen_intrin(emitter *em, const te_stmt *s)
{
    const te_tensor_intrin *in = s->u.intrin.in;
    if (in->backend != TE_BACKEND_C) {
        te__c_fail(em, TE_ERR_UNSUPPORTED, "tensor intrinsic '%s' is not a C intrinsic", in->name);
        return;
    }
    if (em->target && !te_tensor_intrin_supported(in, em->target)) {
        te__c_fail(em, TE_ERR_UNSUPPORTED,
                   "tensor intrinsic '%s' needs the CPU features %s, which the target (%s: %s) "
                   "lacks",
                   in->name, in->features, em->target->cpu_model,
                   em->target->isa[0] ? em->target->isa : "no ISA extensions");
        return;
    }
    if (s->u.intrin.overwrite && !in->c_overwrite) {
        te__c_fail(em, TE_ERR_INTERNAL, "tensor intrinsic '%s' has no overwrite form", in->name);
        return;
    }
    if (te__intrin_record(em->intrins, &em->n_intrins,
                          (int)(sizeof em->intrins / sizeof em->intrins[0]), in)) {
        te__c_fail(em, TE_ERR_UNSUPPORTED, "more than %d tensor intrinsics in one kernel",
                   em->n_intrins);
        return;
    }
    em->need_immintrin = true;
    te__c_line_start(em);
    te__sb_printf(&em->out, "%s%s(", in->name, s->u.intrin.overwrite ? "_overwrite" : "");
    for (int o = 0; o < s->u.intrin.nops; o++) {
        const te_expr *a = s->u.intrin.addr[o];
        const te_buf *b = a->u.load.buf;
        if (te__c_find_promo(em, b)) {
            te__c_fail(em, TE_ERR_INTERNAL, "buffer '%s' of an intrinsic call is in registers",
                       b->name);
            return;
        }
        te__sb_printf(&em->out, "%s&%s[", o ? ", " : "", te__c_buf_name(em, b));
        te__c_put_index(em, &em->out, b, a->u.load.n, a->u.load.idx);
        te__sb_puts(&em->out, "]");
        for (int f = 0; f < s->u.intrin.nfree[o]; f++) {
            int64_t stride = te__intrin_stride(s, o, f);
            te__sb_printf(&em->out, ", %lld", (long long)stride);
        }
    }
    if (s->u.intrin.n >= 0)
        te__sb_printf(&em->out, ", %lld", (long long)s->u.intrin.n);
    te__sb_puts(&em->out, ");\n");
}

static const char amx_runtime[] =
    "/* AMX: the Linux permission to use the tile data (once per process) and the tile\n"
    " * configuration (palette 1, eight tiles of 16 rows x 64 bytes) where it is not in force. */\n"
    "#include <sys/syscall.h>\n#include <unistd.h>\n"
    "/* Bumped by every kernel run: each thread checks the tile configuration once per run. */\n"
    "static unsigned te_amx_epoch;\n"
    "static _Thread_local unsigned te_amx_seen = ~0u;\n"
    "static int te_amx_permit(void)\n{\n"
    "    static int state; /* 0 unknown, 1 granted, -1 refused */\n"
    "    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);\n"
    "    if (!s) {\n"
    "        s = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == "
    "0\n"
    "                ? 1\n                : -1;\n"
    "        __atomic_store_n(&state, s, __ATOMIC_RELEASE);\n"
    "    }\n"
    "    __atomic_add_fetch(&te_amx_epoch, 1, __ATOMIC_RELAXED); /* a new kernel run */\n"
    "    return s > 0 ? 0 : -1;\n}\n"
    "/* Palette 1, tiles 0-7 of 16 rows x 64 bytes. Other code (oneDNN) may release or\n"
    " * reconfigure the tiles between two kernel runs: in each run, each thread compares the\n"
    " * configuration in force (sttilecfg: slow, so once per run) and reloads it. */\n"
    "static const unsigned char te_amx_cfg[64] __attribute__((aligned(64))) = {\n"
    "    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,\n"
    "    64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0,\n"
    "    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,\n"
    "    16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0};\n"
    "__attribute__((target(\"amx-tile\"))) static inline void te_amx_ready(void)\n{\n"
    "    unsigned e = __atomic_load_n(&te_amx_epoch, __ATOMIC_RELAXED);\n"
    "    if (te_amx_seen == e)\n        return;\n"
    "    unsigned char cur[64] __attribute__((aligned(64)));\n"
    "    _tile_storeconfig(cur);\n"
    "    if (memcmp(cur, te_amx_cfg, 64))\n"
    "        _tile_loadconfig(te_amx_cfg);\n"
    "    te_amx_seen = e;\n}\n";

static void emit_signature(te__sb *o, const te_tensor_intrin *in, const char *suffix)
{
    char attr[256] = "", one[64];
    size_t k = 0;
    for (const char *p = in->features; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        gcc_feature(p, l, one, sizeof one);
        if (*one)
            k += (size_t)snprintf(attr + k, sizeof attr - k, "%s%s", k ? "," : "", one);
        if (k >= sizeof attr)
            k = sizeof attr - 1;
        p = e ? e + 1 : p + l;
    }
    /* Not inlined: inlined into a tile loop with an epilogue, the accumulators competed with
     * the epilogue's hoisted constants for the 32 vector registers and were spilled inside
     * the k loop (an int8 matmul + requantize ran at 40% of the plain matmul's speed). */
    te__sb_puts(o, "static __attribute__((noinline)) ");
    if (*attr)
        te__sb_printf(o, "__attribute__((target(\"%s\"))) ", attr);
    te__sb_printf(o, "void %s%s(", in->name, suffix);
    for (int op = 0; op <= in->n_in; op++) {
        const te_tensor *X = in->ops[op];
        te__sb_printf(o, "%s%s%s *restrict %s", op ? ", " : "", op ? "const " : "",
                      te_dtype_ctype(X->dtype), X->name);
        for (int f = 0; f < in->nfree[op]; f++)
            te__sb_printf(o, ", int64_t %s_s%d", X->name, f);
    }
    if (in->var_axis >= 0)
        te__sb_puts(o, ", int64_t n");
    te__sb_puts(o, ")\n{\n");
}

void te__c_emit_intrins(const emitter *u, te__sb *o)
{
    if (!u->n_intrins)
        return;
    te__sb_puts(o, "\n/* ---- Tensor intrinsics (te_tensorize) ---- */\n");
    if (te__c_unit_uses_amx(u))
        te__sb_puts(o, amx_runtime);
    for (int i = 0; i < u->n_intrins; i++) {
        const te_tensor_intrin *in = u->intrins[i];
        bool dup = false;
        for (int j = 0; j < i && in->c_prelude; j++)
            dup |= u->intrins[j]->c_prelude && !strcmp(u->intrins[j]->c_prelude, in->c_prelude);
        if (in->c_prelude && !dup)
            te__sb_printf(o, "%s\n", in->c_prelude);
    }
    for (int i = 0; i < u->n_intrins; i++) {
        const te_tensor_intrin *in = u->intrins[i];
        te__sb_printf(o, "\n/* %s */\n", in->doc[0] ? in->doc : in->name);
        emit_signature(o, in, "");
        te__sb_printf(o, "%s}\n", in->c_update);
        if (in->c_overwrite) {
            emit_signature(o, in, "_overwrite");
            te__sb_printf(o, "%s}\n", in->c_overwrite);
        }
    }
}
