/* Entry points of dmuon-bench's families (argv[0] is the family). */
#ifndef DMUON_TOOLS_BENCH_H
#define DMUON_TOOLS_BENCH_H
int bench_ns_main(int argc, char **argv);    /* ns.c   */
int bench_plan_main(int argc, char **argv);  /* plan.c */
int bench_ops_main(int argc, char **argv);   /* ops.c  */
int bench_step_main(int argc, char **argv);  /* step.c */
int bench_predict_main(int argc, char **argv); /* predict.c */
int bench_loops_main(int argc, char **argv);   /* loops.c */
#endif
