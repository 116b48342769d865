/*
 * dmuon/version.h — the dmuon release version.
 */
#ifndef DMUON_VERSION_H
#define DMUON_VERSION_H

/* Version of this dmuon build (semantic versioning: major.minor.patch). */
#define DMUON_VERSION "0.1.0"

/* DMUON_VERSION of the library linked at run time (may differ from the
 * header a program was compiled with when libdmuon is shared). */
const char *dmuon_version(void);

#endif
