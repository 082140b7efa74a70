/* shm/view_file_win.c - the view beside the pipe on Windows (shm/view_file.h): a named section and a named event. */
#include "shm/view_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <windows.h>

#include "base/log.h"
#include "comem/common.h"
#include "os/user_win.h"
#include "os/wide_win.h"

struct view_file {
    HANDLE section;
    HANDLE alive; /* the writer's event, held for life; NULL in a reader */
    void *mem;
    wchar_t *alive_name;
};

/* The name of the view's section or event (what): this user's, this layout's, this view's. */
static wchar_t *object_name(const char *what, const char *path, uint32_t version)
{
    char kind[48];
    snprintf(kind, sizeof kind, "view-%s-v%u", what, (unsigned)version);
    return comem_user_object_name(kind, path);
}

static void close_file(view_file *f)
{
    if (f->mem)
        UnmapViewOfFile(f->mem);
    if (f->section)
        CloseHandle(f->section);
    if (f->alive)
        CloseHandle(f->alive);
    free(f->alive_name);
    free(f);
}

int comem_view_file_create(const char *path, const view_file_layout *layout, view_file **out, void **mem)
{
    view_file *f = calloc(1, sizeof *f);
    wchar_t *name = object_name("map", path, layout->version);
    SECURITY_ATTRIBUTES sa = {0};
    if (!f || !name || !(f->alive_name = object_name("alive", path, layout->version)) || !comem_user_only(&sa)) {
        free(name);
        if (f)
            close_file(f);
        return COMEM_ENOMEM;
    }
    uint64_t size = layout->size;
    f->section = CreateFileMappingW(INVALID_HANDLE_VALUE, &sa, PAGE_READWRITE, (DWORD)(size >> 32), (DWORD)size, name);
    bool made = f->section && GetLastError() != ERROR_ALREADY_EXISTS;
    free(name);
    int rc = COMEM_OK;
    if (!f->section || (!made && !comem_user_owns(f->section))) {
        comem_error("refusing the status view %s: another user holds its name", path);
        rc = COMEM_EPERM;
    } else if (!(f->mem = MapViewOfFile(f->section, FILE_MAP_READ | FILE_MAP_WRITE, 0, 0, layout->size))) {
        rc = COMEM_EIO;
    } else if (made) {
        rc = layout->init(f->mem, layout->ctx);
    } else if (layout->judge(f->mem, 16, (int64_t)layout->size) != VIEW_FILE_OURS) {
        comem_error("refusing the status view %s: what has its name is not a comem view", path);
        rc = COMEM_EPERM; /* reused in place otherwise: readers that mapped it keep working */
    }
    if (rc == COMEM_OK) {
        f->alive = CreateEventW(&sa, TRUE, FALSE, f->alive_name);
        if (!f->alive)
            comem_warn("cannot mark the status view %s as live: readers cannot tell whether this coordinator runs",
                       path);
    }
    LocalFree(sa.lpSecurityDescriptor);
    if (rc != COMEM_OK) {
        close_file(f);
        return rc;
    }
    *out = f;
    *mem = f->mem;
    return COMEM_OK;
}

int comem_view_file_open(const char *path, const view_file_layout *layout, view_file **out, const void **mem)
{
    view_file *f = calloc(1, sizeof *f);
    wchar_t *name = object_name("map", path, layout->version);
    if (!f || !name || !(f->alive_name = object_name("alive", path, layout->version))) {
        free(name);
        if (f)
            close_file(f);
        return COMEM_ENOMEM;
    }
    f->section = OpenFileMappingW(FILE_MAP_READ | READ_CONTROL, FALSE, name); /* READ_CONTROL: to ask its owner */
    DWORD err = GetLastError();
    free(name);
    int rc = COMEM_OK;
    if (!f->section)
        rc = err == ERROR_FILE_NOT_FOUND ? COMEM_ENOENT : err == ERROR_ACCESS_DENIED ? COMEM_EPERM : COMEM_EIO;
    else if (!comem_user_owns(f->section))
        rc = COMEM_EPERM; /* another user's under the name */
    else if (!(f->mem = MapViewOfFile(f->section, FILE_MAP_READ, 0, 0, layout->size)))
        rc = COMEM_EPERM; /* smaller than a view */
    if (rc != COMEM_OK) {
        close_file(f);
        return rc;
    }
    *out = f;
    *mem = f->mem;
    return COMEM_OK;
}

int comem_view_file_alive(view_file *f)
{
    if (f->alive)
        return 1; /* the writer asks of itself */
    HANDLE h = OpenEventW(SYNCHRONIZE, FALSE, f->alive_name);
    if (h) { /* it exists while the writer holds it: held for a moment here, then let go */
        CloseHandle(h);
        return 1;
    }
    return GetLastError() == ERROR_FILE_NOT_FOUND ? 0 : -1;
}

void comem_view_file_close(view_file *f)
{
    if (f)
        close_file(f);
}
