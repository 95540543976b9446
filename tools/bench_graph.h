/* `tessera bench --graph` (tools/bench_graph.c): a fused, tuned graph against the same graph run
 * node by node on OpenBLAS and plain loops. */
#ifndef TESSERA_TOOLS_BENCH_GRAPH_H
#define TESSERA_TOOLS_BENCH_GRAPH_H

/* argv[0] is "--graph"; returns the exit status (0 ok, 1 failure or mismatch, 2 usage). */
int te_cmd_bench_graph(int argc, char **argv);

#endif
