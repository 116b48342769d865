/* Placeholder until dmuon-plan lands. */
#include <stdio.h>
int main(void) { fprintf(stderr, "dmuon-plan: not built yet\n"); return 3; }
