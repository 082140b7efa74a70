/*
 * tools/comem/release.c - `comem release`: ask holders to give memory back, now, with receipts.
 *
 *   comem release (--holder NAME | --pid PID | --all | --process NAME | --entry ID)
 *                 [--device N] [--bytes SIZE] [--timeout SECONDS] [--socket PATH] [--json]
 *
 * A direct call, independent of any workflow (user scenario F19: an unload node
 * tied to the graph may never run). It reads the coordinator's snapshot, picks
 * the entries of the named holders (every holder of that name, in any process),
 * of the process with that pid or name, of one entry, or of everyone (--all),
 * on one device or all, and asks their holders through the coordinator
 * (comem_ask_release), largest resident first, until SIZE bytes came back (all
 * of them without --bytes). Each receipt is what came off its entry as the
 * coordinator counts it (docs/protocol.md, RECEIPT), never what the holder
 * claims: a holder that says it freed more than its entry held, or frees
 * nothing and says otherwise, adds only what came off to the total, so --bytes
 * goes on asking the next entry rather than stopping on a claim.
 * A holder that is computing answers busy and keeps its bytes; that is
 * reported, not hidden. Holders that do not answer release asks are skipped
 * and listed.
 *
 * Exit status: 0 when something came back or nothing was held, 1 when every
 * ask was refused (busy, not answering), nothing matched, or no coordinator
 * answers, 2 for bad arguments.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/size.h"
#include "cmds.h"
#include "comem/comem.h"
#include "common/args.h"
#include "common/jsonout.h"
#include "common/snapshot.h"

enum { F_SOCKET, F_HOLDER, F_PID, F_ALL, F_PROCESS, F_ENTRY, F_DEVICE, F_BYTES, F_TIMEOUT, F_JSON, F_PRETTY, N_SPECS };
static const arg_spec k_specs[N_SPECS] = {
    [F_SOCKET] = {"socket", ARG_STRING, false}, [F_HOLDER] = {"holder", ARG_STRING, false},
    [F_PID] = {"pid", ARG_NUMBER, false},       [F_ALL] = {"all", ARG_FLAG, false},
    [F_PROCESS] = {"process", ARG_STRING, false}, [F_ENTRY] = {"entry", ARG_STRING, false},
    [F_DEVICE] = {"device", ARG_NUMBER, false}, [F_BYTES] = {"bytes", ARG_SIZE, false},
    [F_TIMEOUT] = {"timeout", ARG_STRING, false}, [F_JSON] = {"json", ARG_FLAG, false},
    [F_PRETTY] = {"pretty", ARG_FLAG, false},
};
static const arg_command k_cmd = {
    "comem release",
    "usage: comem release (--holder NAME | --pid PID | --all | --process NAME | --entry ID)\n"
    "                     [--device N] [--bytes SIZE] [--timeout SECONDS] [--socket PATH] [--json]\n"
    "  Asks holders, through the coordinator, to release SIZE bytes (everything without --bytes)\n"
    "  now, largest entry first, and prints each receipt: the bytes that came off the entry.\n"
    "  --holder NAME   every holder of that name, in any process\n"
    "  --pid PID       every holder of that process      --process NAME  the same, by name\n"
    "  --all           every holder that answers release asks\n"
    "  --entry ID      one entry (its id as `comem status --json` lists it)\n"
    "  --device N      only entries on device N\n"
    "  Exit status: 0 something came back (or nothing was held), 1 nothing could be released\n"
    "  (busy, not answering, no match, no coordinator), 2 bad arguments.\n",
    k_specs, N_SPECS,
};

#define MAX_TARGETS 1024

typedef struct target {
    uint64_t id;
    char entry[24], name[128], holder[128], process[128];
    int pid, device;
    int64_t resident;
} target;

typedef struct selection {
    const char *holder, *process, *entry;
    long pid;   /* -1: any */
    int device; /* -1: any */
    bool all;
} selection;


static int by_resident(const void *x, const void *y)
{
    const target *a = x, *b = y;
    return a->resident < b->resident ? 1 : a->resident > b->resident ? -1 : 0;
}

static bool holder_answers_release(json_object *h)
{
    json_object *ans = jget(h, "answers");
    for (size_t i = 0; i < jlen(ans); i++)
        if (!strcmp(json_object_get_string(json_object_array_get_idx(ans, i)), "release"))
            return true;
    return false;
}

/*
 * The entries the selection names that hold bytes, largest first. *matched counts the holders (or
 * the entry) the selection named; *deaf the named holders that do not answer release asks.
 */
static size_t pick(json_object *root, const selection *sel, target *out, size_t cap, int *matched, int *deaf)
{
    size_t n = 0;
    *matched = *deaf = 0;
    json_object *devs = jget(root, "devices");
    for (size_t d = 0; d < jlen(devs); d++) {
        json_object *dv = json_object_array_get_idx(devs, d);
        int dev = (int)json_object_get_int(jget(dv, "index"));
        if (sel->device >= 0 && dev != sel->device)
            continue;
        json_object *ps = jget(dv, "processes");
        for (size_t i = 0; i < jlen(ps); i++) {
            json_object *p = json_object_array_get_idx(ps, i);
            int pid = (int)json_object_get_int(jget(p, "pid"));
            if ((sel->process && strcmp(jget_str(p, "name"), sel->process) != 0) || (sel->pid >= 0 && pid != sel->pid))
                continue;
            json_object *hs = jget(p, "holders");
            for (size_t k = 0; k < jlen(hs); k++) {
                json_object *h = json_object_array_get_idx(hs, k), *es = jget(h, "entries");
                if (sel->holder && strcmp(jget_str(h, "name"), sel->holder) != 0)
                    continue;
                bool named = !sel->entry;
                bool answers = holder_answers_release(h);
                for (size_t e = 0; e < jlen(es); e++) {
                    json_object *x = json_object_array_get_idx(es, e);
                    if (sel->entry && strcmp(jget_str(x, "id"), sel->entry) != 0)
                        continue;
                    named = true;
                    int64_t res = json_object_get_int64(jget(x, "resident"));
                    if (res <= 0 || !answers || n >= cap)
                        continue;
                    target *t = &out[n++];
                    t->id = strtoull(jget_str(x, "id"), NULL, 16);
                    snprintf(t->entry, sizeof t->entry, "%s", jget_str(x, "id"));
                    snprintf(t->name, sizeof t->name, "%s", jget_str(x, "name"));
                    snprintf(t->holder, sizeof t->holder, "%s", jget_str(h, "name"));
                    snprintf(t->process, sizeof t->process, "%s", jget_str(p, "name"));
                    t->pid = pid;
                    t->device = dev;
                    t->resident = res;
                }
                if (named) {
                    (*matched)++;
                    if (!answers)
                        (*deaf)++;
                }
            }
        }
    }
    qsort(out, n, sizeof *out, by_resident);
    return n;
}

static json_object *jnull_or_int(bool set, int64_t v) { return set ? jint(v) : NULL; }

int cmd_release(int argc, char **argv)
{
    arg_value v[N_SPECS];
    int rc = args_begin(&k_cmd, argc, argv, v);
    if (rc != ARGS_GO)
        return rc;
    char err[640];
    int modes = v[F_HOLDER].set + v[F_PID].set + v[F_ALL].set + v[F_PROCESS].set + v[F_ENTRY].set;
    if (modes != 1)
        return args_fail(&k_cmd, v, 2,
                         "name one target: --holder NAME, --pid PID, --all, --process NAME or --entry ID");
    int timeout_ms = snapshot_timeout_ms(v[F_TIMEOUT].set ? v[F_TIMEOUT].str : NULL, err, sizeof err);
    if (timeout_ms < 0)
        return args_fail(&k_cmd, v, 2, "%s", err);
    selection sel = {
        .holder = v[F_HOLDER].set ? v[F_HOLDER].str : NULL,
        .process = v[F_PROCESS].set ? v[F_PROCESS].str : NULL,
        .entry = v[F_ENTRY].set ? v[F_ENTRY].str : NULL,
        .pid = v[F_PID].set ? (long)v[F_PID].num : -1,
        .device = v[F_DEVICE].set ? (int)v[F_DEVICE].num : -1,
        .all = v[F_ALL].set,
    };
    int64_t want = v[F_BYTES].set ? (int64_t)v[F_BYTES].num : -1;
    bool json = v[F_JSON].set;
    comem_client *c = NULL;
    json_object *root = NULL;
    if (snapshot_connect(v[F_SOCKET].set ? v[F_SOCKET].str : NULL, "comem-release", timeout_ms, &c, err,
                         sizeof err) == 0)
        root = snapshot_read(c, err, sizeof err);
    if (!root) {
        if (c)
            comem_client_close(c);
        return args_fail(&k_cmd, v, 1, "%s", err);
    }
    static target ts[MAX_TARGETS];
    int matched = 0, deaf = 0;
    size_t n = pick(root, &sel, ts, MAX_TARGETS, &matched, &deaf);
    json_object_put(root);
    const char *what = sel.holder ? "holder" : sel.process ? "process" : sel.entry ? "entry" : sel.all ? NULL : "pid";
    char pidtext[24];
    snprintf(pidtext, sizeof pidtext, "%ld", sel.pid);
    const char *name = sel.holder ? sel.holder : sel.process ? sel.process : sel.entry ? sel.entry : pidtext;
    json_object *asks = json_object_new_array();
    int64_t freed_total = 0;
    int answered = 0;
    bool none = matched == 0 && what; /* named something the ledger does not hold: nothing is asked */
    if (none)
        fprintf(stderr, "comem release: no %s '%s' in the ledger%s\n", what, name,
                sel.device >= 0 ? " on that device" : "");
    for (size_t i = 0; !none && i < n && (want < 0 || freed_total < want); i++) {
        int64_t ask = want < 0 ? -1 : want - freed_total, freed = 0, resident = 0;
        rc = comem_ask_release(c, ts[i].id, ask, timeout_ms, &freed, &resident);
        if (rc == COMEM_OK || (rc == COMEM_ENOENT && freed > 0)) {
            answered++;
            freed_total += freed;
        }
        json_object *a = json_object_new_object();
        json_object_object_add(a, "entry", json_object_new_string(ts[i].entry));
        json_object_object_add(a, "name", json_object_new_string(ts[i].name));
        json_object_object_add(a, "holder", json_object_new_string(ts[i].holder));
        json_object_object_add(a, "process", json_object_new_string(ts[i].process));
        json_object_object_add(a, "pid", jint(ts[i].pid));
        json_object_object_add(a, "device", jint(ts[i].device));
        json_object_object_add(a, "asked", jnull_or_int(ask >= 0, ask));
        json_object_object_add(a, "status", json_object_new_string(comem_status_str(rc)));
        json_object_object_add(a, "freed", jint(freed));
        json_object_object_add(a, "resident_after", jint(resident));
        json_object_array_add(asks, a);
        if (!json) {
            char b[3][32];
            printf("%-8d %-16s %-16s %-24s asked %-10s %-8s freed %-10s resident now %s\n", ts[i].pid,
                   ts[i].process, ts[i].holder, ts[i].name, ask < 0 ? "all" : comem_format_bytes(ask, b[0], 32),
                   comem_status_str(rc), comem_format_bytes(freed, b[1], 32), comem_format_bytes(resident, b[2], 32));
        }
    }
    if (json) {
        json_object *out = json_object_new_object(), *t = json_object_new_object();
        json_object_object_add(out, "schema", jint(1));
        json_object_object_add(t, "holder", sel.holder ? json_object_new_string(sel.holder) : NULL);
        json_object_object_add(t, "pid", jnull_or_int(sel.pid >= 0, sel.pid));
        json_object_object_add(t, "process", sel.process ? json_object_new_string(sel.process) : NULL);
        json_object_object_add(t, "entry", sel.entry ? json_object_new_string(sel.entry) : NULL);
        json_object_object_add(t, "all", json_object_new_boolean(sel.all));
        json_object_object_add(t, "device", jnull_or_int(sel.device >= 0, sel.device));
        json_object_object_add(out, "target", t);
        json_object_object_add(out, "asked", jnull_or_int(want >= 0, want));
        json_object_object_add(out, "freed", jint(freed_total));
        json_object_object_add(out, "answered", jint(answered));
        json_object_object_add(out, "not_answering", jint(deaf));
        json_object_object_add(out, "asks", asks);
        json_object_object_add(out, "matched", json_object_new_boolean(!none));
        jprint(out, v[F_PRETTY].set);
        cli_flush(); /* a document larger than stdout's buffer fails here, with its own reason */
        json_object_put(out);
    } else if (none) {
        json_object_put(asks);
    } else {
        char b[32];
        printf("released %s from %s%s%s (%d of %zu ask(s) answered", comem_format_bytes(freed_total, b, 32),
               what ? what : "every holder", what ? " " : "", what ? name : "", answered, n);
        if (deaf)
            printf("; %d holder(s) that do not answer release asks left alone", deaf);
        printf(")\n");
        json_object_put(asks);
    }
    comem_client_close(c);
    args_free(v, N_SPECS);
    return !none && ((n == 0 && deaf == 0) || answered > 0) ? 0 : 1;
}
