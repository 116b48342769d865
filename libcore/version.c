/*
 * version.c — the library's version string (DMUON_VERSION at build time).
 */
#include "dmuon/version.h"

const char *dmuon_version(void) { return DMUON_VERSION; }
