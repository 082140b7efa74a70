/*
 * tests/install/outside.c - a program outside the source tree, built only from what
 * `cmake --install` put in a prefix (pkg-config --cflags --libs comem).
 *
 * It starts a coordinator on a simulated card, joins it, registers a holder
 * and an entry, is admitted for 1 GiB, reads the shared-memory view and the
 * status snapshot, and checks each figure it can predict.
 */
#include <comem/calc.h> /* every public header compiles from the installed tree alone */
#include <comem/comem.h>
#include <comem/pager.h>
#include <comem/simcard.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                                \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            fprintf(stderr, "outside: %s:%d: %s failed\n", __FILE__, __LINE__, #cond);                             \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: outside SOCKET SIMSPEC\n");
        return 2;
    }
    const int64_t gib = (int64_t)1 << 30;
    comem_coord *coord = NULL;
    CHECK(comem_coord_start(argv[1], argv[2], &coord) == COMEM_OK);
    comem_client *c = NULL;
    CHECK(comem_client_open(argv[1], COMEM_CLIENT_WORKER, "outside", -1, COMEM_OPEN_NO_LOCAL, &c) == COMEM_OK);
    CHECK(comem_client_connected(c) == 1);
    uint64_t holder = 0, entry = 0, grant = 0;
    CHECK(comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder) == COMEM_OK);
    CHECK(comem_admit(c, 0, holder, gib, 0, 0, NULL, 0, 5000, &grant, NULL) == COMEM_OK && grant != 0);
    CHECK(comem_entry_add(c, holder, "unet", gib, 0, 0, &entry) == COMEM_OK);
    CHECK(comem_grant_done(c, grant, entry, gib) == COMEM_OK);
    comem_view *v = NULL;
    int64_t cap = 0;
    CHECK(comem_view_open(argv[1], &v) == COMEM_OK);
    CHECK(comem_view_read(v, 0, &cap, NULL, NULL, NULL) == COMEM_OK && cap == 8 * gib);
    comem_view_close(v);
    char *json = NULL;
    CHECK(comem_status_json(c, &json) == COMEM_OK && strstr(json, "\"schema\":1") && strstr(json, "\"unet\""));
    comem_free(json);
    printf("outside: %s ok\n", comem_status_str(COMEM_OK));
    comem_client_close(c);
    comem_coord_stop(coord);
    return 0;
}
