/* Placeholder until dmuon-probe lands. */
#include <stdio.h>
int main(void) { fprintf(stderr, "dmuon-probe: not built yet\n"); return 3; }
