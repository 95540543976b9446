/* Shared by the graph commands (`tessera fuse`, `tessera run`, `tessera tune --graph`):
 * finding the shipped rules, loading and fusing a graph, and the fused groups as tuning tasks. */
#ifndef TESSERA_TOOLS_GRAPH_CLI_H
#define TESSERA_TOOLS_GRAPH_CLI_H

#include <stddef.h>

#include "tessera/graph.h"
#include "tessera/tuner.h"

/* The shipped rules: $TESSERA_RULES, then rules/cpu.rules beside or above the executable
 * (build trees), then the install prefix's share/tessera. 1 when found (path in out). */
int te_cli_default_rules(char *out, size_t n);

/* A graph loaded and fused with the rules (rules_path NULL: the shipped ones; no_rules: the
 * generic fusion only), optionally optimized first. */
typedef struct te_cli_fused {
    te_graph *g;
    te_fuse_rules *rules;
    te_fuse_plan *plan;
    char rules_path[4160];
} te_cli_fused;

/* The precision graphs are run in (`--precision`, one option of run, tune, fuse, gen and bench
 * --graph): f32 as written, or bf16 (te_graph_lower_bf16 after the other passes: opt-in, the
 * results change by bf16 rounding). */
typedef enum te_cli_precision { TE_CLI_PRECISION_F32, TE_CLI_PRECISION_BF16 } te_cli_precision;

/* Parses --precision's value ("f32" or "bf16") into *out. 0, or 2 (bad usage) after printing
 * "tessera CMD: --precision takes f32 or bf16, not 'VALUE'". */
int te_cli_precision_parse(const char *cmd, const char *value, te_cli_precision *out);
/* Applies prec to g: for bf16, te_graph_lower_bf16 for the host, one line per matmul node to log
 * (may be NULL). 0, or 1 after printing why ("this CPU has no bf16 dot product ..." when the
 * host lacks AVX-512 BF16 and AMX-BF16: never a silent f32 run). */
int te_cli_apply_precision(const char *cmd, te_graph *g, te_cli_precision prec, FILE *log);

/* 1 when path names an ONNX model (ends with .onnx), else 0 (a graph's text form). */
int te_cli_is_model(const char *path);
/* Fills *out; on failure prints "tessera <cmd>: <message>" to stderr, frees what it made and
 * returns 1. A path ending in .onnx is imported (te_graph_from_onnx), always optimized. The
 * graph is lowered to prec after the passes (te_cli_apply_precision, its log to stderr). */
int te_cli_fused_load(const char *cmd, const char *graph_path, const char *rules_path, int no_rules,
                      int optimize, te_cli_precision prec, te_cli_fused *out);
/* te_cli_fused_load with ONNX import options (shapes: "batch=1,x=1x3x8x8", NULL for none);
 * shapes given for a graph text file is bad usage: returns 2 after printing why. */
int te_cli_fused_load_model(const char *cmd, const char *path, const char *shapes,
                            const char *rules_path, int no_rules, int optimize,
                            te_cli_precision prec, te_cli_fused *out);
void te_cli_fused_free(te_cli_fused *f);
/* Imports the model (or reads the graph file) at path and, for models always, else with
 * optimize, runs the graph passes and the int8 lowering for the host, logging each pass to log
 * (may be NULL): the graph te_cli_fused_load_model fuses, before the precision is applied (so
 * also the f32 graph a bf16 run is checked against). *out: free with te_graph_free. 0, or 1
 * after printing the error prefixed with "tessera CMD: ". */
int te_cli_graph_load(const char *cmd, const char *path, const char *shapes, int optimize,
                      FILE *log, te_graph **out);

/* The fused groups of a graph as tuning tasks, deduplicated by workload key (a key met k
 * times gets weight k). The expressions live in contexts owned by the list, which must outlive
 * every tuner they were added to. */
typedef struct te_cli_graph_tasks te_cli_graph_tasks;

/* Loads and fuses graph_path and builds every group's expression; NULL after printing the
 * error ("tessera <cmd>: ..."). */
te_cli_graph_tasks *te_cli_graph_tasks_load(const char *cmd, const char *graph_path,
                                            const char *rules_path);
/* The same for a graph or an ONNX model (te_cli_fused_load_model's shapes); optimize runs
 * te_graph_optimize on a graph in the text form first (models are always optimized). */
te_cli_graph_tasks *te_cli_graph_tasks_load_model(const char *cmd, const char *path,
                                                  const char *shapes, const char *rules_path,
                                                  int optimize, te_cli_precision prec);
/* Adds the distinct tasks to t (te_tuner_add_expr). TE_OK or the tuner's status. */
int te_cli_graph_tasks_add(const te_cli_graph_tasks *l, te_tuner *t);
/* Number of groups (views included), of distinct workloads, and of views (reshapes sharing
 * their input's storage, te_fuse_group.view: no kernel, so no task). */
int te_cli_graph_tasks_groups(const te_cli_graph_tasks *l);
int te_cli_graph_tasks_distinct(const te_cli_graph_tasks *l);
int te_cli_graph_tasks_views(const te_cli_graph_tasks *l);
/* The loaded and fused graph the tasks came from (owned by l). */
const te_cli_fused *te_cli_graph_tasks_fused(const te_cli_graph_tasks *l);
void te_cli_graph_tasks_free(te_cli_graph_tasks *l);

/* The float64 reference of every group output of a fused graph, evaluated once before the
 * run and kept (a group-by-group --check evaluated the graph's prefix again for each group:
 * quadratic in the depth, minutes for a 6-layer BERT). */
typedef struct te_cli_refs te_cli_refs;

/* Evaluates the reference of every output of p's groups on the input data `in` (one pointer
 * per graph input of g, as te_graph_run takes them). ref (may be NULL) is the f32 graph a bf16
 * lowering of g started from: values it has too (same name and size) come from its reference,
 * the others (made by the lowering) from g's. Returns the references (free with
 * te_cli_refs_free), or NULL after printing the error ("tessera <cmd>: ..."). */
te_cli_refs *te_cli_refs_create(const char *cmd, te_graph *g, te_graph *ref, const te_fuse_plan *p,
                                const void *const *in);
/* Compares got (value v of g, in v's dtype) with v's reference: the largest relative error
 * |x - want| / max(1, |want|) in *worst (NaN counts as infinitely wrong) and the reference's
 * root mean square in *rms (for dtype-derived bounds). TE_OK, or TE_ERR_ARG when v was not a
 * group output (no reference). */
int te_cli_refs_compare(const te_cli_refs *r, int v, const void *got, double *worst, double *rms);
/* Group gi's own error, while te_graph_run_each's callback for it runs: its expression
 * evaluated in float64 from the f32 data it actually read (te_reference_eval; constant weights
 * it reads packed are packed here), against what it wrote; the largest relative error as
 * te_cli_refs_compare measures it, over its outputs, in *worst. A group far downstream inherits
 * the fp32 rounding of everything before it, which the whole-graph reference counts against it
 * (a Q K^T of 64 products with cancellation: 3e-5); this error is the group's alone. TE_OK;
 * TE_ERR_UNSUPPORTED, silently, for a group with other dtypes than f32; another status after
 * printing the error ("tessera <cmd>: ..."). */
int te_cli_group_own_error(const char *cmd, te_graph *g, const te_fuse_plan *p, te_graph_exec *e,
                           int gi, double *worst);
void te_cli_refs_free(te_cli_refs *r);

#endif
