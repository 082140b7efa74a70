/* os/shm_win.c - shared memory on Windows (os/shm.h): unnamed sections, shared as handles duplicated into the peer. */
#include "os/shm.h"

#include <stdlib.h>
#include <windows.h>

#include "comem/common.h"
#include "os/user_win.h"

struct comem_shm {
    HANDLE section;
    void *addr;
    size_t size;
    bool frozen;
};

int comem_shm_create(const char *what, size_t size, comem_shm **out)
{
    (void)what; /* unnamed: a name is one more thing another process could take first */
    *out = NULL;
    if (size == 0)
        return COMEM_EINVAL;
    comem_shm *m = calloc(1, sizeof *m);
    SECURITY_ATTRIBUTES sa;
    if (!m)
        return COMEM_ENOMEM;
    if (!comem_user_only(&sa)) {
        free(m);
        return COMEM_EIO;
    }
    uint64_t sz = size;
    m->section = CreateFileMappingW(INVALID_HANDLE_VALUE, &sa, PAGE_READWRITE, (DWORD)(sz >> 32), (DWORD)sz, NULL);
    LocalFree(sa.lpSecurityDescriptor);
    m->addr = m->section ? MapViewOfFile(m->section, FILE_MAP_READ | FILE_MAP_WRITE, 0, 0, size) : NULL;
    if (!m->addr) {
        DWORD err = GetLastError();
        if (m->section)
            CloseHandle(m->section);
        free(m);
        return err == ERROR_NOT_ENOUGH_MEMORY || err == ERROR_COMMITMENT_LIMIT ? COMEM_ENOMEM : COMEM_EIO;
    }
    m->size = size;
    *out = m;
    return COMEM_OK;
}

int comem_shm_freeze(comem_shm *m)
{
    m->frozen = true; /* shares from now are read-only handles, which cannot be mapped writable */
    return COMEM_OK;
}

int comem_shm_share(comem_shm *m, int64_t peer_pid, bool writable, comem_shm_token *out)
{
    if (writable && m->frozen)
        return COMEM_EPERM;
    if (peer_pid <= 0 || peer_pid > (int64_t)UINT32_MAX)
        return COMEM_ENOENT;
    HANDLE peer = OpenProcess(PROCESS_DUP_HANDLE, FALSE, (DWORD)peer_pid);
    if (!peer)
        return GetLastError() == ERROR_ACCESS_DENIED ? COMEM_EPERM : COMEM_ENOENT;
    HANDLE theirs = NULL;
    DWORD access = FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0);
    BOOL ok = DuplicateHandle(GetCurrentProcess(), m->section, peer, &theirs, access, FALSE, 0);
    CloseHandle(peer);
    if (!ok)
        return COMEM_EIO;
    *out = (comem_shm_token)theirs;
    return COMEM_OK;
}

void comem_shm_token_drop(comem_shm_token t) { (void)t; /* the handle is the peer's, not this process's */ }

int comem_shm_open(comem_shm_token t, size_t size, bool writable, comem_shm **out)
{
    *out = NULL;
    HANDLE section = (HANDLE)t;
    comem_shm *m = calloc(1, sizeof *m);
    if (!m) {
        CloseHandle(section);
        return COMEM_ENOMEM;
    }
    /* The whole section, mapped, must be size bytes (to the page: sections are sized in pages). */
    m->addr = size ? MapViewOfFile(section, FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0), 0, 0, 0) : NULL;
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    size_t page = si.dwPageSize, pages = (size + page - 1) / page * page;
    MEMORY_BASIC_INFORMATION mi;
    bool whole = m->addr && VirtualQuery(m->addr, &mi, sizeof mi) == sizeof mi && mi.RegionSize == pages;
    if (!m->addr || !whole) {
        int rc = !m->addr && GetLastError() == ERROR_ACCESS_DENIED ? COMEM_EPERM : COMEM_EINVAL;
        if (m->addr)
            UnmapViewOfFile(m->addr);
        CloseHandle(section);
        free(m);
        return rc;
    }
    m->section = section;
    m->size = size;
    *out = m;
    return COMEM_OK;
}

void *comem_shm_addr(const comem_shm *m) { return m->addr; }

size_t comem_shm_size(const comem_shm *m) { return m->size; }

void comem_shm_close(comem_shm *m)
{
    if (!m)
        return;
    UnmapViewOfFile(m->addr);
    CloseHandle(m->section);
    free(m);
}
