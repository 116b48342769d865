/* Entry points of dmuon-verify's check families (argv[0] is the family). */
#ifndef DMUON_TOOLS_VERIFY_H
#define DMUON_TOOLS_VERIFY_H
int verify_ns_main(int argc, char **argv);    /* ns.c   */
int verify_plan_main(int argc, char **argv);  /* plan.c */
int verify_ops_main(int argc, char **argv);   /* ops.c  */
#endif
