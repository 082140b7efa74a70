/*
 * tools/comemd/metrics.h - `comemd --metrics PATH`: the Prometheus text file, kept current.
 *
 * A thread of the daemon joins its own coordinator as a tool (one observer
 * session, "comemd-metrics", which the metrics themselves leave out), takes a
 * status snapshot every interval and rewrites PATH atomically (tools/common/prom.c):
 * node_exporter's textfile collector convention, so a scrape never reads half a
 * file. When the daemon stops the file is rewritten once more with comem_up 0.
 */
#ifndef COMEM_COMEMD_METRICS_H
#define COMEM_COMEMD_METRICS_H

typedef struct metrics_writer metrics_writer;

/* Starts the writer for the coordinator at socket_path; NULL (logged) when the thread cannot start. */
metrics_writer *metrics_writer_start(const char *socket_path, const char *path, double interval_s);

/* Stops the thread, writes comem_up 0 to the file, frees. Call before the coordinator is destroyed. */
void metrics_writer_stop(metrics_writer *m);

#endif
