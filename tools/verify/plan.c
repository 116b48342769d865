/*
 * dmuon-verify --plan PLAN  (or: dmuon-verify plan PLAN)
 *
 * Checks a plan file's invariants with dmuon_plan_check (coverage of every
 * Muon matrix, owners in range, byte cap unless no candidate fitted, layer
 * spreading, HSDP leaders in the owner's column, windows and segment tables,
 * recorded digests, and that re-running the assignment gives the same
 * owners), and that the strict load of libdmuon accepts it (an edited
 * summary or digest is a violation); with --model, also that the plan was made from that model.
 * Exit 0 when every check passes, 1 on a violation, 2 on unreadable input.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dmuon/io.h"
#include "dmuon/model.h"
#include "dmuon/plan.h"
#include "common/opt.h"
#include "verify.h"

static const char usage[] =
    "usage: dmuon-verify --plan PLAN [--model MODEL] [--json]\n"
    "       dmuon-verify plan PLAN [--model MODEL] [--json]\n"
    "Checks a plan file's invariants; exit 1 on any violation.\n";

int verify_plan_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"plan", required_argument, 0, 'p'}, {"model", required_argument, 0, 'm'},
        {"json", no_argument, 0, 'j'},       {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *plan = NULL, *model = NULL;
    bool json = false;
    int ch;
    opterr = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'p':
            plan = optarg;
            break;
        case 'm':
            model = optarg;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            tool_unknown_option("dmuon-verify", argv[optind - 1], opts);
            fputs(usage, stderr);
            return 2;
        }
    }
    if (!plan && optind < argc)
        plan = argv[optind++];
    if (!plan || optind < argc) {
        fprintf(stderr, "dmuon-verify: error: %s\n%s",
                plan ? "unexpected extra argument" : "no plan file given", usage);
        return 2;
    }
    dmuon_plan *p = NULL;
    dmuon_model *m = NULL;
    size_t violations = 0;
    char first[1024] = "";
    static char listed[DMUON_PLAN_CHECK_LIST * 600];   /* the check's violations, one a line */
    size_t nlisted = 0;   /* how many the check found */
    if (access(plan, F_OK) != 0) {   /* as dmuon-plan: a missing input is bad input */
        fprintf(stderr, "dmuon-verify: error: %s: no such plan file\n", plan);
        return 2;
    }
    dmuon_rc rc = dmuon_plan_load_ex(plan, DMUON_PLAN_LOAD_NO_DIGESTS, &p);
    if (rc == DMUON_ECHECK) {   /* owners out of range: a violation, not bad input */
        violations = 1;
        snprintf(first, sizeof first, "%s", dmuon_errmsg());
    } else if (rc != DMUON_OK) {
        fprintf(stderr, "dmuon-verify: error: %s\n", dmuon_errmsg());
        return dmuon_rc_exit_code(rc);
    } else {
        if (dmuon_plan_check_list(p, &violations, listed, sizeof listed) != DMUON_OK) {
            /* the check's message counts the violations too; keep the first
             * one only, so the report shows one count */
            const char *msg = dmuon_errmsg(), *f = strstr(msg, "; first: ");
            snprintf(first, sizeof first, "%s", f ? f + 9 : msg);
            nlisted = violations;
        }
        /* what libdmuon and dmuon-plan show will do with the file: the strict
         * load recomputes the digests and the summary, so an edited file
         * fails here too, not only when a trainer loads it */
        dmuon_plan *strict = NULL;
        if (dmuon_plan_load(plan, &strict) != DMUON_OK) {
            if (!violations)
                snprintf(first, sizeof first, "the plan would be refused when loaded "
                         "(libdmuon, dmuon-plan show): %s", dmuon_errmsg());
            violations++;
        }
        dmuon_plan_free(strict);
        if (model) {
            rc = dmuon_model_load(model, NULL, &m);
            if (rc != DMUON_OK) {
                fprintf(stderr, "dmuon-verify: error: %s\n", dmuon_errmsg());
                dmuon_plan_free(p);
                return dmuon_rc_exit_code(rc);
            }
            if (dmuon_plan_match_model(p, m) != DMUON_OK) {
                if (!violations)
                    snprintf(first, sizeof first, "%s", dmuon_errmsg());
                violations++;
            }
        }
    }
    size_t units = 0;
    if (p)
        dmuon_plan_units(p, &units);
    if (json) {
        dmuon_json w;
        dmuon_json_init(&w, stdout, false);
        dmuon_json_begin_object(&w);
        dmuon_json_kstr(&w, "plan", plan);
        dmuon_json_kint(&w, "units", (int64_t)units);
        dmuon_json_kint(&w, "ranks", p ? dmuon_plan_ranks(p) : 0);
        dmuon_json_kint(&w, "violations", (int64_t)violations);
        dmuon_json_kstr(&w, "first_violation", first);
        dmuon_json_kbool(&w, "ok", violations == 0);
        dmuon_json_end_object(&w);
    } else if (violations == 0) {
        printf("plan %s: %zu units on %d ranks: all invariants hold%s\n", plan, units,
               dmuon_plan_ranks(p), model ? " (and it matches the model)" : "");
    } else {
        printf("plan %s: FAILED, %zu violation%s\n", plan, violations, violations == 1 ? "" : "s");
        if (nlisted) {   /* the check's, up to DMUON_PLAN_CHECK_LIST */
            for (const char *q = listed; *q;) {
                const char *e = strchr(q, '\n');
                size_t len = e ? (size_t)(e - q) : strlen(q);
                printf("  %.*s\n", (int)len, q);
                q += len + (e ? 1 : 0);
            }
            if (nlisted > DMUON_PLAN_CHECK_LIST)
                printf("  ... and %zu more\n", nlisted - DMUON_PLAN_CHECK_LIST);
        }
        if (violations > nlisted)   /* the strict load or the model match */
            printf("  %s\n", nlisted ? "the plan would also be refused when loaded, or not match the model"
                                      : first);
    }
    dmuon_plan_free(p);
    dmuon_model_free(m);
    return violations ? 1 : 0;
}
