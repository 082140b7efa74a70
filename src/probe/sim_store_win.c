/* probe/sim_store_win.c - a simulated card's memory on Windows (probe/sim_store.h): a named section of this user's. */
#include "probe/sim_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <windows.h>

#include "base/log.h"
#include "comem/common.h"
#include "os/user_win.h"
#include "os/wide_win.h"

#define SIM_STORE_WAIT_MS 2000 /* how long an opener waits for the maker to fill a new card */

struct sim_store {
    HANDLE section;
    void *mem;
};

/* The card's section's name: this user's, this layout's, this path's. */
static int section_name(const char *path, uint32_t version, wchar_t **out)
{
    char kind[32];
    snprintf(kind, sizeof kind, "sim-v%u", (unsigned)version);
    *out = comem_user_object_name(kind, path);
    return *out ? COMEM_OK : COMEM_EIO;
}

int comem_sim_store_open(const char *path, bool replace_other_layout, const sim_store_layout *layout,
                         sim_store **out, void **mem)
{
    (void)replace_other_layout; /* the version is in the name: another layout is never met */
    wchar_t *name = NULL;
    int rc = section_name(path, layout->version, &name);
    if (rc != COMEM_OK)
        return rc;
    SECURITY_ATTRIBUTES sa;
    if (!comem_user_only(&sa)) {
        free(name);
        return COMEM_EIO;
    }
    uint64_t size = layout->size;
    HANDLE h = CreateFileMappingW(INVALID_HANDLE_VALUE, &sa, PAGE_READWRITE, (DWORD)(size >> 32), (DWORD)size, name);
    DWORD err = GetLastError();
    free(name);
    LocalFree(sa.lpSecurityDescriptor);
    if (!h) {
        comem_error("sim: cannot open the simulated card %s (error %lu)%s", path, (unsigned long)err,
                    err == ERROR_ACCESS_DENIED ? ": another user holds its name" : "");
        return err == ERROR_ACCESS_DENIED ? COMEM_EPERM : COMEM_EIO;
    }
    bool made = err != ERROR_ALREADY_EXISTS;
    if (!made && !comem_user_owns(h)) {
        comem_error("sim: refusing the simulated card %s: another user made its section", path);
        CloseHandle(h);
        return COMEM_EPERM;
    }
    void *m = MapViewOfFile(h, FILE_MAP_READ | FILE_MAP_WRITE, 0, 0, layout->size);
    sim_store *st = m ? malloc(sizeof *st) : NULL;
    if (!st) {
        if (m)
            UnmapViewOfFile(m);
        CloseHandle(h);
        return m ? COMEM_ENOMEM : COMEM_EIO;
    }
    rc = made ? layout->init(m, layout->ctx) : COMEM_OK;
    /* One that another process made is used once its maker has filled it (init sets the magic last). */
    for (int waited = 0; rc == COMEM_OK && !layout->is_ours(m); waited += 10) {
        if (waited >= SIM_STORE_WAIT_MS) {
            comem_error("sim: the simulated card %s was never filled by the process that made it", path);
            rc = COMEM_EIO;
            break;
        }
        Sleep(10);
    }
    if (rc != COMEM_OK) {
        UnmapViewOfFile(m);
        CloseHandle(h);
        free(st);
        return rc;
    }
    *st = (sim_store){.section = h, .mem = m};
    *out = st;
    *mem = m;
    return COMEM_OK;
}

void comem_sim_store_close(sim_store *st)
{
    if (!st)
        return;
    UnmapViewOfFile(st->mem);
    CloseHandle(st->section);
    free(st);
}
