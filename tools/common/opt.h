/*
 * tools/common/opt.h — what every dmuon tool shares on its command line:
 * one grammar for whole numbers and sizes, one range message, one --version
 * line, and the signal handling around atomic writes.  The same flag means
 * the same in every tool because every tool parses it here.
 *
 * Sizes (bytes): DIGITS [SUFFIX] [+DIGITS], SUFFIX one of
 *   k K kB KB KiB kiB  (2^10)   m M MB MiB (2^20)   g G GB GiB (2^30)
 *   t T TB TiB (2^40), letters case-insensitive.
 * Every multiple is binary (16K = 16KB = 16KiB = 16384 bytes), as in
 * nccl-tests and the OSU benchmarks; "1M+6" is 1048582 bytes.  A value that
 * does not fit in int64_t, or lies outside the caller's range, is an error
 * whose message gives the range — never clamped.
 *
 * The parsers write a one-line message "FLAG 'TEXT': expected ..." into
 * err[0..n) and return -1 on failure, 0 on success (*out set only then).
 */
#ifndef DMUON_TOOL_OPT_H
#define DMUON_TOOL_OPT_H

#include <getopt.h>
#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* A whole number (decimal, optional leading '-') in [lo, hi]. */
int tool_parse_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out,
                   char *err, size_t n);

/* A size in bytes (grammar above) in [lo, hi]. */
int tool_parse_size(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out,
                    char *err, size_t n);

/* A finite decimal number in [lo, hi]. */
int tool_parse_double(const char *flag, const char *text, double lo, double hi, double *out,
                      char *err, size_t n);

/* Writes bytes as "N B", "N KiB", "N.N MiB", ... into buf[0..n); returns buf. */
char *tool_format_size(int64_t bytes, char *buf, size_t n);

/* Prints "TOOL (dmuon) VERSION" on stdout: the --version line of every tool;
 * with --json among argv[1..argc) the JSON object {"tool": TOOL, "version":
 * VERSION} instead. */
void tool_print_version(const char *tool, int argc, char **argv);

/* The last call of every tool's main: flushes and closes standard output
 * and returns code, or 3 when a write to it failed (a full disk, /dev/full,
 * a closed pipe) after printing "TOOL: cannot write standard output: REASON"
 * on stderr — an output that did not arrive is never a success.  When the
 * run already failed (code != 0) on a write of standard output that the
 * library reported (its last error says "cannot write standard output"),
 * that was said once: code is returned without a second line. */
int tool_finish_stdout(const char *tool, int code);

/* Closes f, which the tool wrote at path ("-": standard output, flushed,
 * not closed).  Returns 0, or -1 with "cannot write 'PATH': REASON" in
 * err[0..n) when a write or the close failed.  f may be NULL (returns 0). */
int tool_close_file(FILE *f, const char *path, char *err, size_t n);

/* Bytes of memory this host can still give (MemAvailable of /proc/meminfo),
 * or -1 when unknown. */
int64_t tool_mem_available(void);

/* Refuses, before any allocation, a per-rank size the host cannot hold:
 * when factor x bytes x (ranks of world on this host) exceeds MemAvailable,
 * writes "FLAG SIZE needs at least ... on this host, which has ... available"
 * to err and returns -1 (on every rank: the answer is agreed over world).
 * factor is a lower bound of the buffers per byte of layer (a layer buffer
 * and a receive buffer: 2), so no size that fits is refused.  Collective. */
int tool_check_host_memory(MPI_Comm world, int64_t bytes, int factor, const char *flag,
                           char *err, size_t n);

/* Installs SIGINT/SIGTERM/SIGHUP handlers that remove the temporary file of
 * an atomic write in progress (dmuon_write_abandon in dmuon/io.h), then
 * terminate by the same signal as before.  Call once at start-up. */
void tool_cleanup_on_signal(void);

/* Checks, before any work, that path can be written later: its directory
 * exists, is a directory and is writable, and path itself is absent or of
 * the kind it will be (a directory when dir is true — it is replaced
 * atomically —, else a regular file: a path ending in '/' is refused), and
 * not a symbolic link to nothing.  Returns 0, or -1 with "FLAG 'PATH': the
 * directory 'D' does not exist" (or "is not a directory", "is not
 * writable", "exists and is not a ...", "expected a file name", "a
 * symbolic link to nothing") in err[0..n). */
int tool_check_output_path(const char *flag, const char *path, bool dir, char *err, size_t n);

/* Lowercases s in place (an enum value such as a variant name, which the
 * tools accept in any case and store in its canonical lower case); returns s. */
char *tool_lower(char *s);

/* For an unknown option arg ("--shardng", "--shardng=x", "-x"): writes
 * " (did you mean --sharding?)" naming the closest long option of opts (edit
 * distance at most a third of its length, at least 2) into buf[0..n), or ""
 * when none is close; returns buf. */
const char *tool_suggest_option(const char *arg, const struct option *opts, char *buf,
                                size_t n);

/* Writes into buf[0..n) what is wrong with an option getopt_long did not
 * take: "option 'ARG' needs a value" when ARG is a long option of opts, or a
 * short option of the getopt string shorts (NULL: none), that takes one
 * (given last, or before another option), else "unknown option or missing
 * value 'ARG'" and the suggestion of tool_suggest_option; returns buf. */
const char *tool_bad_option(const char *arg, const struct option *opts, const char *shorts,
                            char *buf, size_t n);

/* Prints "PROG: error: " and tool_bad_option's text on stderr: every tool's
 * message for an option getopt_long did not take. */
void tool_unknown_option(const char *prog, const char *arg, const struct option *opts);

/* Prints a failure that every rank of comm reached: "TOOL: error: MSG" once
 * (by rank 0, without its "rank N: " prefix, "(every rank)" added when
 * comm has several) when every rank's message is the same but for that
 * prefix; otherwise rank 0 prints its message and every rank whose message
 * differs from rank 0's prints its own.  Collective over comm: call it on
 * every rank, each with its own message.  A rank that waits more than
 * 10 s for the others prints its own message and aborts the job (exit
 * code), so a failure on one rank alone never hangs. */
void tool_report_error(MPI_Comm comm, const char *tool, const char *msg, int code);

/* For a tool that stops cleanly: the first SIGINT or SIGTERM stores its
 * number in *flag (the tool finishes its unit of work and looks); a second
 * one behaves as tool_cleanup_on_signal (removes a temporary file of an
 * atomic write, then terminates by that signal).  Call after MPI_Init. */
void tool_stop_on_signal(volatile sig_atomic_t *flag);

#endif
