/* os/shm_win.c - shared memory on Windows (os/shm.h): unnamed sections, shared as handles duplicated into the peer. */
#include "os/shm.h"

#include <stdlib.h>
#include <string.h>
#include <windows.h>
#include <winternl.h>

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
    if (!m->section)
        return COMEM_EINVAL; /* it stopped sharing */
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

typedef NTSTATUS(NTAPI *query_object_fn)(HANDLE, OBJECT_INFORMATION_CLASS, PVOID, ULONG, PULONG);

/* ntdll's NtQueryObject, the one way to ask what kind of object a handle names and what it grants. */
static query_object_fn query_object(void)
{
    HMODULE nt = GetModuleHandleW(L"ntdll.dll");
    return nt ? (query_object_fn)(void (*)(void))GetProcAddress(nt, "NtQueryObject") : NULL;
}

/* Whether h is a handle of this process that names a section, and if so what it grants. */
static bool is_section(HANDLE h, ACCESS_MASK *granted)
{
    query_object_fn q = query_object();
    union {
        PUBLIC_OBJECT_TYPE_INFORMATION info;
        char bytes[sizeof(PUBLIC_OBJECT_TYPE_INFORMATION) + 64 * sizeof(WCHAR)];
    } type;
    PUBLIC_OBJECT_BASIC_INFORMATION basic;
    ULONG len = 0;
    if (!q || !NT_SUCCESS(q(h, ObjectTypeInformation, &type, sizeof type, &len)) ||
        !NT_SUCCESS(q(h, ObjectBasicInformation, &basic, sizeof basic, &len)))
        return false; /* not a handle here at all */
    static const WCHAR k_section[] = L"Section";
    const UNICODE_STRING *name = &type.info.TypeName;
    *granted = basic.GrantedAccess;
    return name->Length == sizeof k_section - sizeof(WCHAR) && memcmp(name->Buffer, k_section, name->Length) == 0;
}

void comem_shm_token_discard(comem_shm_token t)
{
    ACCESS_MASK granted;
    if (is_section((HANDLE)t, &granted))
        CloseHandle((HANDLE)t);
}

void comem_shm_stop_sharing(comem_shm *m)
{
    /* The mapping keeps the section alive: the handle was only needed to share it. */
    if (m->section)
        CloseHandle(m->section);
    m->section = NULL;
}

uint64_t comem_shm_token_number(comem_shm_token t, int place)
{
    (void)place; /* nothing rides beside the frame: the handle is the peer's already */
    return (uint64_t)t;
}

int comem_shm_token_named(uint64_t number, comem_shm_token *beside, int n, comem_shm_token *out)
{
    (void)beside;
    (void)n;
    *out = 0;
    if (number == 0)
        return COMEM_ENOENT;
    if (number > UINT32_MAX || (number & 3) != 0)
        return COMEM_EINVAL; /* handle values are small multiples of 4; this is none */
    *out = (comem_shm_token)number;
    return COMEM_OK;
}

int comem_shm_open(comem_shm_token t, size_t size, unsigned how, comem_shm **out)
{
    *out = NULL;
    HANDLE section = (HANDLE)t;
    ACCESS_MASK granted = 0;
    if (!is_section(section, &granted))
        return COMEM_EINVAL; /* a number that names something else of this process: left alone */
    bool writable = how & COMEM_SHM_WRITABLE;
    if ((how & COMEM_SHM_FROZEN) && (granted & SECTION_MAP_WRITE)) {
        CloseHandle(section);
        return COMEM_EPERM; /* a frozen region's shares never grant writing; this one does */
    }
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
    if (m->section)
        CloseHandle(m->section);
    free(m);
}
