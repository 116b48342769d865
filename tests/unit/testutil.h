/*
 * testutil.h — what several unit tests share: a scratch directory under
 * /tmp for the whole group, and the repository root ($DMUON_ROOT, set by
 * tests/run.sh; "." otherwise).  Include after <cmocka.h>.
 */
#ifndef DMUON_TESTUTIL_H
#define DMUON_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

static char tmpdir[64];
static char root[1024];

/* Group setup: creates tmpdir ("/tmp/dmuon-<tag>-" plus mkdtemp's suffix)
 * and fills root. */
static inline int testutil_setup(const char *tag)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dmuon-%s-XXXXXX", tag);
    assert_non_null(mkdtemp(tmpdir));
    const char *r = getenv("DMUON_ROOT");
    snprintf(root, sizeof root, "%s", r ? r : ".");
    return 0;
}

/* Group teardown: removes tmpdir and everything in it. */
static inline int testutil_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd);
}

#endif
